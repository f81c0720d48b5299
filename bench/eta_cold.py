#!/usr/bin/env python3
"""How right is a fresh lab's first ETA? Replay a record's first batch with the host-speed model.

    .venv/bin/python bench/eta_cold.py bench/records/eta-queue-2026-11-29.json --ccache-warm
    .venv/bin/python bench/eta_cold.py RECORD --factor 1.3      # the record's host 1.3 x the reference's time
    .venv/bin/python bench/eta_cold.py RECORD --batch 10 --json out.json

For each of the record's first `--batch` submissions (by creation), the
estimate made at its creation, rebuilt by bench/eta.py's `situation_at` from
the record's rows (the builds and jobs ahead of it, in claim order) and asked
of kperf.core.lab.eta_model three ways:

- `defaults`: nothing measured and no measure of the host (600 s a build,
  120 s a job): what a fresh lab said before the host's speed was measured;
- `cold`: nothing measured, the host-speed model (kperf.core.lab.eta_cold)
  with the record's host taken as `--factor` times the reference host's time
  (no probe was taken when the records were made: docs/eta.md, "A fresh lab",
  gives each record's yardstick) and its ccache as `--ccache-warm` says;
- `as it was`: the durations the lab had measured by then, the model only
  for what it had not (the service's rule).

Each against when the verdict really came: the error relative to the
submission's real time (submit to verdict), signed (> 0: too late a
promise), and whether the real time was inside [low, high]. Replaying
records is CPU-light; the numbers do not depend on the machine's speed.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "service"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from eta import situation_at

from kperf.core.lab import eta_cold
from kperf.core.lab.eta_model import Estimate, Prior, Typical, estimate
from kperf_runner import benchmarks as registry

# The records' machine classes, as the service read them: QEMU's instruction
# clock, the runner's default of one vCPU (bench/eta.py's records hold no class).
CLOCK, VCPUS = "instructions", 0


def prior_for(rec: dict[str, Any], speed: eta_cold.HostSpeed, profile: str, arches: list[str]) -> Prior:
    """What kperf.core.lab.host_speed.prior gives for the record's kinds of work, without Django."""
    kinds = {(j["machine_class"], j["benchmark"], j["grid"]) for j in rec["jobs"]}
    kinds |= {(p["machine_class"], p["benchmark"], p["grid"]) for s in rec["submissions"] for p in s["planned"]}
    jobs: dict[tuple[str, str, str], Typical] = {}
    for mclass, bench, grid in kinds:
        params = registry.resolve_params(bench, grid, clock=CLOCK)
        b = registry.get_benchmark(bench)
        seconds = eta_cold.job_seconds(
            speed, guest_s=b.guest_seconds(params), fixed_s=b.expected_seconds(params), clock=CLOCK, vcpus=VCPUS
        )
        jobs[(mclass, bench, grid)] = eta_cold.job_prior(speed, seconds, bench, grid)
    return Prior(builds=eta_cold.build_prior(speed, profile, arches), jobs=jobs)


def first_asked(rec: dict[str, Any], sub: dict[str, Any]) -> float:
    """The first moment the record holds the submission's work: its first build or job row.

    At its creation instant the record has no row of it yet, where the
    service plans a base and a head and the first look's jobs (a submission
    `queued`, kperf.core.lab.eta); a few tens of milliseconds later the rows
    are there and bench/eta.py's `situation_at` reads them.
    """
    sid, made = sub["id"], sub["created"]
    rows = [float(max(b["created"], made)) for b in rec["builds"] if sid in b["submissions"] and b["finished"] > made]
    rows += [float(j["created"]) for j in rec["jobs"] if j["submission"] == sid]
    return min(rows, default=float(made)) + 0.01


def first_estimates(rec: dict[str, Any], batch: int, prior: Prior) -> list[dict[str, Any]]:
    subs = sorted((s for s in rec["submissions"] if s["finished"] is not None), key=lambda s: s["created"])[:batch]
    out = []
    for sub in subs:
        t = first_asked(rec, sub)
        # What was really left then: the time from submit, less the moment the rows took.
        real = sub["finished"] - t
        row: dict[str, Any] = {"id": sub["id"], "real_s": round(real, 1), "asked_after_s": round(t - sub["created"], 2)}
        for name, p, measured in (("defaults", None, False), ("cold", prior, False), ("as it was", prior, True)):
            s, hist, _ = situation_at(rec, sub, t, prior=p, measured=measured)
            est = estimate(s, hist)
            if not isinstance(est, Estimate):
                row[name] = None
                continue
            row[name] = {
                "seconds": round(est.seconds, 1),
                "low": round(est.low, 1),
                "high": round(est.high, 1),
                "error": (est.seconds - real) / real,
                "inside": est.low - 1e-6 <= real <= est.high + 1e-6,
            }
        out.append(row)
    return out


def report(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| submission | real (s) | defaults: estimate (s), error | cold: estimate [low, high] (s), error "
        "| as it was: estimate (s), error |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        cells = []
        for name in ("defaults", "cold", "as it was"):
            e = r[name]
            if e is None:
                cells.append("no estimate")
            elif name == "cold":
                cells.append(f"{e['seconds']:.0f} [{e['low']:.0f}, {e['high']:.0f}], {e['error']:+.0%}")
            else:
                cells.append(f"{e['seconds']:.0f}, {e['error']:+.0%}")
        lines.append(f"| {r['id']} | {r['real_s']:.0f} | " + " | ".join(cells) + " |")
    lines.append("")
    for name in ("defaults", "cold", "as it was"):
        errs = [abs(r[name]["error"]) for r in rows if r[name] is not None]
        inside = [r[name]["inside"] for r in rows if r[name] is not None]
        if errs:
            lines.append(
                f"{name}: |relative error| median {statistics.median(errs):.0%}, largest {max(errs):.0%}, "
                f"within 50% {sum(e <= 0.5 for e in errs)} of {len(errs)}, real time inside [low, high] "
                f"{sum(inside)} of {len(inside)}"
            )
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("record", type=Path, help="a record of bench/eta.py --record (bench/records/eta-*.json)")
    p.add_argument("--batch", type=int, default=10, help="the first this many submissions")
    p.add_argument(
        "--factor", type=float, default=1.0, help="the record's host: how many times the reference host's time"
    )
    p.add_argument("--ccache-warm", action="store_true", help="the record's lab had the sources' objects in ccache")
    p.add_argument("--profile", default="tiny")
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args()
    rec = json.loads(args.record.read_text())
    if "submissions" not in rec:
        p.error(f"{args.record} is not a record of bench/eta.py --record (no `submissions`)")
    speed = eta_cold.HostSpeed(eta_cold.REFERENCE_PROBE_S * args.factor, ccache_warm=args.ccache_warm)
    arches = sorted({"arm64" if "arm64" in c else "x86_64" for c in rec["runners"]})
    rows = first_estimates(rec, args.batch, prior_for(rec, speed, args.profile, arches))
    print(f"{args.record.name}: {rec['source']}; the first estimate of each of its first {len(rows)} submissions")
    print(f"host: {args.factor} x the reference host's time, ccache {'warm' if args.ccache_warm else 'empty'}")
    print(f"replayed on {platform.machine()}, {platform.python_implementation()} {platform.python_version()}")
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print("\n".join(report(rows)))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
