"""Web pages for the addresses a user has results mailed to (docs/submitting.md, "Who gets the result mail").

/addresses: the user's addresses and where each stands; ask kperf to
confirm one, or forget one. /addresses/confirm/<token>: the page the link
in a confirmation mail opens, for whoever reads that address, signed in or
not. Opening it changes nothing (mail scanners open every link in a mail);
its Confirm button, a POST with Django's CSRF token, confirms.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from kperf.core.mail import confirmations
from kperf.core.mail.recipients import RecipientError
from kperf.core.web.users import signed_in


@login_required
def addresses(request: HttpRequest) -> HttpResponse:
    said, error, status = "", "", 200
    if request.method == "POST":
        address = request.POST.get("address", "")
        try:
            if request.POST.get("action") == "remove":
                removed = confirmations.remove(signed_in(request), address)
                said = f"{address} forgotten." if removed else f"{address} was not in your list."
            else:
                state, mailed = confirmations.request(signed_in(request), address)
                said = {
                    "own": f"{state.address} is your own address: kperf mails it without asking.",
                    "allowed": f"{state.address} is allowed by this service for everyone: no confirmation needed.",
                    "confirmed": f"{state.address} is confirmed already.",
                }.get(state.state, "")
                if not said:
                    when = f"{state.expires:%Y-%m-%d %H:%M} UTC" if state.expires else "its expiry"
                    sent = "kperf mailed" if mailed else "kperf already mailed"
                    said = f"{sent} {state.address} a link; once it is followed (before {when}), you may name it."
        except RecipientError as e:
            error, status = e.message, e.status
    return render(
        request,
        "kperf/addresses.html",
        {
            "rows": confirmations.listing(signed_in(request)),
            "allowed": settings.KPERF_MAIL_ALLOWED_RECIPIENTS,
            "said": said,
            "error": error,
        },
        status=status,
    )


def confirm(request: HttpRequest, token: str) -> HttpResponse:
    row = confirmations.pending(token)
    if row is None:
        return render(request, "kperf/address_confirm.html", {"row": None}, status=404)
    done = False
    if request.method == "POST":
        done = confirmations.confirm(token) is not None
    return render(request, "kperf/address_confirm.html", {"row": row, "done": done})
