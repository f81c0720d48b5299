"""Bearer-token authentication: users', runners' and build machines' tokens never mix."""

from __future__ import annotations

from typing import Any, TypeVar

from django.contrib.auth.models import AbstractBaseUser, User
from django.http import HttpRequest
from django.utils import timezone
from ninja.security import HttpBearer, SessionAuth

from kperf.core.builds import machines
from kperf.core.lab import leases
from kperf.core.lifecycle import states
from kperf.core.models import ApiToken, BuildMachine, Runner
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
        states.name_actor(f"user {row.user.get_username()} (API token)")
        return row.user


class RunnerToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Runner | None:
        runner = leases.runner_for_token(token)
        if runner is not None:
            states.name_actor(f"runner {runner.name}")
        return runner


class BuilderToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> BuildMachine | None:
        machine = machines.machine_for_token(token)
        if machine is not None:
            states.name_actor(f"build machine {machine.name}")
        return machine


class BrowserSession(SessionAuth):
    """The web pages' session (with CSRF), so the browser can read the same JSON the CLI does.

    Only for requests that carry no Authorization header and do carry a
    session cookie: a client that sent a token meant the token, and a bad
    one must get 401 bad-token, not a CSRF failure from a session it never had.
    """

    def __call__(self, request: HttpRequest) -> Any | None:
        if "Authorization" in request.headers or self.param_name not in request.COOKIES:
            return None
        return super().__call__(request)


USER_AUTH: list[Any] = [UserToken(), BrowserSession()]
RUNNER_AUTH = RunnerToken()
BUILDER_AUTH = BuilderToken()


_Auth = TypeVar("_Auth")


# What a view's `auth=` put on request.auth, typed: django-ninja sets the attribute at run time,
# and HttpRequest's type does not have it.
def user_of(request: HttpRequest) -> User:
    """The signed-in user of a request authenticated by UserToken or BrowserSession."""
    return _authenticated(request, User)


def runner_of(request: HttpRequest) -> Runner:
    """The runner of a request authenticated by RunnerToken."""
    return _authenticated(request, Runner)


def machine_of(request: HttpRequest) -> BuildMachine:
    """The build machine of a request authenticated by BuilderToken."""
    return _authenticated(request, BuildMachine)


def _authenticated(request: HttpRequest, kind: type[_Auth]) -> _Auth:
    auth = getattr(request, "auth", None)
    if not isinstance(auth, kind):
        # A view wired to the wrong auth= class: a bug, answered as one (500 with an incident id).
        raise TypeError(f"request.auth is {type(auth).__name__}, not the {kind.__name__} this view needs")
    return auth
