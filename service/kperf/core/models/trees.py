"""Git trees that kernels are built from."""

from __future__ import annotations

import hashlib
from pathlib import Path

from django.conf import settings
from django.db import models


class Tree(models.Model):
    url = models.CharField(max_length=1000, unique=True)
    created = models.DateTimeField(auto_now_add=True)
    last_fetched = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.url

    @property
    def mirror_path(self) -> Path:
        # Named by a digest of the URL so any URL maps to a safe directory name.
        digest = hashlib.sha256(self.url.encode()).hexdigest()[:16]
        return Path(settings.KPERF_MIRROR_ROOT) / f"{digest}.git"
