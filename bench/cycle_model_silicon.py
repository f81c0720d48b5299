"""The cycle model against this host's silicon: cost ratios of user-space pairs (docs/cycle-clock.md, issue 42).

Each pair is two runs of bench/csrc/cycle_pairs.c (a locked increment and a plain one, an
increment with and without mfence, pointer chasing at a working set and at 16 KiB, two threads
writing one line and two lines, copies of a size and of 4 KiB). On the host each run is timed
natively, many repetitions, the fewest nanoseconds per operation kept (this machine gives
`perf stat` no hardware counters). Under the model the same binary runs in QEMU's user mode
with the plugin, at N and N/2 operations; the difference in modelled cycles over N/2 is the
cost per operation. A pair agrees when the model's ratio is within 25% of the host's.

The model side needs qemu-user (`apt-get install qemu-user`, which gives qemu-x86_64); without
it only the host's side is measured and said so.

    .venv/bin/python bench/cycle_model_silicon.py [--reps 20] [--record bench/records/cycle_model_silicon-DATE.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "csrc" / "cycle_pairs.c"
CYCLES = HERE.parent / "runners" / "kperf_runner" / "cycles"
KIB, MIB = 1 << 10, 1 << 20

# (name, numerator run, denominator run); a run is (kind, param, operations, per-byte?).
Run = tuple[str, int, int, bool]
CHASE_BASE: Run = ("chase", 16 * KIB, 1_000_000, False)
COPY_BASE: Run = ("copy", 4 * KIB, 16_384, True)
PAIRS: list[tuple[str, Run, Run]] = [
    ("locked vs plain increment", ("locked", 0, 1_000_000, False), ("plain", 0, 1_000_000, False)),
    ("increment+mfence vs increment", ("mfence", 0, 1_000_000, False), ("plain", 0, 1_000_000, False)),
    *[
        (f"chase {size // KIB} KiB vs 16 KiB", ("chase", size, 1_000_000, False), CHASE_BASE)
        for size in (64 * KIB, 256 * KIB, 1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB)
    ],
    ("two threads, one line vs two lines", ("same", 0, 1_000_000, False), ("apart", 0, 1_000_000, False)),
    *[
        (f"copy {size // KIB} KiB vs 4 KiB, per byte", ("copy", size, max(4, 64 * MIB // size), True), COPY_BASE)
        for size in (64 * KIB, 1 * MIB, 16 * MIB)
    ],
]


def build(out: Path) -> tuple[Path, Path]:
    binary = out / "cycle_pairs"
    subprocess.run(["gcc", "-std=gnu11", "-O2", "-pthread", "-o", str(binary), str(SOURCE)], check=True)
    subprocess.run(["make", "-s", "-C", str(CYCLES), f"OUT={out}", "plugin"], check=True)
    return binary, out / "kperf_cycles.so"


def native(binary: Path, run: Run, reps: int) -> float:
    kind, param, n, per_byte = run
    text = subprocess.run(
        [str(binary), kind, str(param), str(n), str(reps)], capture_output=True, text=True, check=True
    )
    ns = float(text.stdout)
    return ns / param if per_byte else ns


def modelled(binary: Path, plugin: Path, run: Run, scratch: Path) -> float:
    """Modelled cycles per operation (per byte for copies): the difference between N and N/2 operations."""
    kind, param, n, per_byte = run
    cycles: list[int] = []
    for count in (n, n // 2):
        report = scratch / f"{kind}-{param}-{count}.json"
        argv = ["qemu-x86_64", "-plugin", f"{plugin},out={report}", str(binary), kind, str(param), str(count), "0"]
        subprocess.run(argv, check=True, capture_output=True)
        cycles.append(int(json.loads(report.read_text())["total"]["cycles"]))
    per_op = (cycles[0] - cycles[1]) / (n - n // 2)
    return per_op / param if per_byte else per_op


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20, help="timed repetitions per native run (the minimum is kept)")
    parser.add_argument("--record", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="cycle-silicon-"))
    binary, plugin = build(scratch)
    model_side = shutil.which("qemu-x86_64") is not None
    if not model_side:
        print("qemu-x86_64 not found: measuring the host only (the model side needs apt-get install qemu-user)")
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())  # fmt: skip
    rows: list[dict[str, Any]] = []
    cache: dict[Run, tuple[float, float | None]] = {}
    for name, top, bottom in PAIRS:
        for run in (top, bottom):
            if run not in cache:
                cache[run] = (
                    native(binary, run, args.reps),
                    modelled(binary, plugin, run, scratch) if model_side else None,
                )
        host = cache[top][0] / cache[bottom][0]
        model_top, model_bottom = cache[top][1], cache[bottom][1]
        model = model_top / model_bottom if model_top is not None and model_bottom else None
        agree = model is not None and abs(model - host) <= 0.25 * host
        rows.append(
            {"pair": name, "host_ratio": round(host, 3), "model_ratio": model and round(model, 3), "agree": agree}
        )
        shown = f"{model:8.2f}" if model is not None else "       -"
        print(f"{name:42s} host {host:8.2f}  model {shown}  {'agree' if agree else ''}", flush=True)
    if model_side:
        print(f"{sum(row['agree'] for row in rows)} of {len(rows)} pairs within 25%")
    record = {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "host_cpu": cpu,
        "reps": args.reps,
        "model_side": model_side,
        "runs": {f"{k[0]} {k[1]} x{k[2]}": {"host_ns": v[0], "model_cycles": v[1]} for k, v in cache.items()},
        "pairs": rows,
    }
    if args.record:
        args.record.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {args.record}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
