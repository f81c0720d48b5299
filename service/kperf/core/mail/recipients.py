"""Who kperf mails besides the user (docs/submitting.md, "Who gets the result mail").

A submission's result goes to its owner and to the addresses they named
(`mail_to`); a tracked branch's regressions to its owner and the addresses
of its `notify` list (at most NOTIFY_MAX). kperf mails a named address only
when it is

- the owner's own address,
- an address the owner confirmed (kperf.core.mail.confirmations: kperf mailed it
  a link, and whoever reads it followed the link), or
- one the operator allows for everyone (KPERF_MAIL_ALLOWED_RECIPIENTS: an
  address, or a whole domain, such as the lab's mailing lists).

Any other address is refused when the submission is made (RecipientError,
400, saying how to confirm it), and left out of the mail should one reach
it anyway (a submission made before this rule): otherwise anyone with an
account could have kperf mail anyone. A `notify` address is kept, asked to
confirm when the branch is tracked, and left out of the branch's mail
until its reader has (branch_watchers). The lab's reference series, the
branches staff own, mail their watchers as named: staff are the operators,
who could allow any address anyway.

Every address besides the owner's own counts against the owner's
KPERF_MAIL_EXTRA_RECIPIENTS_PER_DAY twice: when a submission names it (a
429), and when the mail goes out (an Alert carries its owner; addresses
over the limit are left out), so neither a burst of submissions nor the
mails of many submissions finishing at once get past it. Each count holds
a per-user PostgreSQL advisory lock until its transaction ends, so two
requests at once are counted one after the other.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from kperf.core.models import Alert, RecipientAddress, Submission, TrackedBranch

# The first key of the per-user advisory lock (the second is the user's id).
LOCK_SPACE = zlib.crc32(b"kperf.recipients") - (1 << 31)
DAY = timedelta(days=1)
# How many addresses a tracked branch's `notify` may name.
NOTIFY_MAX = 10


class RecipientError(Exception):
    """A refused recipient or request: the HTTP status, a code clients act on, and what to do."""

    def __init__(self, status: int, code: str, message: str, addresses: Iterable[str] = (), retry_after: int = 0):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.addresses = list(addresses)
        self.retry_after = retry_after


def lock(user_ids: Iterable[int]) -> None:
    """Hold each user's recipient lock to the end of the transaction; in id order, so two holders never deadlock."""
    with connection.cursor() as cursor:
        for uid in sorted(set(user_ids)):
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [LOCK_SPACE, uid % (1 << 31)])


def own_address(user: User) -> str:
    return (user.email or "").strip().lower()


def operator_allows(address: str) -> bool:
    """Whether KPERF_MAIL_ALLOWED_RECIPIENTS names the address, or its domain (an entry without '@')."""
    address = address.strip().lower()
    domain = address.rpartition("@")[2]
    return any(e == address or ("@" not in e and e == domain) for e in settings.KPERF_MAIL_ALLOWED_RECIPIENTS)


def extra(user: User, addresses: Iterable[str]) -> list[str]:
    """The addresses besides the user's own, lower case, each once, in the order given."""
    own = own_address(user)
    out = dict.fromkeys(a.strip().lower() for a in addresses)
    return [a for a in out if a and a != own]


def unconfirmed(user: User, addresses: Iterable[str]) -> list[str]:
    """Of `addresses`, those kperf may not mail for this user: not theirs, not confirmed, not allowed."""
    extras = extra(user, addresses)
    confirmed = set(
        RecipientAddress.objects.filter(user=user, address__in=extras, confirmed__isnull=False).values_list(
            "address", flat=True
        )
    )
    return [a for a in extras if a not in confirmed and not operator_allows(a)]


def how_to_confirm(addresses: list[str]) -> str:
    """The refusal of unconfirmed addresses, saying how to confirm them."""
    allowed = settings.KPERF_MAIL_ALLOWED_RECIPIENTS
    lists = f" and those this service allows ({', '.join(allowed[:5])}{', ...' if len(allowed) > 5 else ''})"
    one = len(addresses) == 1
    return (
        f"kperf mails your own address, addresses you confirmed{lists if allowed else ''}; "
        f"{', '.join(addresses)} {'is' if one else 'are'} not confirmed. Ask kperf to confirm "
        f"{'it' if one else 'each'}: `kperf addresses confirm ADDR`, POST /api/v1/addresses "
        f'{{"address": "ADDR"}}, or {settings.KPERF_BASE_URL}/addresses. kperf mails the address a link; '
        "once it is followed, submit again. Or submit without it: the result still comes to you."
    )


def _sent_extras(user: User, exclude: int) -> int:
    """How many recipients besides the user kperf mailed for them in the last day (but alert `exclude`)."""
    sent = (
        Alert.objects.filter(owner=user, status=Alert.Status.SENT, sent__gte=timezone.now() - DAY)
        .exclude(kind=Alert.Kind.CONFIRM)
        .exclude(pk=exclude)
        .values_list("recipients", flat=True)
    )
    return sum(len(extra(user, to)) for to in sent)


def check_submission(user: User, mail_to: list[str]) -> None:
    """Refuse a submission's recipients: unconfirmed ones (400), or over the daily limit (429).

    Called in the transaction that creates the submission: the user's lock
    is held until it commits, so the next submission counts this one.
    """
    refused = unconfirmed(user, mail_to)
    if refused:
        raise RecipientError(400, "unconfirmed-recipients", how_to_confirm(refused), refused)
    new = extra(user, mail_to)
    if not new:
        return
    lock([user.pk])
    now = timezone.now()
    recent = Submission.objects.filter(owner=user, created__gte=now - DAY).order_by("created")
    counted = [(c, len(extra(user, m))) for c, m in recent.values_list("created", "mail_to")]
    used = sum(n for _, n in counted)
    limit = settings.KPERF_MAIL_EXTRA_RECIPIENTS_PER_DAY
    if used + len(new) <= limit:
        return
    # The earliest time enough of the day's addresses have left the window.
    freed, wait_until = 0, now + DAY
    for created, n in counted:
        freed += n
        if used - freed + len(new) <= limit:
            wait_until = created + DAY
            break
    retry = max(1, int((wait_until - now).total_seconds()))
    raise RecipientError(
        429,
        "recipient-limit",
        f"this submission would have kperf mail {len(new)} address{'es' if len(new) != 1 else ''} besides yours, "
        f"and your submissions of the last 24 hours already named {used}: kperf mails at most {limit} a day "
        f"for one user (KPERF_MAIL_EXTRA_RECIPIENTS_PER_DAY). Submit without mail_to (the result still comes "
        f"to you), or again in {retry // 3600} h {retry % 3600 // 60} min.",
        new,
        retry,
    )


def permitted(user: User, addresses: list[str]) -> tuple[list[str], list[str]]:
    """(the addresses kperf may mail for the user, as given; those it may not, lower case)."""
    refused = set(unconfirmed(user, addresses))
    return [a for a in addresses if a.strip().lower() not in refused], sorted(refused)


def within_limit(alert: Alert) -> list[str]:
    """Leave out the alert's recipients besides its owner that would pass the owner's daily limit.

    Returns those left out (alert.recipients no longer has them). The
    caller holds the owner's lock and marks the alert sent in the same
    transaction, so the next alert of the owner counts this one.
    """
    owner = alert.owner
    if owner is None or alert.kind == Alert.Kind.CONFIRM:
        return []
    extras = extra(owner, alert.recipients)
    if not extras:
        return []
    used = _sent_extras(owner, exclude=alert.pk)
    room = max(0, settings.KPERF_MAIL_EXTRA_RECIPIENTS_PER_DAY - used)
    dropped = set(extras[room:])
    alert.recipients = [r for r in alert.recipients if r.strip().lower() not in dropped]
    return [a for a in extras if a in dropped]


def vouched_by_operator(branch: TrackedBranch) -> bool:
    """Whether the branch's `notify` is mailed as named: the lab's reference series, owned by (active) staff."""
    return bool(branch.owner.is_active and branch.owner.is_staff)


def branch_watchers(branch: TrackedBranch) -> tuple[list[str], list[str]]:
    """(the `notify` addresses a branch's regressions go to, those left out until their readers confirm)."""
    notify = list(branch.notify)[:NOTIFY_MAX]
    if vouched_by_operator(branch):
        return notify, []
    return permitted(branch.owner, notify)
