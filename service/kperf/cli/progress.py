"""`kperf submit --wait`: a progress bar until the verdict, and an exit status that says it.

On a terminal one line is redrawn: the phase, boots done of boots to run
per side and when the verdict is expected (the API's `eta`). Into a pipe
or a file, one plain line per change, so a CI log reads as a history.
With --json the progress goes to standard error, and standard output gets
the final JSON alone (for jq). When the submission is finished, the whole
status (as `kperf status`), and the exit status: 0 no regression, 1 at
least one regression, 2 failed (the status `kperf` exits with on any error,
too), 3 stopped waiting: the server did not answer for KPERF_WAIT_RETRY_SECONDS
(a restart, a proxy's 502), and the submission goes on without us.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from typing import Any, TextIO

from kperf.cli.client import Client, Unreachable
from kperf.cli.status import is_final, render_status

NO_REGRESSION, REGRESSION, FAILED, STOPPED_WAITING = 0, 1, 2, 3

# Seconds between polls; the page refreshes as often.
POLL_S = 5.0
BAR_WIDTH = 20
# How long an unreachable server is asked again before --wait gives up (a
# service restart or a deploy takes a minute or two), and the pauses between.
RETRY_S = 300.0
RETRY_PAUSE_S = (2.0, 60.0)


def exit_status(d: dict[str, Any]) -> int:
    if d["status"] == "failed":
        return FAILED
    regressed = any(m["verdict"] == "regression" for c in d.get("comparisons", []) for m in c["metrics"])
    return REGRESSION if regressed else NO_REGRESSION


def phase(d: dict[str, Any]) -> str:
    """What is happening now: the status, with the build step or the boots running."""
    if d["status"] == "building":
        steps = [
            f"{b['side']} {b['arch']} {b['phase']} {b['progress']}".rstrip()
            for b in d.get("builds", [])
            if b["status"] == "building"
        ]
        return "building" + (f" ({'; '.join(steps)})" if steps else "")
    if d["status"] == "testing":
        running = [j for j in d.get("jobs", []) if j["status"] == "leased"]
        if running:
            j = running[0]
            doing = f"{j['side']} {j['phase']} {j['progress']}".rstrip()
            return f"testing ({doing}{f', {len(running)} running' if len(running) > 1 else ''})"
    return str(d["status"])


def boots(d: dict[str, Any]) -> tuple[int, int, str]:
    """Boots done and to run, both sides together, and the same per side in words."""
    prog = d.get("progress") or {}
    sides = [prog.get(s, {"boots_done": 0, "boots_total": 0}) for s in ("base", "head")]
    done = sum(s["boots_done"] for s in sides)
    total = sum(s["boots_total"] for s in sides)
    base, head = (f"{s['boots_done']}/{s['boots_total']}" for s in sides)
    words = f"boots base {base}, head {head}"
    return done, total, words


def when(d: dict[str, Any]) -> str:
    if d.get("eta"):
        return str(d["eta"]["line"])
    if d.get("eta_reason") and not is_final(d):
        return f"no estimate: {d['eta_reason']}"
    return ""


def progress_line(d: dict[str, Any]) -> str:
    """ "#7 testing (head boot 2 of 8) · boots base 3/4, head 2/4 · verdict expected in ~5 min (by 14:05 UTC)"."""
    _, total, words = boots(d)
    parts = [f"#{d['id']} {phase(d)}"]
    if total:
        parts.append(words)
    if is_final(d):
        parts.append(f"verdict: {d.get('verdict') or d['status']}")
    elif when(d):
        parts.append(when(d))
    return " · ".join(parts)


def bar(d: dict[str, Any], width: int = BAR_WIDTH) -> str:
    done, total, _ = boots(d)
    filled = round(width * done / total) if total else 0
    return f"[{'#' * filled}{'.' * (width - filled)}]"


def _get(client: Client, sub_id: int, retry_for: float, err: TextIO) -> dict[str, Any] | None:
    """The submission, asked again with backoff while the server does not answer; None after `retry_for` s."""
    give_up = time.monotonic() + retry_for
    pause, longest = RETRY_PAUSE_S
    while True:
        try:
            d: dict[str, Any] = client.call("GET", f"/submissions/{sub_id}")
            return d
        except Unreachable as e:
            left = give_up - time.monotonic()
            if left <= 0:
                print(
                    f"kperf: stopped waiting for submission {sub_id}: {e}; the submission goes on: "
                    f"`kperf status {sub_id}` shows it",
                    file=err,
                    flush=True,
                )
                return None
            print(f"kperf: {e}; asking again in {min(pause, left):.0f} s", file=err, flush=True)
            time.sleep(min(pause, left))
            pause = min(pause * 2, longest)


def follow(
    client: Client,
    sub_id: int,
    as_json: bool,
    out: TextIO | None = None,
    interval: float | None = None,
    progress: TextIO | None = None,
    retry_for: float | None = None,
) -> int:
    out = out or sys.stdout
    # The progress goes where the result goes, but never into the JSON.
    progress = progress or (sys.stderr if as_json else out)
    pause = interval if interval is not None else float(os.environ.get("KPERF_POLL_INTERVAL", POLL_S))
    patience = retry_for if retry_for is not None else float(os.environ.get("KPERF_WAIT_RETRY_SECONDS", RETRY_S))
    tty = progress.isatty()
    last = ""
    while True:
        d = _get(client, sub_id, patience, sys.stderr)
        if d is None:
            if tty:
                progress.write("\n")
            return STOPPED_WAITING
        line = progress_line(d)
        if tty:
            cols = shutil.get_terminal_size().columns
            # Redraw in place: carriage return, then the line cut (and padded) to the terminal's width.
            text = f"{bar(d)} {line}"[: cols - 1]
            progress.write("\r" + text.ljust(cols - 1))
            progress.flush()
        elif line != last:
            print(line, file=progress, flush=True)
        last = line
        if is_final(d):
            if tty:
                progress.write("\n")
            print(json.dumps(d, indent=2) if as_json else render_status(d), file=out, flush=True)
            return exit_status(d)
        time.sleep(pause)
