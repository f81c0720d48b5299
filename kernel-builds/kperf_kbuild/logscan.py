"""Reading a build's output as it streams: phases, progress, the first
error, the log's tail; and afterwards tuxmake's record of each target
(metadata.json) and the build's own ccache counters."""

from __future__ import annotations

import collections
import contextlib
import json
import re
import time
from collections.abc import Callable
from pathlib import Path

from kperf_kbuild import nofollow

LOG_TAIL_LINES = 40

# kbuild's quiet-mode lines ("  CC      mm/slub.o"): one per produced file.
_KBUILD_STEP = re.compile(r"^\s{2}([A-Z][A-Z0-9_]*(?: \[M\])?)\s+(\S+)")
_COMPILE_STEPS = frozenset({"CC", "AS", "HOSTCC", "HOSTCXX", "CPP", "CC [M]"})
# tuxmake echoes each command it runs before running it.
_MAKE_ECHO = re.compile(r"^make\s.*\sO=\S+")
# The linker's own errors ("ld: vmlinux.a: member kernel/fork.o in archive
# is not an object") name the object at fault; make's "*** ... Error 1"
# after them does not. Its warnings are not errors, and its "in function"
# line only leads up to the undefined reference below it.
FIRST_ERROR = re.compile(
    r"(: (fatal )?error: |^make(\[\d+\])?: \*\*\* |Error \d+$|: undefined reference to |^E: "
    r"|^\S*\bld: (?!warning|.*: in function))"
)
NO_SPACE = "No space left on device"
# What gcc's driver prints when the kernel's OOM killer takes cc1: the
# machine is short of memory, the commit is not at fault.
COMPILER_KILLED = "Killed signal terminated program"

ProgressFn = Callable[[str, str], None]


class LogScanner:
    """Follows tuxmake's output: phases, a count of compiled files (for
    progress), the first error line and the log's tail."""

    # Progress callbacks usually write to a database; one per second is plenty.
    MIN_INTERVAL_S = 1.0

    def __init__(self, report: ProgressFn, obj: Path | None = None, src: Path | None = None) -> None:
        self.report = report
        # Host tools (objtool) are built with absolute paths into the obj
        # dir; shown relative, like every other kbuild line.
        self._obj_prefix = f"{obj}/" if obj else ""
        # Compiler messages name files by absolute path in this build's
        # checkout, which means nothing to the user reading the error.
        self._src_prefix = f"{src}/" if src else ""
        self.phase = "config"
        self.compiled = 0
        self.first_error = ""
        # Plenty for the tail, and for a build.log if tuxmake never wrote one.
        self.tail: collections.deque[str] = collections.deque(maxlen=2000)
        self._last_report = 0.0
        # Whether tuxmake got as far as running make in the tree: from then
        # on the tree's own code has run, and whatever breaks may be its doing.
        self.ran_make = False

    def feed(self, line: str) -> bool:
        """Take one output line; True when the configuration just became
        final (the first make command after the config target)."""
        self.tail.append(line)
        if not self.first_error and FIRST_ERROR.search(line):
            error = line.strip()
            if self._src_prefix:
                error = error.replace(self._src_prefix, "")
            self.first_error = error[:300]
        if _MAKE_ECHO.match(line):
            self.ran_make = True
            last = line.split()[-1]
            if self.phase == "config" and not last.endswith("config"):
                self.phase = "build"
                self.report("build", "compiling")
                return True
            return False
        step = _KBUILD_STEP.match(line)
        if step and self.phase == "build":
            if step.group(1) in _COMPILE_STEPS:
                self.compiled += 1
            now = time.monotonic()
            if now - self._last_report >= self.MIN_INTERVAL_S:
                self._last_report = now
                target = step.group(2)
                if self._obj_prefix and target.startswith(self._obj_prefix):
                    target = target[len(self._obj_prefix) :]
                self.report("build", f"{self.compiled} files compiled; {step.group(1)} {target}")
        return False

    def log_tail(self) -> str:
        lines = list(self.tail)[-LOG_TAIL_LINES:]
        # With -j, the compiler's message can scroll above the last lines
        # under make's "Error 1" cascade; the user needs that line most.
        if self.first_error and not any(self.first_error in line.replace(self._src_prefix, "") for line in lines):
            lines = [f"first error: {self.first_error}", "...", *lines]
        return "\n".join(lines)


def read_stats_log(stats_log: Path) -> dict[str, int]:
    """Count the counters in a ccache stats log: one ``# <file>`` line per
    compilation followed by the ids of the counters it bumped."""
    counts: collections.Counter[str] = collections.Counter()
    # Written by the sandboxed build: never followed if it is a symlink.
    with contextlib.suppress(OSError):
        for line in nofollow.read_text(stats_log).splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                counts[line] += 1
    return dict(counts)


# tuxmake's metadata.json is a few kilobytes; one far larger was not written by tuxmake.
METADATA_MAX_BYTES = 4 * 1024 * 1024
TARGET_STATUSES = frozenset({"PASS", "FAIL", "SKIP", "WARNING"})


def read_target_status(output_dir: Path) -> dict[str, str] | None:
    """Each target's status (PASS, FAIL, SKIP, WARNING) from tuxmake's
    metadata.json ("results" → "targets"); None when there is no such
    record: tuxmake stopped before building, or the file is not its.

    The file is written inside the sandbox, where the tree's own code runs
    too, so it is read like every output: never through a link, bounded,
    and only in tuxmake's shape.
    """
    path = output_dir / "metadata.json"
    try:
        if not nofollow.is_regular(path) or path.stat().st_size > METADATA_MAX_BYTES:
            return None
        results = json.loads(nofollow.read_text(path)).get("results")
        targets = results.get("targets") if isinstance(results, dict) else None
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(targets, dict):
        return None
    return {
        str(name): info["status"]
        for name, info in targets.items()
        if isinstance(info, dict) and info.get("status") in TARGET_STATUSES
    }
