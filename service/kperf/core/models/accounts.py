"""Per-user API tokens for the REST API and the `kperf` CLI."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models


def hash_token(token: str) -> str:
    # Tokens are long random strings, so a plain digest is enough: there is
    # nothing to brute-force the way there is with a password.
    return hashlib.sha256(token.encode()).hexdigest()


class ApiToken(models.Model):
    PREFIX = "kperf_"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, default="cli")
    token_hash = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=16, help_text="first characters, to tell tokens apart")
    created = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.user} {self.name} ({self.hint}…)"

    @classmethod
    def issue(cls, user: object, name: str = "cli") -> tuple[ApiToken, str]:
        """Create a token and return it with its only plain-text copy."""
        plain = cls.PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(user=user, name=name, token_hash=hash_token(plain), hint=plain[:12])
        return token, plain
