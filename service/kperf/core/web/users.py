"""The signed-in user of a page request, typed.

Behind @login_required, `request.user` is a User, but its declared type is
`User | AnonymousUser`, which the domain's functions do not take. This says
so once, and checks it, instead of a `type: ignore` at every call.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest


def signed_in(request: HttpRequest) -> User:
    """The request's user; PermissionDenied (403) for a view that forgot @login_required."""
    user = request.user
    if not isinstance(user, User) or not user.is_authenticated:
        raise PermissionDenied("sign in first")
    return user
