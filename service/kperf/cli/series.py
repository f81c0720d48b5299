"""`kperf submit --mbox`: a patch series instead of a branch (docs/submitting.md, "Patch series")."""

from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path
from typing import Any


class MboxError(Exception):
    pass


def add_arguments(s: argparse.ArgumentParser) -> None:
    """--branch or --mbox (one of them), and --reply-to, on `kperf submit`."""
    head = s.add_mutually_exclusive_group(required=True)
    head.add_argument("--branch", help="the branch (head) to test")
    head.add_argument(
        "--mbox",
        metavar="FILE",
        help="a patch series to apply on --base with git am: the .mbx file `b4 am` writes, "
        "or `git format-patch` output ('-' reads standard input)",
    )
    s.add_argument(
        "--reply-to",
        action="append",
        metavar="ADDR",
        help="also mail the result to ADDR (repeat for more), an address you confirmed (`kperf addresses "
        "confirm ADDR`) or one the service allows; a series' answer goes in reply to its cover letter",
    )


def head_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The request's branch or mbox, and the extra recipients (MboxError for an unreadable file)."""
    out: dict[str, Any] = {"mail_to": args.reply_to or []}
    if args.mbox is None:
        out["branch"] = args.branch
        return out
    try:
        data = sys.stdin.buffer.read() if args.mbox == "-" else Path(args.mbox).read_bytes()
    except OSError as e:
        raise MboxError(f"cannot read the mbox {args.mbox}: {e.strerror}") from None
    # The bytes as they are: a mail may be latin-1 or 8-bit, and git am
    # gets exactly what was posted.
    out["mbox_b64"] = base64.b64encode(data).decode("ascii")
    return out


def describe(series: dict[str, Any]) -> list[str]:
    """The series in `kperf status`: who sent what, and the patches (the one that did not apply marked)."""
    lines = [f"series {series['subject']!r} by {series['author']}, <{series['message_id']}>"]
    for p in series.get("patches", []):
        mark = "  <- does not apply" if p["number"] == series.get("failed_patch") else ""
        lines.append(f"  {p['subject']}{mark}")
    return lines
