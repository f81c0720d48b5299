"""Who wrote a mail: one From address, read strictly, and the receiving MTA's verdict on it (docs/triage.md).

A reply to an alert triages as the kperf account whose address is its
From. A From is whatever the sender typed, so kperf believes it only when

1. it is one plain mailbox that every reader of the header reads the same
   way. Refused: `alice@example.org <evil@evil.example>` (Python's own
   parser reads alice there, a DMARC checker evil.example), an address in
   the display name, a comment or an encoded word that is not the real
   one, several From headers or addresses, group syntax, routes, quoted
   local parts, domain literals, and a Sender that is not the From;
2. the MTA that received the mail for kperf vouches for that address in an
   Authentication-Results header (RFC 8601): `dmarc=pass` with
   `header.from` the From's domain, or `dkim=pass` by a domain aligned
   with it (relaxed alignment).

Only Authentication-Results headers whose authserv-id the operator named
(KPERF_MAIL_AUTHSERV_ID) are read, and as raw text: anyone can add such a
header to their mail, even one in the MTA's name written as an encoded
word so that the MTA does not recognise it as its own and remove it. The
MTA must remove headers claiming its authserv-id from mail it receives
(RFC 8601, section 5); as a second line, results that contradict each
other for the From's domain (a pass beside a fail: a forged header that
survived beside the real one) are refused.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass
from email import errors
from email.message import Message
from email.utils import getaddresses

from django.conf import settings
from publicsuffixlist import PublicSuffixList

from kperf.core.mail.text import unescaped

# A DNS name: what DMARC and DKIM can speak for (no domain literals, no single labels).
_DOMAIN = re.compile(r"^(?=.{1,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
# An unquoted local part (RFC 5322 dot-atom).
_LOCAL = re.compile(r"^[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*$")
# `method=result` and `ptype.property=value` in one result of an Authentication-Results header.
_PAIR = re.compile(r'([A-Za-z0-9][A-Za-z0-9_.\-/]*)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s";]+)')

_HARMLESS_DEFECTS = (errors.NonPrintableDefect, errors.UndecodableBytesDefect)

NOT_CONFIGURED = (
    "this kperf service cannot tell who sent a reply: its operator has set neither "
    "KPERF_MAIL_AUTHSERV_ID (the authserv-id of the mail server that checks DMARC and DKIM for it) "
    'nor KPERF_MAIL_ACCEPT_UNAUTHENTICATED, so it reads no replies (docs/triage.md, "Receiving the '
    'replies"). Triage on the page or with `kperf triage` meanwhile.'
)


@dataclass(frozen=True)
class Author:
    """What a mail says about its author, and whether kperf believes it."""

    address: str  # the From address, lower case; "" when the From is not one plain mailbox
    written: str  # the From header(s) as written, for the record
    reason: str = ""  # "" when believed; else bad-from, unauthenticated or auth-not-configured
    detail: str = ""  # why not, in words (or how it was authenticated)


@dataclass(frozen=True)
class Result:
    """One `method=result ptype.property=value ...` of an Authentication-Results header."""

    method: str
    result: str
    props: dict[str, str]


def raw_values(msg: Message, name: str) -> list[str]:
    """Every value of a header as the sender (or an MTA) wrote it: unfolded, never decoded."""
    name = name.lower()
    return [" ".join(str(value).split()) for key, value in msg.raw_items() if key.lower() == name]


def mailbox(msg: Message, name: str) -> tuple[str, str]:
    """(the one address of header `name`, "") or ("", why it is not one plain mailbox)."""
    raws = raw_values(msg, name)
    if not raws:
        return "", f"it has no {name} header"
    if len(raws) > 1:
        return "", f"it has {len(raws)} {name} headers; kperf reads mail with exactly one"
    raw = raws[0]
    shown = repr(unescaped(raw)[:100])
    try:
        header = msg[name]
        # policy.default parses address headers into AddressHeader; anything else is no mailbox.
        groups, defects = getattr(header, "groups", None), getattr(header, "defects", None)
    except Exception:  # the email package raises many kinds on a malformed header
        return "", f"its {name} header cannot be read ({shown}); write it as: Your Name <you@example.org>"
    # A control character in a display name misleads nobody about the address (kperf drops it
    # from what it records), nor does a name written in raw 8-bit bytes rather than as an
    # encoded word (`Alicé`, as many clients write it: an address in them is looked for below,
    # and one with such bytes is refused); any other defect is a header parsers may read differently.
    if groups is None or any(not isinstance(d, _HARMLESS_DEFECTS) for d in defects or ()):
        return "", f"its {name} header is malformed ({shown}); write it as: Your Name <you@example.org>"
    if len(groups) != 1 or groups[0].display_name is not None or len(groups[0].addresses) != 1:
        return "", f"its {name} header names several addresses or a group ({shown}); kperf reads mail from one"
    address = groups[0].addresses[0].addr_spec.lower()
    # The older parser (email.utils, which many tools use) must read the very same address.
    legacy = getaddresses([raw])
    if len(legacy) != 1 or legacy[0][1].lower() != address:
        return "", f"its {name} header reads as different addresses to different mail software ({shown})"
    local, _, domain = address.rpartition("@")
    if not address.isascii() or not _LOCAL.match(local) or not _DOMAIN.match(domain):
        return "", (
            f"its {name} address {address[:100]!r} is not a plain address at a domain name (no quotes, "
            "no [address literal], ASCII only), so its domain cannot vouch for it"
        )
    # An address shown in the display name, a comment or an encoded word that
    # is not the real one is how a mail looks like someone else's in a client.
    for text in (raw, str(header), unescaped(raw)):
        rest = unicodedata.normalize("NFKC", text).lower().replace(address, "")
        if "@" in rest:
            return "", (
                f"the display name or a comment in its {name} header holds another address than "
                f"{address} ({shown}); write your name without an address in it"
            )
    return address, ""


def _strip_comments(text: str) -> str:
    """`text` without its (comments), nested or not; quoted strings and escapes kept."""
    out: list[str] = []
    depth, quoted, escaped = 0, False, False
    for ch in text:
        if escaped:
            escaped = False
            if depth == 0:
                out.append(ch)
            continue
        if ch == "\\":
            escaped = True
            if depth == 0:
                out.append(ch)
        elif quoted:
            quoted = ch != '"'
            out.append(ch)
        elif ch == "(":
            depth += 1
        elif ch == ")" and depth:
            depth -= 1
        elif depth == 0:
            quoted = ch == '"'
            out.append(ch)
    return "".join(out) if depth == 0 and not quoted else ""


def _split(text: str) -> list[str]:
    """`text` cut at the semicolons outside quoted strings."""
    parts: list[str] = []
    current: list[str] = []
    quoted, escaped = False, False
    for ch in text:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == ";" and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    parts.append("".join(current))
    return parts


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def parse_results(value: str) -> tuple[str, list[Result]]:
    """(the authserv-id, its results) of one raw Authentication-Results value; ("", []) when unreadable.

    Read by hand: authres 1.2.0, the RFC 8601 parser on PyPI, drops a quoted property value that
    another property follows (`dmarc=pass header.from="example.org" policy.dmarc=none` comes back
    without header.from), and a quoted value is as valid as a token there.

    The authserv-id is the plain token the value starts with, as MTAs write
    it: one behind a comment or in quotes is nobody kperf trusts, because
    the rule that removes forged headers at the MTA would not match it.
    """
    first = re.match(r"\s*([^\s;()\"\\]+)(?=[\s;(]|$)", value)
    parts = _split(_strip_comments(value))
    if first is None:
        return "", []
    results: list[Result] = []
    for part in parts[1:]:
        part = part.strip()
        pairs = list(_PAIR.finditer(part))
        if not pairs or pairs[0].start() != 0:
            continue  # `none`, or something not a result
        method = pairs[0].group(1).lower().partition("/")[0]
        props = {m.group(1).lower(): _unquote(m.group(2)).strip().lower() for m in pairs[1:]}
        results.append(Result(method, _unquote(pairs[0].group(2)).lower(), props))
    return first.group(1).lower(), results


@functools.cache
def _suffixes() -> PublicSuffixList:
    # The list the pinned publicsuffixlist release carries: read once, never fetched.
    return PublicSuffixList()


def aligned(signer: str, domain: str) -> bool:
    """DMARC's relaxed alignment (RFC 7489, 3.1.1): the signer's and the From's organisational
    domains (the registrable domain by the public suffix list) are the same; a public suffix
    (`org`, `co.uk`, `github.io`) is nobody's organisation and vouches for nobody."""
    signer, domain = signer.strip(".").lower(), domain.strip(".").lower()
    if not signer or not domain:
        return False
    organisation = _suffixes().privatesuffix(domain)
    return organisation is not None and organisation == _suffixes().privatesuffix(signer)


def _signer(result: Result) -> str:
    return result.props.get("header.d") or result.props.get("header.i", "").rpartition("@")[2]


def verdict(msg: Message, address: str) -> tuple[str, str]:
    """("", how it was authenticated) when a trusted MTA vouches for `address`; else (reason, why not)."""
    ids = settings.KPERF_MAIL_AUTHSERV_IDS
    if not ids:
        if settings.KPERF_MAIL_ACCEPT_UNAUTHENTICATED:
            return "", "not checked (KPERF_MAIL_ACCEPT_UNAUTHENTICATED)"
        return "auth-not-configured", NOT_CONFIGURED
    domain = address.rpartition("@")[2]
    names = " or ".join(ids)
    trusted: list[Result] = []
    headers = 0
    for value in raw_values(msg, "Authentication-Results"):
        serv, results = parse_results(value)
        if serv in ids:
            headers += 1
            trusted += results
    if not headers:
        return "unauthenticated", (
            f"it carries no Authentication-Results header of {names}, the mail server that checks mail "
            "for kperf, so kperf cannot tell that it comes from its From address"
        )
    dmarc = {r.result for r in trusted if r.method == "dmarc" and r.props.get("header.from") == domain}
    dkim = {f"{r.result} (d={_signer(r)})" for r in trusted if r.method == "dkim" and aligned(_signer(r), domain)}
    if len(dmarc) > 1 or len({d.partition(" ")[0] for d in dkim}) > 1:
        return "unauthenticated", (
            f"the Authentication-Results of {names} contradict each other for {domain} "
            f"(dmarc: {', '.join(sorted(dmarc)) or '-'}; dkim: {', '.join(sorted(dkim)) or '-'}): one was forged"
        )
    if dmarc:
        result = dmarc.pop()
        if result == "pass":
            return "", f"dmarc=pass for {domain} ({names})"
        return "unauthenticated", f"{names} found dmarc={result} for {domain}: its domain does not vouch for it"
    if dkim:
        result = dkim.pop()
        if result.startswith("pass "):
            return "", f"dkim={result} for {domain} ({names})"
        return "unauthenticated", f"{names} found dkim={result} for {domain}: its signature does not verify"
    return "unauthenticated", (
        f"{names} found neither a DMARC pass for {domain} nor a DKIM signature of it (an aligned d=); "
        "send it from your provider's own mail server, which signs it"
    )


def configuration_problem() -> str:
    """Why every reply will be refused ("" when the operator configured how replies are authenticated)."""
    if settings.KPERF_MAIL_AUTHSERV_IDS or settings.KPERF_MAIL_ACCEPT_UNAUTHENTICATED:
        return ""
    return (
        "neither KPERF_MAIL_AUTHSERV_ID nor KPERF_MAIL_ACCEPT_UNAUTHENTICATED is set: every reply is "
        "refused (auth-not-configured); set KPERF_MAIL_AUTHSERV_ID to the authserv-id your MTA writes in "
        "Authentication-Results (docs/triage.md)"
    )


def author(msg: Message) -> Author:
    """Who wrote `msg`, as far as kperf may believe it (see the module's doc)."""
    written = ", ".join(raw_values(msg, "From"))[:300]
    address, why = mailbox(msg, "From")
    if why:
        return Author("", written, "bad-from", why)
    if raw_values(msg, "Sender"):
        sender, why = mailbox(msg, "Sender")
        if why or sender != address:
            return Author(
                address,
                written,
                "bad-from",
                why or f"its Sender, {sender}, is not its From, {address}: kperf reads mail its author sent",
            )
    reason, detail = verdict(msg, address)
    return Author(address, written, reason, detail)
