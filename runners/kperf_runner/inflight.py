"""The job in flight, persisted in the runner's state directory.

On bare metal a boot takes the agent down with the machine: the `kexec`
backend jumps into the kernel under test and the agent is started again on
the machine's own kernel afterwards. What it needs to carry on is written
here before every boot begins: the job as the service handed it, which boot
is under way, the results of the boots before it, and what the backend needs
to resume. Once a boot's outcome is read back from pstore the record is
written again with that result added and `under_way` false, and only then
is pstore cleared: the next boot, or the upload, starts from there, so a
result is never only in memory. A failure is kept the same way (`failure`:
the report the service is to get) until the service has acknowledged it.
The file is removed once the job is reported (done, failed, dropped); a
report the service did not get keeps it, to be sent again.

Written atomically (a temporary file, fsync, rename, fsync of the
directory): a power cut leaves either the old record or the new one, never
half of one.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FILE_NAME = "inflight.json"
FORMAT = 1


@dataclass
class InFlight:
    job: dict[str, Any]  # the claim's job, as the service sent it
    boot: int  # 0-based index of the boot under way
    backend: str  # the backend that started it
    state: dict[str, Any] = field(default_factory=dict)  # what the backend's resume() takes
    # The earlier boots of the job as they will be uploaded, each with its "console".
    results: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.time)  # when the boot began (Unix time)
    # False: boot `boot` has not begun (every earlier one is in results; with
    # boot == the job's boots, only the upload is left). A record from before
    # this field was always written just before a boot began.
    under_way: bool = True
    # The job's failure report ({"kind", "message", "log"}, the fail call's
    # fields), once decided: all that is left is to deliver it.
    failure: dict[str, str] | None = None


def path_in(state_dir: Path) -> Path:
    return state_dir / FILE_NAME


def save(state_dir: Path, inflight: InFlight) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    write_durably(path_in(state_dir), json.dumps({"format": FORMAT, **asdict(inflight)}).encode())


def write_durably(target: Path, data: bytes) -> None:
    """target holds data, or what it held before, whenever the power goes: never a part of either."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    # The rename is in the directory: without this a power cut can undo it.
    _fsync_dir(target.parent)


def load(state_dir: Path) -> InFlight | None:
    """The job in flight, or None. A record that cannot be read is set aside, not fatal."""
    target = path_in(state_dir)
    try:
        raw = json.loads(target.read_bytes())
        if raw.pop("format", None) != FORMAT:
            raise ValueError("unknown format")
        inflight = InFlight(**raw)
        if not isinstance(inflight.job, dict) or "id" not in inflight.job or not isinstance(inflight.boot, int):
            raise ValueError("no job or boot in it")
        if not isinstance(inflight.results, list) or not isinstance(inflight.under_way, bool):
            raise ValueError("results or under_way of the wrong type")
        failure = inflight.failure
        if failure is not None and not (
            isinstance(failure, dict) and all(isinstance(failure.get(k), str) for k in ("kind", "message", "log"))
        ):
            raise ValueError("a failure without kind, message and log")
        return inflight
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as error:
        # Nothing can be reported without the job's id and attempt: keep the
        # file for a person to look at; the lease will expire on its own.
        aside = target.with_name(f"{FILE_NAME}.unreadable-{int(time.time())}")
        log.error("cannot read the job in flight in %s (%s); moved it to %s", target, error, aside)
        os.replace(target, aside)
        return None


def clear(state_dir: Path) -> None:
    try:
        os.unlink(path_in(state_dir))
    except FileNotFoundError:
        return
    _fsync_dir(state_dir)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
