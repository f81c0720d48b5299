"""Bearer-token authentication: users' API tokens and runners' tokens never mix."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest
from django.utils import timezone
from ninja.security import HttpBearer, django_auth

from kperf.core import leases
from kperf.core.models import ApiToken, Runner
from kperf.core.models.accounts import hash_token


class UserToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> AbstractBaseUser | None:
        if not token.startswith(ApiToken.PREFIX):
            return None
        row = ApiToken.objects.select_related("user").filter(token_hash=hash_token(token)).first()
        if row is None or not row.user.is_active:
            return None
        ApiToken.objects.filter(pk=row.pk).update(last_used=timezone.now())
        request.user = row.user
        return row.user


class RunnerToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Runner | None:
        return leases.runner_for_token(token)


# The web pages' session also works on the user API (with CSRF), so the
# browser can read the same JSON the CLI does.
USER_AUTH: list[Any] = [UserToken(), django_auth]
RUNNER_AUTH = RunnerToken()
