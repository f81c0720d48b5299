"""The one line of a reply that triages: `#kperf <state>[ <sha>][: <note>]` (docs/triage.md, "By mail").

    #kperf expected: the series trades fork speed for memory
    #kperf fixed 1a2b3c4: reverted
    #kperf fixed --commit 1a2b3c4d5e6f
    #kperf won't fix

The command is the reply's first non-empty line that is not quoted (`>`)
and not the attribution a mail client writes above a quote ("On ..., X
wrote:"). The note is the rest of that line after the first colon, and
goes on over the lines right below it up to an empty line, a quote or a
signature (`-- `), since mail clients wrap long lines (a command line
without a colon may have its note on the lines below). Everything after
that is ignored, so the alert can be quoted below as usual.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kperf.core.triage import SETTABLE, TriageError

PREFIX = "#kperf"
GRAMMAR = "#kperf <state>[: <note>]  or  #kperf fixed <sha>[: <note>]   (states: " + ", ".join(SETTABLE) + ")"
_ATTRIBUTION = re.compile(r"\bwrote:\s*$|^-+ ?original message ?-+$", re.IGNORECASE)


@dataclass(frozen=True)
class Command:
    state: str
    note: str = ""
    fixed_by: str = ""


def _unquoted(text: str) -> list[str]:
    """The reply's own lines, up to the signature; quoted lines become '>' markers."""
    lines: list[str] = []
    for raw in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if raw in ("-- ", "--"):
            break
        line = raw.strip().lstrip("\ufeff")
        lines.append(">" if line.startswith(">") else line)
    return lines


def command_line(text: str) -> tuple[str, list[str]] | None:
    """(the first line of the reply's own text, the lines continuing it), or None for an empty reply."""
    lines = _unquoted(text)
    for i, line in enumerate(lines):
        if not line or line == ">":
            continue
        nxt = next((x for x in lines[i + 1 :] if x), "")
        if _ATTRIBUTION.search(line) and nxt in (">", ""):
            continue
        rest: list[str] = []
        for cont in lines[i + 1 :]:
            if not cont or cont == ">" or _ATTRIBUTION.search(cont):
                break
            rest.append(cont)
        return line, rest
    return None


def parse(text: str) -> Command:
    """The command in a reply's plain text; TriageError (field "command") saying what to write instead."""
    found = command_line(text)
    if found is None:
        raise TriageError(f"the reply has no text of its own; its first line must be: {GRAMMAR}", "command")
    line, continued = found
    if not line.lower().startswith(PREFIX) or line[len(PREFIX) : len(PREFIX) + 1] not in ("", " ", "\t", ":"):
        raise TriageError(f"the first line of the reply, {line[:60]!r}, is not a command; write: {GRAMMAR}", "command")
    head, colon, note = line[len(PREFIX) :].partition(":")
    words = head.split()
    commit = ""
    for i, word in enumerate(words):
        if word.startswith("--commit"):
            value = word.partition("=")[2] or (words[i + 1] if i + 1 < len(words) else "")
            if not value:
                raise TriageError("--commit needs the sha of the fixing commit: --commit 1a2b3c4", "fixed_by")
            commit = value
            del words[i : i + (1 if "=" in word else 2)]
            break
    if words and words[0].lower() == "fixed" and len(words) > 1:
        rest = words[2:] if words[1].lower() == "by" else words[1:]
        if len(rest) != 1 or commit:
            raise TriageError(f"write one fixing commit after 'fixed': {GRAMMAR}", "fixed_by")
        words, commit = ["fixed"], rest[0]
    if not words:
        raise TriageError(f"the command names no state; write: {GRAMMAR}", "state")
    note = " ".join([note.strip() if colon else "", *continued]).strip()
    return Command(state=" ".join(words), note=note, fixed_by=commit)
