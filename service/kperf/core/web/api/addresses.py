"""The API for the addresses a user has results mailed to (docs/submitting.md, "Who gets the result mail")."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router, Schema, Status

from kperf.core.mail import confirmations
from kperf.core.mail.recipients import RecipientError
from kperf.core.web.api.auth import USER_AUTH, user_of
from kperf.core.web.api.errors import ApiError, responses
from kperf.core.web.shapes import AddressRemoved, AddressRequested

router = Router()


class AddressIn(Schema):
    address: str


def _refused(e: RecipientError) -> ApiError:
    extra = {"retry_after": e.retry_after} if e.retry_after else {}
    return ApiError(e.status, e.code, e.message, field="address", **extra)


@router.get(
    "/addresses", auth=USER_AUTH, tags=["accounts"], response=responses(200, list[confirmations.AddressInfo], 401)
)
def list_addresses(request: HttpRequest) -> list[confirmations.AddressInfo]:
    """The addresses you asked kperf to confirm: pending (a link was mailed), confirmed or expired."""
    return [s.as_dict() for s in confirmations.listing(user_of(request))]


@router.post(
    "/addresses",
    auth=USER_AUTH,
    tags=["accounts"],
    response={200: AddressRequested, **responses(201, AddressRequested, 400, 401, 413, 415, 422, 429)},
)
def request_address(request: HttpRequest, payload: AddressIn) -> Status[AddressRequested]:
    """Ask kperf to confirm an address for your result mails: 201 when a link was mailed to it,
    200 when nothing needed mailing (your own, allowed by the operator, confirmed, or a link still works)."""
    try:
        state, mailed = confirmations.request(user_of(request), payload.address)
    except RecipientError as e:
        raise _refused(e) from None
    return Status(201 if mailed else 200, {**state.as_dict(), "mailed": mailed})


@router.delete(
    "/addresses/{address}", auth=USER_AUTH, tags=["accounts"], response=responses(200, AddressRemoved, 401, 404, 422)
)
def remove_address(request: HttpRequest, address: str) -> AddressRemoved:
    """Forget an address: your submissions may no longer name it (ask again to confirm it anew)."""
    if not confirmations.remove(user_of(request), address):
        raise ApiError(
            404, "not-found", f"you have not asked about {address[:100]!r}: GET /api/v1/addresses lists yours"
        )
    return {"address": address.strip().lower(), "removed": True}
