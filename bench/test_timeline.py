"""Where a test run's time goes: each module's wall time beside the CPU's busy share.

    .venv/bin/python bench/test_timeline.py run --record bench/records/test-timeline-DATE.json -- make test
    .venv/bin/python bench/test_timeline.py report bench/records/test-timeline-DATE.json

`run` starts the command with KPERF_TEST_TIMELINE pointing at a file that
the `kperf_testing.timeline` plugin (loaded by pytest.ini) fills with when
each test started and ended, and reads /proc/stat every `--interval`
seconds meanwhile. The record holds both, the machine, the date and the
prebuild's build times (KPERF_CACHE/kernels-prepare.log). `report` prints,
per module in the order they ran: its start, wall time, tests, the share of
all cores busy over its span and the core-seconds left idle. On two cores a
run is CPU-bound where the busy share is near 100%; a module at 50% ran
with one core idle, which is time another process could have used.
Timings go into docs/test-runs.md with the machine and date; nothing here
asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# kperf_testing.timeline.ENV, spelt out: `run` works before the venv exists
# (`run -- ./.ci/run` on a new machine makes it), with the system Python.
ENV = "KPERF_TEST_TIMELINE"
READY = re.compile(r"^(?P<kernel>\S+ \S+ \S+): (?P<state>ready|failed.*?) after (?P<seconds>\d+) s$")


def cpu_times() -> tuple[int, int, int]:
    """(total, idle, steal) jiffies of all CPUs since boot: idle counts iowait."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    return user + nice + system + idle + iowait + irq + softirq + steal, idle + iowait, steal


class Sampler(threading.Thread):
    """The busy share of all cores over each interval: [t_end, busy, steal], fractions of 1."""

    def __init__(self, interval: float) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.samples: list[list[float]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        last = cpu_times()
        while not self.stopped.wait(self.interval):
            now = cpu_times()
            total = now[0] - last[0]
            if total > 0:
                idle, steal = now[1] - last[1], now[2] - last[2]
                self.samples.append([time.time(), (total - idle - steal) / total, steal / total])
            last = now


def read_timeline(path: Path) -> list[dict[str, Any]]:
    """One row per test, from the plugin's start and end lines."""
    started: dict[tuple[str, str], float] = {}
    tests: list[dict[str, Any]] = []
    if not path.exists():
        return tests
    for line in path.read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        key = (event["worker"], event["nodeid"])
        if event["event"] == "start":
            started[key] = event["t"]
        elif key in started:
            tests.append(
                {
                    "nodeid": event["nodeid"],
                    "worker": event["worker"],
                    "start": started.pop(key),
                    "end": event["t"],
                    "outcome": event["outcome"],
                }
            )
    return tests


def read_prebuild(log: Path) -> list[dict[str, Any]]:
    """The prebuild's "KERNEL: ready after N s" lines (kperf_testing.prebuild)."""
    if not log.exists():
        return []
    rows = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        m = READY.match(line)
        if m:
            rows.append({"kernel": m["kernel"], "state": m["state"], "seconds": int(m["seconds"])})
    return rows


def run(command: list[str], interval: float) -> dict[str, Any]:
    sampler = Sampler(interval)
    with tempfile.TemporaryDirectory() as tmp:
        timeline = Path(tmp) / "timeline.jsonl"
        env = {**os.environ, ENV: str(timeline)}
        t0 = time.time()
        sampler.start()
        rc = subprocess.call(command, env=env)
        t1 = time.time()
        sampler.stopped.set()
        sampler.join()
        tests = read_timeline(timeline)
    cache = Path(os.environ.get("KPERF_CACHE", Path.home() / ".cache" / "kperf"))
    return {
        "bench": "test_timeline",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)),
        "machine": {
            "cpus": os.cpu_count(),
            "cpu": _cpu_model(),
            "arch": platform.machine(),
        },
        "command": command,
        "rc": rc,
        "start": t0,
        "wall_s": t1 - t0,
        "interval_s": interval,
        "cpu": sampler.samples,
        "tests": tests,
        "prebuild": read_prebuild(cache / "kernels-prepare.log"),
    }


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


@dataclass(frozen=True)
class Span:
    """A module as it ran: seconds from the run's start."""

    name: str
    start: float
    end: float
    tests: int
    failed: int
    busy: float  # mean share of all cores busy over the span, 0 to 1; nan without samples
    idle_core_s: float  # core-seconds left idle over the span

    @property
    def wall(self) -> float:
        return self.end - self.start


def _cpu_over(rec: dict[str, Any], start: float, end: float) -> tuple[float, float]:
    """Mean busy share and idle core-seconds over [start, end] (absolute times)."""
    cores = rec["machine"]["cpus"] or 1
    interval = rec["interval_s"]
    inside = [busy for t, busy, _steal in rec["cpu"] if start < t - interval / 2 <= end]
    if not inside:
        return float("nan"), 0.0
    mean = sum(inside) / len(inside)
    return mean, (1.0 - mean) * cores * (end - start)


def spans(rec: dict[str, Any]) -> list[Span]:
    """One span per module, in the order the modules started."""
    modules: dict[str, list[dict[str, Any]]] = {}
    for test in rec["tests"]:
        modules.setdefault(test["nodeid"].split("::", 1)[0], []).append(test)
    out = []
    for name, tests in modules.items():
        start, end = min(t["start"] for t in tests), max(t["end"] for t in tests)
        busy, idle = _cpu_over(rec, start, end)
        failed = sum(t["outcome"] == "failed" for t in tests)
        out.append(Span(name, start - rec["start"], end - rec["start"], len(tests), failed, busy, idle))
    return sorted(out, key=lambda s: s.start)


def report(rec: dict[str, Any], top: int = 0) -> list[str]:
    rows = spans(rec)
    busy, idle = _cpu_over(rec, rec["start"], rec["start"] + rec["wall_s"])
    lines = [
        f"{rec['date']}, {rec['machine']['cpus']} x {rec['machine']['cpu']}: `{' '.join(rec['command'])}` "
        f"exit {rec['rc']}, {rec['wall_s'] / 60:.1f} min, {len(rec['tests'])} tests, "
        f"cores {100 * busy:.0f}% busy, {idle / 60:.1f} core-minutes idle",
        "",
        "| module | start (min) | wall (s) | tests | failed | cores busy | idle core-s |",
        "|---|---|---|---|---|---|---|",
    ]
    chosen = sorted(rows, key=lambda s: -s.wall)[:top] if top else rows
    for s in sorted(chosen, key=lambda s: s.start):
        share = "-" if s.busy != s.busy else f"{100 * s.busy:.0f}%"
        lines.append(
            f"| {s.name} | {s.start / 60:.1f} | {s.wall:.1f} | {s.tests} | {s.failed} | {share} | {s.idle_core_s:.0f} |"
        )
    if rec["prebuild"]:
        lines += ["", "prebuild (beside the tests):"]
        lines += [f"- {p['kernel']}: {p['state']} after {p['seconds']} s" for p in rec["prebuild"]]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("run", help="run a command (after --) and record its timeline")
    r.add_argument("--record", help="write the record here (JSON)")
    r.add_argument("--interval", type=float, default=5.0, help="seconds between CPU samples")
    r.add_argument("--top", type=int, default=0, help="show only the N longest modules")
    r.add_argument("command", nargs=argparse.REMAINDER)
    p = sub.add_parser("report", help="print a record's table")
    p.add_argument("record")
    p.add_argument("--top", type=int, default=0, help="show only the N longest modules")
    args = ap.parse_args()
    if args.mode == "run":
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            ap.error("run: give the command after --, for example: run -- make test")
        rec = run(command, args.interval)
        if args.record:
            Path(args.record).write_text(json.dumps(rec, indent=1) + "\n", encoding="utf-8")
    else:
        rec = json.loads(Path(args.record).read_text(encoding="utf-8"))
    print("\n".join(report(rec, args.top)))
    return int(rec["rc"]) if args.mode == "run" else 0


if __name__ == "__main__":
    sys.exit(main())
