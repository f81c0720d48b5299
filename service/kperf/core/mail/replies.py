"""Reply tokens: the Reply-To of a regression's alert, and the headers kperf's own answers carry.

An alert about a regression (a submission with regression verdicts, a
regression change point) is written with a random token tied to its
Triage; the mail's Reply-To is `<KPERF_MAIL_LOCAL_PART>+<token>@<KPERF_MAIL_DOMAIN>`.
A reply to that address is read by kperf.core.mail.inbound. Without
KPERF_MAIL_DOMAIN no token is handed out and alerts have no Reply-To;
nor is one when the alert goes to anyone who may not triage it (see issue).
"""

from __future__ import annotations

import re
import secrets
from datetime import timedelta
from email.utils import parseaddr

from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from kperf.core import triage as triage_mod
from kperf.core.models import Alert, ReplyToken, Triage

# 128 random bits, as hex: mail systems may fold the case of local parts.
TOKEN_BYTES = 16
_TOKEN_RE = re.compile(r"^[0-9a-f]{32}$")


def enabled() -> bool:
    return bool(settings.KPERF_MAIL_DOMAIN)


def address(token: str) -> str:
    return f"{settings.KPERF_MAIL_LOCAL_PART}+{token}@{settings.KPERF_MAIL_DOMAIN}"


def _may_triage(address: str, row: Triage) -> bool:
    users = get_user_model().objects.filter(email__iexact=address, is_active=True)
    return any(triage_mod.may_triage(user, row) for user in users)


def people(row: Triage) -> set[str]:
    """The addresses a regression's reply token may reach: those of active accounts that may triage it.

    Of its submission's owner, its branch's owner and watchers (`notify`),
    only the addresses of an active kperf account that may triage it count
    (kperf.core.triage.may_triage). A watcher address may be a mailing
    list, or a person without an account: a token mailed there sits in
    archives and other people's hands, and anyone could reply with a
    forged From of the owner.
    """
    if row.submission_id is not None:
        emails = [row.submission.owner.email] if row.submission is not None else []
    elif row.branch is not None:
        emails = [row.branch.owner.email, *row.branch.notify]
    else:
        emails = []
    addresses = {parseaddr(e)[1].strip().lower() for e in emails} - {""}
    return {a for a in addresses if _may_triage(a, row)}


def issue(alert: Alert | None, row: Triage | None) -> ReplyToken | None:
    """Give a regression's alert its reply token (caller's transaction); the same one when asked again.

    Only when every recipient of the alert is someone who may triage it
    (people): not for an alert that also goes elsewhere (a patch series'
    answer copied to its mailing list, a branch's `notify` list naming a
    mailing list or someone without the right): a Reply-To would pull the
    list's replies away from the list, and hand the token to all its
    readers. Such an alert goes without a Reply-To.
    """
    if alert is None or row is None or not enabled() or alert.kind == Alert.Kind.REPLY:
        return None
    if {parseaddr(r)[1].strip().lower() for r in alert.recipients} - people(row):
        return None
    token, _ = ReplyToken.objects.get_or_create(
        alert=alert,
        defaults={
            "triage": row,
            "token": secrets.token_hex(TOKEN_BYTES),
            "expires": timezone.now() + timedelta(days=settings.KPERF_MAIL_REPLY_DAYS),
        },
    )
    return token


def token_of(recipient: str) -> str | None:
    """The token in one of kperf's reply addresses, or None for any other address.

    `kperf+<token>@<domain>` in any case; the domain must be kperf's, so a
    listener an MTA forwards other mail to does not take it for a reply.
    """
    addr = parseaddr(recipient)[1].strip().lower()
    local, at, domain = addr.rpartition("@")
    if not at or domain != settings.KPERF_MAIL_DOMAIN:
        return None
    base, plus, token = local.partition("+")
    if not plus or base != settings.KPERF_MAIL_LOCAL_PART or not _TOKEN_RE.match(token):
        return None
    return token


def is_reply_address(recipient: str) -> bool:
    """Whether an address is kperf's to read: its local part with or without a token, at its domain."""
    addr = parseaddr(recipient)[1].strip().lower()
    local, _, domain = addr.rpartition("@")
    return domain == settings.KPERF_MAIL_DOMAIN and local.partition("+")[0] == settings.KPERF_MAIL_LOCAL_PART


def headers(alert: Alert) -> dict[str, str]:
    """The headers an alert adds to the ones every kperf mail has (kperf.core.mail.alerts.send_pending)."""
    if alert.kind == Alert.Kind.REPLY:
        # RFC 3834: an answer to a person's mail is auto-replied, so their
        # vacation robot stays quiet (it threads by Alert.in_reply_to).
        return {"Auto-Submitted": "auto-replied"}
    token = ReplyToken.objects.filter(alert=alert).values_list("token", flat=True).first()
    if token is None or not enabled():
        return {}
    return {"Reply-To": address(token)}
