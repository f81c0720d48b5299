"""`kperf submit --mbox`: a patch series instead of a branch (docs/submitting.md, "Patch series")."""

from __future__ import annotations

import argparse
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
        help="also mail the result to ADDR (repeat for more); a series' answer goes in reply to its cover letter",
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
    try:
        out["mbox"] = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MboxError(
            f"{args.mbox} is not UTF-8 text (byte {e.start}): kperf takes the mbox as b4 am writes it "
            "(UTF-8); convert it with iconv or fetch the series again with b4 am"
        ) from None
    return out


def describe(series: dict[str, Any]) -> list[str]:
    """The series in `kperf status`: who sent what, and the patches (the one that did not apply marked)."""
    lines = [f"series {series['subject']!r} by {series['author']}, <{series['message_id']}>"]
    for p in series.get("patches", []):
        mark = "  <- does not apply" if p["number"] == series.get("failed_patch") else ""
        lines.append(f"  {p['subject']}{mark}")
    return lines
