"""A password hasher for tests: Django's PBKDF2 with one iteration.

Django's PBKDF2 runs 1,000,000 iterations, about 0.3 s a password on a
test machine, and the service tests create users by the hundred. The hashes
keep Django's `pbkdf2_sha256$<iterations>$...` form, so a kperf process
started by a test with the production hashers still checks them (the
iteration count is read from the hash) and upgrades them on login.
"""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class QuickPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1
