"""Confirming an address for a user's result mails (docs/submitting.md, "Who gets the result mail").

The user asks (POST /api/v1/addresses, the /addresses page, `kperf
addresses confirm ADDR`); kperf mails the address once a link holding a
token (256 random bits; only its sha256 is stored). Whoever reads the
address opens the link and presses Confirm: a POST, because mail scanners
and link previews open every link in a mail and must confirm nothing.
From then on the user's submissions may name the address
(kperf.core.mail.recipients).

Asking again while the link still works mails nothing; after it expired
(KPERF_MAIL_CONFIRM_DAYS) it mails a new one. Each mail counts against the
user's KPERF_MAIL_CONFIRMATIONS_PER_DAY, counted under the user's lock, so
the requests of one user cannot make kperf mail more strangers than that.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.utils import timezone
from typing_extensions import TypedDict

from kperf.core.mail import alerts, recipients
from kperf.core.mail.recipients import RecipientError
from kperf.core.models import Alert, RecipientAddress, TrackedBranch

log = logging.getLogger(__name__)

# own: the user's own address; allowed: the operator allows it for everyone;
# confirmed; pending: a link was mailed and still works; expired: it no longer does.
STATES = ("own", "allowed", "confirmed", "pending", "expired")


class AddressInfo(TypedDict):
    """An address the user asked about, as the API and `kperf addresses` show it; times in ISO 8601."""

    address: str
    state: str
    requested: str | None
    expires: str | None
    confirmed: str | None


def _iso(when: datetime | None) -> str | None:
    return when.isoformat() if when is not None else None


@dataclass(frozen=True)
class AddressState:
    address: str
    state: str
    requested: datetime | None = None
    expires: datetime | None = None
    confirmed: datetime | None = None

    def as_dict(self) -> AddressInfo:
        return {
            "address": self.address,
            "state": self.state,
            "requested": _iso(self.requested),
            "expires": _iso(self.expires),
            "confirmed": _iso(self.confirmed),
        }


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def clean(address: str) -> str:
    """The address, lower case; RecipientError (400) when it is not one."""
    addr = address.strip()
    try:
        validate_email(addr)
    except ValidationError:
        raise RecipientError(
            400, "invalid-address", f"{addr[:100]!r} is not an e-mail address: give one like dev@example.org"
        ) from None
    return addr.lower()


def state_of(row: RecipientAddress) -> AddressState:
    state = "confirmed" if row.confirmed is not None else "pending" if row.expires > timezone.now() else "expired"
    return AddressState(row.address, state, row.requested, row.expires, row.confirmed)


def listing(user: User) -> list[AddressState]:
    """The addresses the user asked kperf to confirm, and where each stands."""
    return [state_of(row) for row in RecipientAddress.objects.filter(user=user)]


def request(user: User, address: str) -> tuple[AddressState, bool]:
    """Ask that `address` may get the user's results: (where it stands, whether a link was mailed now).

    RecipientError: not an address (400), or the user's confirmation mails
    for the day are used up (429).
    """
    addr = clean(address)
    if addr == recipients.own_address(user):
        return AddressState(addr, "own"), False
    if recipients.operator_allows(addr):
        return AddressState(addr, "allowed"), False
    with transaction.atomic():
        recipients.lock([user.pk])
        now = timezone.now()
        row = RecipientAddress.objects.select_for_update().filter(user=user, address=addr).first()
        if row is not None and (row.confirmed is not None or row.expires > now):
            # Confirmed, or a link that still works is in that mailbox: kperf mails an address once.
            return state_of(row), False
        since = now - recipients.DAY
        asked = Alert.objects.filter(owner=user, kind=Alert.Kind.CONFIRM, created__gte=since).count()
        limit = settings.KPERF_MAIL_CONFIRMATIONS_PER_DAY
        if asked >= limit:
            first = (
                Alert.objects.filter(owner=user, kind=Alert.Kind.CONFIRM, created__gte=since)
                .order_by("created")
                .values_list("created", flat=True)
                .first()
            )
            retry = max(1, int(((first or now) + recipients.DAY - now).total_seconds()))
            raise RecipientError(
                429,
                "confirmation-limit",
                f"you asked kperf to confirm {asked} addresses in the last 24 hours, and it mails at most {limit} "
                f"such requests a day for one user (KPERF_MAIL_CONFIRMATIONS_PER_DAY): ask again in "
                f"{retry // 3600} h {retry % 3600 // 60} min, or ask the operator to allow the address",
                [addr],
                retry,
            )
        token = secrets.token_urlsafe(32)
        expires = now + timedelta(days=settings.KPERF_MAIL_CONFIRM_DAYS)
        row, _ = RecipientAddress.objects.update_or_create(
            user=user,
            address=addr,
            defaults={"token_hash": token_hash(token), "requested": now, "expires": expires, "confirmed": None},
        )
        alerts.address_confirmation(user, row, token)
    return state_of(row), True


def pending(token: str) -> RecipientAddress | None:
    """The address a confirmation link names, while the link works (None: unknown, used or expired)."""
    if not token:
        return None
    row = RecipientAddress.objects.select_related("user").filter(token_hash=token_hash(token)).first()
    if row is None or row.confirmed is not None or row.expires <= timezone.now():
        return None
    return row


def confirm(token: str) -> RecipientAddress | None:
    """Confirm the address whose link holds `token`; None when the link does not work."""
    with transaction.atomic():
        row = pending(token)
        if row is None:
            return None
        row = RecipientAddress.objects.select_for_update().select_related("user").get(pk=row.pk)
        if row.confirmed is None:
            row.confirmed, row.token_hash = timezone.now(), ""
            row.save(update_fields=["confirmed", "token_hash"])
    return row


def remove(user: User, address: str) -> bool:
    """Forget an address the user asked about (confirmed or not); False when there was none."""
    deleted, _ = RecipientAddress.objects.filter(user=user, address=address.strip().lower()).delete()
    return bool(deleted)


def ask_watchers(branch: TrackedBranch) -> list[str]:
    """Ask the `notify` addresses kperf may not mail yet to confirm, for the branch's owner; those mailed now.

    An address is mailed once while its link works (request), so tracking
    the branch again asks nobody twice; the owner's
    KPERF_MAIL_CONFIRMATIONS_PER_DAY stops the asking, and the rest are
    asked when the branch is tracked again. Until an address is confirmed
    the branch's regressions are not mailed to it (recipients.branch_watchers).
    """
    _, waiting = recipients.branch_watchers(branch)
    asked: list[str] = []
    for address in waiting:
        try:
            _, mailed = request(branch.owner, address)
        except RecipientError as e:
            log.warning("branch %s: %s not asked to confirm: %s", branch.pk, address, e.message)
            break
        if mailed:
            asked.append(address)
    return asked
