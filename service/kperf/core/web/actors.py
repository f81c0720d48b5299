"""Who a web request is, for the history of the status changes it makes (kperf.core.lifecycle.states)."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase

from kperf.core.lifecycle import states


def _describe(request: HttpRequest) -> Callable[[], str]:
    def name() -> str:
        # Asked only when a change is made; the API's token classes name their own.
        user = getattr(request, "user", None)
        who = f"user {user.get_username()}" if user is not None and user.is_authenticated else "anonymous"
        return f"{who} ({request.method} {request.path})"

    return name


class ActorMiddleware:
    """Every status change a request makes is recorded as that request's (after AuthenticationMiddleware)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        with states.acting_as(_describe(request)):
            return self.get_response(request)
