"""`kperf mail`: read the local mailbox `make up` keeps and answer an alert (docs/alerts.md, "Mail on a laptop").

The mailbox is a Maildir ($KPERF_HOME/mail, else ./.kperf/mail, or
--maildir); a reply goes over SMTP to the listener `make up` runs
(KPERF_MAIL_LISTEN_HOST:KPERF_MAIL_LISTEN_PORT, 127.0.0.1:8025), addressed
to the alert's Reply-To, as a mail client would send it.
"""

from __future__ import annotations

import argparse
import email.policy
import mailbox
import os
import smtplib
import sys
from email.message import EmailMessage
from email.utils import getaddresses, make_msgid, parsedate_to_datetime
from pathlib import Path
from typing import Any


def default_maildir() -> Path:
    home = os.environ.get("KPERF_HOME")
    return Path(home) / "mail" if home else Path(".kperf") / "mail"


def _messages(maildir: Path) -> list[EmailMessage]:
    """The mailbox's messages, oldest first (by Date, then by arrival)."""
    if not all((maildir / part).is_dir() for part in ("cur", "new", "tmp")):
        raise SystemExit(
            f"kperf mail: no mailbox at {maildir}: `make up` keeps one in .kperf/mail "
            "(give --maildir, or set KPERF_HOME)"
        )
    box = mailbox.Maildir(maildir, factory=None, create=False)
    found: list[tuple[float, str, EmailMessage]] = []
    for key in box.iterkeys():
        msg = email.message_from_bytes(box.get_bytes(key), policy=email.policy.default)
        assert isinstance(msg, EmailMessage)
        try:
            when = parsedate_to_datetime(str(msg["Date"])).timestamp()
        except (TypeError, ValueError):
            when = 0.0
        found.append((when, key, msg))
    return [msg for _, _, msg in sorted(found, key=lambda t: (t[0], t[1]))]


def _pick(maildir: Path, number: int) -> EmailMessage:
    messages = _messages(maildir)
    if not 1 <= number <= len(messages):
        raise SystemExit(f"kperf mail: no message {number}: the mailbox has {len(messages)} (see `kperf mail list`)")
    return messages[number - 1]


def cmd_list(args: argparse.Namespace) -> int:
    messages = _messages(args.maildir)
    if not messages:
        print(f"no mail in {args.maildir}")
    for n, msg in enumerate(messages, start=1):
        to = ", ".join(addr for _, addr in getaddresses([str(v) for v in msg.get_all("To", [])]))
        print(f"{n:3}  {str(msg['Date'] or '')[:31]:31}  {to[:28]:28}  {msg['Subject'] or ''}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    msg = _pick(args.maildir, args.number)
    for name in ("Date", "From", "To", "Reply-To", "Subject"):
        if msg[name]:
            print(f"{name}: {msg[name]}")
    body = msg.get_body(preferencelist=("plain",))
    print()
    print(body.get_content() if isinstance(body, EmailMessage) else "(no plain-text part)")
    return 0


def reply_to(msg: EmailMessage, text: str, sender: str = "") -> EmailMessage:
    """The answer a mail client would send to `msg`: to its Reply-To, from its recipient, quoting it."""
    target = str(msg["Reply-To"] or "")
    if not target:
        raise SystemExit("kperf mail: that message has no Reply-To: only alerts of a regression can be answered")
    author = sender or next((addr for _, addr in getaddresses([str(v) for v in msg.get_all("To", [])])), "")
    answer = EmailMessage()
    answer["From"], answer["To"] = author, target
    subject = str(msg["Subject"] or "")
    answer["Subject"] = subject if subject.lower().startswith("re:") else f"Re: {subject}"
    answer["Message-ID"] = make_msgid(domain=author.rpartition("@")[2] or "localhost")
    if msg["Message-ID"]:
        answer["In-Reply-To"] = answer["References"] = str(msg["Message-ID"])
    body = msg.get_body(preferencelist=("plain",))
    quoted = body.get_content() if isinstance(body, EmailMessage) else ""
    answer.set_content(text.rstrip("\n") + "\n\n" + "".join(f"> {line}\n" for line in quoted.splitlines()))
    return answer


def cmd_reply(args: argparse.Namespace) -> int:
    answer = reply_to(_pick(args.maildir, args.number), " ".join(args.text), args.sender)
    host = os.environ.get("KPERF_MAIL_LISTEN_HOST", "127.0.0.1")
    port = int(os.environ.get("KPERF_MAIL_LISTEN_PORT", "8025"))
    try:
        with smtplib.SMTP(host, port, timeout=30) as smtp:
            smtp.send_message(answer)
    except (OSError, smtplib.SMTPException) as e:
        print(f"kperf mail: could not send to {host}:{port} ({e}): is `make up` running?", file=sys.stderr)
        return 1
    print(f"sent to {answer['To']}; kperf's answer, if any, arrives in {args.maildir}")
    return 0


def add_parsers(sub: Any) -> None:
    m = sub.add_parser("mail", help="read the local mailbox `make up` keeps, answer an alert to triage it")
    m.add_argument("--maildir", type=Path, default=default_maildir(), help="the Maildir (default: .kperf/mail)")
    msub = m.add_subparsers(dest="mail_command", required=True)
    msub.add_parser("list", help="every message, numbered, oldest first").set_defaults(func=cmd_list)
    show = msub.add_parser("show", help="one message's headers and text")
    show.add_argument("number", type=int)
    show.set_defaults(func=cmd_show)
    rep = msub.add_parser("reply", help="answer an alert, e.g. kperf mail reply 3 '#kperf expected: trades speed'")
    rep.add_argument("number", type=int)
    rep.add_argument("text", nargs="+", help="the answer's first lines: a #kperf command (docs/triage.md)")
    rep.add_argument("--from", dest="sender", default="", help="your address (default: the alert's recipient)")
    rep.set_defaults(func=cmd_reply)
