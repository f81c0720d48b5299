"""Read a patch series from an mbox, as `git format-patch` and `b4 am` write it.

Everything a person can get wrong is found here, before anything is stored
or a worker runs git: not an mbox, no patches, a patch missing from the
numbering, HTML instead of plain text, too big. The messages are kept as the
bytes they came in (git am gets exactly those); Python's email package only
reads their headers and bodies.

Header values kperf stores (subjects, authors) have their control characters
removed: an encoded word may carry any byte (`=?utf-8?q?a=00b?=`), and
PostgreSQL refuses a NUL in text and jsonb.

git am takes a commit's author date from the patch's Date: header, and the
clock's time when there is none: a patch without one gets the series' date
(the cover letter's Date, else the Unix epoch) in the copy git am reads, so
the same series on the same base is the same sha on every machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import format_datetime, parseaddr, parsedate_to_datetime

from django.core.exceptions import ValidationError
from django.core.validators import validate_email

MAX_PATCHES = 500
MAX_MAIL_TO = 10
MESSAGE_ID_MAX = 250

# An mbox separator line: "From <sender> <date>", as git format-patch
# ("From 1a2b... Mon Sep 17 00:00:00 2001") and b4 ("From git@z Thu Jan  1
# 00:00:00 1970") write it. A line in a commit message that starts with
# "From " has no date at its end, and one in a diff starts with ' ', '+' or '-'.
_FROM_LINE = re.compile(rb"^From \S+ .*\d\d:\d\d(:\d\d)?.*\d{4}\s*$")
# "[PATCH v2 03/10]", "[RFC PATCH 0/3]", "[PATCH net-next 1/2]": the numbers, when there are any.
_PREFIX = re.compile(r"^\s*(\[[^\]]*\]\s*)+")
_NUMBERS = re.compile(r"\[[^\]]*?\b(\d+)/(\d+)\s*\]")
_DIFF = re.compile(r"^(diff --git |--- \S|Index: \S)", re.MULTILINE)
_MSGID = re.compile(r"^[\x21-\x7e]+$")
# b4 am -l adds "Link: https://lore.kernel.org/r/<id>" (or patch.msgid.link) to each patch.
# C0 controls but the tab, DEL and C1 controls: nothing a subject or a name means.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")
# The date of a patch that has no Date: header and no cover letter's to take.
EPOCH_DATE = "Thu, 01 Jan 1970 00:00:00 +0000"
_LINK = re.compile(r"^Link: https?://(?:lore\.kernel\.org/r|patch\.msgid\.link)/(\S+?)/?\s*$", re.MULTILINE)


class SeriesError(ValueError):
    """The mbox is not a series kperf can apply; the message says what is wrong and what to do."""


@dataclass
class Patch:
    number: int  # 1-based, in apply order
    subject: str
    author: str
    message_id: str
    raw: bytes = field(repr=False)
    has_date: bool = True

    def as_dict(self) -> dict[str, object]:
        return {"number": self.number, "subject": self.subject, "author": self.author, "message_id": self.message_id}


@dataclass
class Series:
    subject: str
    author: str
    message_id: str  # what the result mail answers: the cover letter, or the thread the patches answer
    has_cover: bool
    patches: list[Patch]
    # The Date: git am gets for a patch without one (see the module's docstring).
    date: str = EPOCH_DATE

    @property
    def label(self) -> str:
        """What lists and mails show where a branch's name would be."""
        return f"series: {self.subject}"[:255]

    def patches_mbox(self) -> bytes:
        """The patches alone, in order, for git am (a cover letter has no diff and would stop it)."""
        return b"".join(self._dated(p) for p in self.patches)

    def _dated(self, p: Patch) -> bytes:
        raw = p.raw if p.raw.endswith(b"\n") else p.raw + b"\n"
        if p.has_date:
            return raw
        # After the separator line, with its line ending: the first header.
        separator, _, rest = raw.partition(b"\n")
        eol = b"\r\n" if separator.endswith(b"\r") else b"\n"
        return separator + b"\n" + b"Date: " + self.date.encode() + eol + rest


def split_mbox(data: bytes) -> list[bytes]:
    """The raw messages of an mbox, separator lines included."""
    lines = data.splitlines(keepends=True)
    if not lines or not _FROM_LINE.match(lines[0].rstrip(b"\r\n")):
        first = lines[0][:60].decode(errors="replace").strip() if lines else ""
        if first.startswith("diff --git") or first.startswith("---"):
            what = "a bare diff"
        elif re.match(r"^[A-Za-z-]+: ", first):
            what = "a single mail without the mbox 'From ' line"
        else:
            what = f"not an mbox (it starts with {first!r})" if first else "empty"
        raise SeriesError(
            f"the file is {what}: give the mbox `b4 am <message-id>` writes (its .mbx file), "
            "or `git format-patch --cover-letter -o DIR base..branch` and `cat DIR/*.patch`"
        )
    messages: list[list[bytes]] = []
    previous_blank = True
    for line in lines:
        stripped = line.rstrip(b"\r\n")
        if _FROM_LINE.match(stripped) and (previous_blank or not messages):
            messages.append([])
        messages[-1].append(line)
        previous_blank = not stripped
    return [b"".join(m) for m in messages]


def _text_body(msg: EmailMessage) -> str | None:
    """The plain-text body, or None when the message has only HTML."""
    part = msg.get_body(preferencelist=("plain",))
    if part is None:
        if msg.get_body(preferencelist=("html",)) is not None:
            return None
        return ""
    try:
        return str(part.get_content())
    except (LookupError, UnicodeError):
        return part.get_payload(decode=True).decode("utf-8", errors="replace")  # type: ignore[union-attr]


def clean_message_id(value: str, what: str) -> str:
    mid = value.strip().strip("<>").strip()
    if not mid:
        return ""
    if len(mid) > MESSAGE_ID_MAX or not _MSGID.match(mid) or "<" in mid or ">" in mid:
        raise SeriesError(f"{what} has a malformed Message-ID {value[:80]!r}: it must be <id@host> without spaces")
    return mid


def header(msg: EmailMessage, name: str) -> str:
    """A header's decoded value without control characters (the tab kept)."""
    return _CONTROL.sub("", str(msg.get(name, "")))


def _date(msg: EmailMessage) -> str | None:
    """The message's Date: as git reads it, or None when it has none or one that cannot be read."""
    value = header(msg, "Date").strip()
    try:
        return format_datetime(parsedate_to_datetime(value)) if value else None
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _strip_prefix(subject: str) -> str:
    return _PREFIX.sub("", subject).strip() or subject.strip()


def _author(msg: EmailMessage) -> str:
    name, addr = parseaddr(header(msg, "From"))
    return (f"{name} <{addr}>" if name else addr)[:300]


def parse(data: bytes, max_bytes: int) -> Series:
    """The series in `data`; SeriesError says what is wrong with it."""
    if len(data) > max_bytes:
        raise SeriesError(
            f"the mbox is {len(data)} bytes; the limit is {max_bytes} bytes (KPERF_MAX_MBOX_BYTES): "
            "submit a smaller series, or split it"
        )
    if b"\0" in data:
        raise SeriesError("the mbox contains NUL bytes: it is a binary file, not mail; give the mbox b4 am writes")
    if not data.strip():
        raise SeriesError("the mbox is empty: give the mbox b4 am writes")
    cover: tuple[EmailMessage, str] | None = None
    declared = 0  # the N of the cover letter's [PATCH 0/N]
    patches: list[tuple[int | None, Patch]] = []
    reply_parent = ""
    for i, raw in enumerate(split_mbox(data), start=1):
        msg = BytesParser(policy=policy.default).parsebytes(raw)
        assert isinstance(msg, EmailMessage)
        subject = " ".join(header(msg, "Subject").split())
        where = f"message {i} ({subject[:60]!r})" if subject else f"message {i}"
        if not subject:
            raise SeriesError(f"{where} has no Subject: header; git am takes the commit title from it")
        if not parseaddr(header(msg, "From"))[1]:
            raise SeriesError(f"{where} has no From: address; git am takes the commit's author from it")
        body = _text_body(msg)
        if body is None:
            raise SeriesError(
                f"{where} is HTML only: git am needs plain-text patches; "
                "send with git send-email, or fetch the series with b4 am"
            )
        numbers = _NUMBERS.search(subject)
        number = (int(numbers.group(1)), int(numbers.group(2))) if numbers else None
        mid = clean_message_id(header(msg, "Message-ID"), where)
        if not _DIFF.search(body):
            if number is not None and number[0] == 0 and cover is None:
                cover, declared = (msg, mid), number[1]
                continue
            raise SeriesError(
                f"{where} has no diff and is not the cover letter ([PATCH 0/N]): remove it from the mbox "
                "(b4 am keeps only the patches and the cover letter)"
            )
        if not mid:
            link = _LINK.search(body)
            mid = clean_message_id(link.group(1), where) if link else ""
        if not patches:
            parents = header(msg, "In-Reply-To").split()
            try:
                reply_parent = clean_message_id(parents[0], where) if parents else ""
            except SeriesError:
                reply_parent = ""  # only a hint for threading: a mangled one is not worth refusing the series
        if "Date" in msg and _date(msg) is None:
            raise SeriesError(
                f"{where} has a Date: header that cannot be read ({header(msg, 'Date')[:60]!r}): git am takes "
                "the commit's date from it; give an RFC 2822 date (as git send-email writes it) or remove the header"
            )
        patch = Patch(0, subject, _author(msg), mid, raw, has_date="Date" in msg)
        patches.append((number[0] if number else None, patch))
    if not patches:
        raise SeriesError("the mbox has no patches (no message contains a diff): give the mbox b4 am writes")
    if len(patches) > MAX_PATCHES:
        raise SeriesError(f"the series has {len(patches)} patches; kperf takes at most {MAX_PATCHES}: split it")
    ordered = _in_order(patches, declared)
    for n, p in enumerate(ordered, start=1):
        p.number = n
    if cover is not None:
        msg, mid = cover
        subject = _strip_prefix(" ".join(header(msg, "Subject").split()))
        return Series(subject, _author(msg), mid, True, ordered, _date(msg) or EPOCH_DATE)
    first = ordered[0]
    # Without the cover letter (b4 am -o- of a series sent with one keeps
    # it out), the patches still answer it: In-Reply-To names it.
    return Series(_strip_prefix(first.subject), first.author, reply_parent or first.message_id, False, ordered)


def _in_order(patches: list[tuple[int | None, Patch]], declared: int) -> list[Patch]:
    """Patches in the order their [PATCH n/N] numbers say; as found when they carry none."""
    numbered = [n for n, _ in patches if n is not None]
    if not numbered:
        return [p for _, p in patches]
    if len(numbered) != len(patches):
        raise SeriesError("some patches have [PATCH n/N] numbers and some do not: give one series per mbox")
    seen: dict[int, Patch] = {}
    for n, p in patches:
        assert n is not None
        if n in seen:
            raise SeriesError(
                f"patch {n} appears twice ({seen[n].subject!r} and {p.subject!r}): "
                "give one version of the series (b4 am -v N picks one)"
            )
        seen[n] = p
    totals = {int(m.group(2)) for _, p in patches if (m := _NUMBERS.search(p.subject))}
    total = max(totals | {len(patches), declared})
    missing = [n for n in range(1, total + 1) if n not in seen]
    if missing:
        raise SeriesError(
            f"the series has {total} patches but patch{'es' if len(missing) > 1 else ''} "
            f"{', '.join(str(n) for n in missing[:10])} {'are' if len(missing) > 1 else 'is'} missing from the mbox: "
            "fetch the whole series with b4 am"
        )
    return [seen[n] for n in sorted(seen)]


def clean_mail_to(addresses: list[str]) -> list[str]:
    """The extra recipients of the result mail, checked; SeriesError names a bad one."""
    out: list[str] = []
    for a in addresses:
        addr = a.strip()
        if not addr:
            continue
        try:
            validate_email(addr)
        except ValidationError:
            raise SeriesError(f"{addr[:100]!r} is not an e-mail address: give addresses like dev@example.org") from None
        if addr not in out:
            out.append(addr)
    if len(out) > MAX_MAIL_TO:
        raise SeriesError(f"{len(out)} reply addresses; kperf mails at most {MAX_MAIL_TO} besides you")
    return out
