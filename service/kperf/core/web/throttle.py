"""Failed-login throttling (django-axes): the backend and what a locked-out client is told.

After KPERF_LOGIN_FAILURE_LIMIT failed logins for one user name, or from
one client address, logins from there are refused for
KPERF_LOGIN_COOLOFF_MINUTES (docs/operations.md, "Login throttling"). The
API answers 429 `throttled` as JSON; the login form shows the message.
"""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render


class LoginThrottleBackend(AxesStandaloneBackend):  # type: ignore[misc]
    """django-axes' backend, except that a login with no request passes through.

    authenticate() without a request comes from code, not from a client
    (management commands, the test client's login()): there is no address
    to throttle, and axes would refuse it outright.
    """

    def authenticate(self, request: HttpRequest | None, *args: Any, **kwargs: Any) -> None:
        if request is None:
            return None
        super().authenticate(request, *args, **kwargs)
        return None


# The length of django-axes' username column. A longer name could not be
# stored: the failed login was a 500, and was never counted.
AXES_USERNAME_LENGTH = 255


def attempted_username(request: HttpRequest, credentials: dict[str, Any] | None = None) -> str | None:
    """The user name django-axes counts a login under (AXES_USERNAME_CALLABLE): the one typed,
    cut to the length axes stores. Names alike in their first 255 characters share one count,
    which only makes the throttle stricter; no account has a name that long (150 at most)."""
    field = getattr(settings, "AXES_USERNAME_FORM_FIELD", "username")  # axes' default, which kperf keeps
    # The credentials handed to authenticate(); else the form, as axes itself reads it.
    name = (credentials or getattr(request, "data", request.POST)).get(field)
    return name[:AXES_USERNAME_LENGTH] if isinstance(name, str) else name


def cooloff_minutes() -> int:
    return max(1, int(settings.AXES_COOLOFF_TIME.total_seconds() // 60))


def lockout_message() -> str:
    minutes = cooloff_minutes()
    return (
        f"too many failed logins for this user name or from this address: logins are refused for "
        f"{minutes} minute{'s' if minutes != 1 else ''} after the last failed one; try again then "
        "(an operator can lift it at once: `kperf-manage axes_reset`)"
    )


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: Any = None
) -> HttpResponse:
    """What django-axes' middleware answers a locked-out login with (AXES_LOCKOUT_CALLABLE)."""
    retry_after = cooloff_minutes() * 60
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse(
            {"detail": lockout_message(), "code": "throttled", "retry_after": retry_after}, status=429
        )
    else:
        form = AuthenticationForm(request)
        context = {"form": form, "locked_out": lockout_message()}
        response = render(request, "kperf/login.html", context, status=429)
    response["Retry-After"] = str(retry_after)
    return response
