"""Patch series as `b4 am` writes them, made from commits of a real git tree.

`git format-patch --cover-letter --thread` gives the messages; they are then
shaped the way b4 hands a series to `git am`: its separator line, one
numbering over the whole series ([PATCH 0/N] for the cover letter), every
patch answering the cover letter, and a `Link:` trailer per patch naming its
Message-ID. Shared by the service's tests and the end-to-end tests.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

B4_FROM_LINE = "From git@z Thu Jan  1 00:00:00 1970"
_DROP = ("message-id", "in-reply-to", "references")


def message_id(name: str) -> str:
    return f"20231114-{name}-v1@example.org"


def _headers(block: str) -> list[str]:
    """The header lines of a message, folded ones unfolded, without the separator line."""
    out: list[str] = []
    for line in block.splitlines()[1:]:
        if line[:1] in (" ", "\t") and out:
            out[-1] += " " + line.strip()
        else:
            out.append(line)
    return out


def _shape(text: str, subject: str, mid: str, cover_id: str | None, link: bool) -> str:
    block, _, body = text.partition("\n\n")
    headers = [h for h in _headers(block) if not h.lower().startswith(_DROP)]
    headers = [f"Subject: {subject}" if h.lower().startswith("subject:") else h for h in headers]
    headers.append(f"Message-Id: <{mid}>")
    if cover_id:
        headers += [f"In-Reply-To: <{cover_id}>", f"References: <{cover_id}>"]
    if link:
        # After the commit message, which may be empty (the subject is all of it).
        body = re.sub(r"(?:^|(?<=\n))---\n", f"Link: https://lore.kernel.org/r/{mid}\n---\n", body, count=1)
    return "\n".join([B4_FROM_LINE, *headers]) + "\n\n" + body


def b4_mbox(repo: Path, ranges: list[str], out: Path, title: str, base: str, cover: bool = True) -> bytes:
    """The commits of `ranges` (e.g. ["base..fork-slow", "base..neutral"]), in that order, as one
    series titled `title`; the cover letter's Message-ID is message_id("cover")."""
    files: list[Path] = []
    cover_file = None
    for i, rng in enumerate(ranges):
        where = out / f"range-{i}"
        args = ["git", "-C", str(repo), "format-patch", "-q", "--thread", "-o", str(where)]
        if i == 0:
            args.append("--cover-letter")
        subprocess.run([*args, rng], check=True, capture_output=True)
        made = sorted(where.glob("*.patch"))
        if i == 0:
            cover_file, made = made[0], made[1:]
        files += made
    n = len(files)
    # Left out or not, the cover letter is what the patches answer.
    cover_id = message_id("cover")
    messages = []
    if cover and cover_file is not None:
        text = cover_file.read_text().replace("*** SUBJECT HERE ***", title)
        text = text.replace("*** BLURB HERE ***", f"{title}.\n\nbase-commit: {base}")
        messages.append(_shape(text, f"[PATCH 0/{n}] {title}", message_id("cover"), None, link=False))
    for number, f in enumerate(files, start=1):
        text = f.read_text()
        old = re.search(r"^Subject: (?:\[[^\]]*\]\s*)?(.*(?:\n[ \t].*)*)", text, re.MULTILINE)
        assert old is not None, f"{f} has no Subject"
        subject = " ".join(old.group(1).split())
        messages.append(_shape(text, f"[PATCH {number}/{n}] {subject}", message_id(f"p{number}"), cover_id, True))
    return "\n".join(messages).encode()
