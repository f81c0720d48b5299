"""What pstore kept of a boot of the kernel under test, and whose records they are.

Back on its own kernel the machine shows ramoops' records in /sys/fs/pstore:
init's transcript (pmsg-ramoops-0), the kernel under test's console
(console-ramoops-0), kmsg dumps (dmesg-ramoops-N). Two kernels write there,
so every record is sorted by who wrote it before anything is concluded:

- the kernel under test names the boot's nonce (kperf.boot= on its command
  line) in its console, in init's transcript and in its panic log;
- the machine's own kernel, when its ramoops has max_reason=4, dumps its
  log as it goes down ("Shutdown#1 Part1"); going down for a kexec, that log
  ends with the kernel handing over (kexec_core: "Starting new kernel",
  printed right before the dump and the jump), after the agent's own line
  naming the boot (JUMP_MARK, written to /dev/kmsg).

Records are read here without being removed: they are cleared only once
what was derived from them is saved in the state directory (the agent calls
the backend's release()).

Reading is not enough to keep them, though: ramoops hands the console and
pmsg zones of the kernel before over once, when it starts (it copies them
to pstore's files and empties the RAM), so after a second boot of the
machine's own kernel they are gone. The first boot after the jump copies
them to the state directory (`save_snapshot`) as soon as it has them, and
notes before starting ramoops that it is about to (`note_reading`): a later
boot that finds the note but no copy knows an earlier one took the records
and was reset before it could keep them (`Snapshot.lost`), which is not the
same as a kernel under test that left none.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from .. import inflight

log = logging.getLogger(__name__)

# The kernel's own account of its command line, early in its log: "Command
# line: ..." on x86_64, "Kernel command line: ..." on arm64.
COMMAND_LINE = re.compile(r"(?:Kernel command|Command) line: (.*)")
# pstore's first line of a kmsg dump: "<reason>#<count> Part<n>"
# (fs/pstore/platform.c, reasons from kmsg_dump_reason_str()).
DUMP_HEADER = re.compile(r"(Panic|Oops|Emergency|Shutdown|Unknown)#\d+ Part\d+")
# kernel/kexec_core.c, kernel_kexec(): the last line the outgoing kernel logs.
HANDOVER = "Starting new kernel"
# What the agent writes to the kernel log right before the jump.
JUMP_MARK = "kperf-runner: jumping into the kernel under test, boot "
# How much of the machine's own log to show as the evidence of a handover.
EVIDENCE_LINES = 40


def read_records(pstore: Path) -> dict[str, str]:
    """Every pstore record by file name, left in place."""
    records: dict[str, str] = {}
    try:
        entries = sorted(pstore.iterdir())
    except OSError:
        return records
    for entry in entries:
        try:
            records[entry.name] = entry.read_bytes().decode("utf-8", "replace").replace("\r", "")
        except OSError as error:
            log.warning("pstore record %s: %s", entry, error)
    return records


def clear_records(pstore: Path) -> list[str]:
    """Remove every pstore record (which frees its RAM in ramoops); the names removed."""
    removed: list[str] = []
    try:
        entries = sorted(pstore.iterdir())
    except OSError:
        return removed
    for entry in entries:
        try:
            entry.unlink()
            removed.append(entry.name)
        except OSError as error:
            log.warning("could not remove pstore record %s: %s", entry, error)
    return removed


SNAPSHOT = "pstore-snapshot.json"
READING = "pstore-reading.json"


@dataclass(frozen=True)
class Snapshot:
    records: dict[str, str]  # what pstore held when the boot's records were first read
    # An earlier boot of the machine's own kernel started ramoops for this
    # boot and was reset before it kept the records: the console and pmsg
    # zones it took are gone.
    lost: bool


def _read_json(path: Path) -> dict[str, object] | None:
    try:
        value = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        log.warning("%s cannot be read (%s): ignored", path, error)
        return None
    return value if isinstance(value, dict) else None


def reading_note(work: Path) -> dict[str, str]:
    """{"boot": nonce, "boot_id": the machine's boot that started ramoops for it}, or {} when there is none."""
    note = _read_json(work / READING) or {}
    return {key: str(note.get(key, "")) for key in ("boot", "boot_id")} if note else {}


def note_reading(work: Path, boot: str, boot_id: str) -> None:
    """Say, durably, that this boot of the machine (boot_id) takes the records of boot `boot` out of ramoops."""
    work.mkdir(parents=True, exist_ok=True)
    inflight.write_durably(work / READING, json.dumps({"boot": boot, "boot_id": boot_id}).encode())


def load_snapshot(work: Path, boot: str) -> Snapshot | None:
    saved = _read_json(work / SNAPSHOT)
    kept = saved.get("records") if saved is not None and saved.get("boot") == boot else None
    if not isinstance(kept, dict):
        return None
    return Snapshot({str(name): str(text) for name, text in kept.items()}, bool(saved and saved.get("lost")))


def save_snapshot(work: Path, boot: str, snapshot: Snapshot) -> None:
    work.mkdir(parents=True, exist_ok=True)
    data = {"boot": boot, "records": snapshot.records, "lost": snapshot.lost}
    inflight.write_durably(work / SNAPSHOT, json.dumps(data).encode())


def forget(work: Path) -> None:
    """Drop the copy and the note: the outcome is saved, or a new boot begins."""
    for name in (SNAPSHOT, READING):
        (work / name).unlink(missing_ok=True)


def dump_reason(name: str, text: str) -> str:
    """A kmsg dump's reason (Panic, Oops, Shutdown, ...), "" for a record that is not one."""
    if not name.startswith("dmesg-"):
        return ""
    match = DUMP_HEADER.match(text.lstrip())
    return match.group(1) if match else ""


def split_records(records: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(the records that may be the kernel under test's, the machine's own kernel's shutdown dumps)."""
    own = {name: text for name, text in records.items() if dump_reason(name, text) == "Shutdown"}
    return {name: text for name, text in records.items() if name not in own}, own


def booted_under_test(records: dict[str, str], boot: str) -> bool:
    """Whether pstore's records come from the boot with nonce boot: its command line has kperf.boot=<boot>.

    init's transcript (pmsg) names the command line in KPERF-ENV
    kernel_cmdline; the kernel's console and panic logs in "Command line:".
    Only those lines count: the machine's own log may mention the nonce
    elsewhere (the agent logs the command line it loads, and its jump mark).
    """
    word = f"kperf.boot={boot}"
    for name, text in records.items():
        for line in text.splitlines():
            if name.startswith("pmsg-"):
                _, marker, rest = line.partition("KPERF-ENV kernel_cmdline=")
                found = rest if marker else None
            else:
                match = COMMAND_LINE.search(line)
                found = match.group(1) if match else None
            if found is not None and word in found.split():
                return True
    return False


def handover(own: dict[str, str], boot: str) -> tuple[str, str, bool] | None:
    """(record name, its last lines, whether it names the boot) of the machine's own kernel handing over by kexec.

    None when no shutdown dump shows it: the machine did not go down for the
    jump (it reset, crashed or rebooted plainly) or its ramoops does not
    dump at shutdown (no ramoops.max_reason=4).
    """
    for name, text in sorted(own.items()):
        lines = text.splitlines()
        at = [i for i, line in enumerate(lines) if HANDOVER in line]
        if not at:
            continue
        last = lines[max(0, at[-1] + 1 - EVIDENCE_LINES) : at[-1] + 1]
        return name, "\n".join(last) + "\n", any(f"{JUMP_MARK}{boot}" in line for line in lines)
    return None


def console_from_records(records: dict[str, str]) -> str:
    """Init's transcript, then the test kernel's console, then any panic log: the boot's console."""
    transcript = "".join(text for name, text in sorted(records.items()) if name.startswith("pmsg-"))
    kernel = "".join(text for name, text in sorted(records.items()) if name.startswith("console-"))
    panics = [text for name, text in sorted(records.items()) if name.startswith("dmesg-")]
    parts = [transcript]
    if kernel:
        parts.append(f"--- kperf: the kernel's console (pstore) ---\n{kernel}")
    for text in panics:
        parts.append(f"--- kperf: the kernel's log at the crash (pstore) ---\n{text}")
    return "\n".join(part.rstrip("\n") + "\n" for part in parts if part)


def explain_return(message: str, console: str, seconds: float, watchdog: int = 0) -> str:
    """Why a boot that came back without KPERF-DONE ended; watchdog: the period it was armed for (0: unknown)."""
    if "Kernel panic" in console or "KPERF-ERROR" in console:
        return f"came back without KPERF-DONE after {seconds:.0f} s: {message}"
    armed = f"armed for {watchdog} s, " if watchdog else ""
    return (
        f"came back without KPERF-DONE after {seconds:.0f} s: hang ended by the watchdog "
        f"({armed}no panic was recorded): {message}"
    )


def died_early(seconds: float, boot: str, evidence: tuple[str, str, bool], others: dict[str, str]) -> tuple[str, str]:
    """The message and log of a kernel under test that died before its ramoops started.

    others: the records besides the machine's shutdown dumps (none of them
    names the boot), shown after the evidence.
    """
    name, last_lines, names_boot = evidence
    whose = "this boot's jump, by its nonce" if names_boot else "the jump the agent made after clearing pstore"
    message = (
        f"the kernel under test died before its ramoops started, so it recorded nothing: the machine's own kernel "
        f"handed over to it ({HANDOVER!r} in its shutdown log {name}, {whose}) and the machine came back "
        f"{seconds:.0f} s later with no record naming kperf.boot={boot}. It crashed or hung early in its boot "
        "(decompression, memory or firmware setup, a driver before ramoops) and was reset by the watchdog or "
        "rebooted itself; the lab's serial console, if it keeps one, has the rest"
    )
    log_text = f"--- kperf: the machine's own kernel handing over to the kernel under test (pstore {name}) ---\n"
    log_text += last_lines
    if others:
        log_text += f"--- kperf: pstore's other records, none naming this boot ({', '.join(sorted(others))}) ---\n"
        log_text += console_from_records(others)
    return message, log_text
