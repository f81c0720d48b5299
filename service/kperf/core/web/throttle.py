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
