"""How the page allocator's readings on the instruction clock spread with one vCPU and with two.

Boots the untouched base fixture kernel (x86_64, `--profile`, tiny by default) under
QEMU's instruction clock with pagealloc's quick grid, K boots per setting. A
setting is a vCPU count and optional kernel words, e.g. `2:maxcpus=1` (two
vCPUs, the second never brought up): it separates what the second CPU does
while the first measures from what QEMU's round-robin of two vCPUs does.

Per setting it reports, over the metrics (kperf's samples, from the module's
totals, with their decimals):

- whether the boots' result lines are identical;
- between boots: each metric's range of boot means over their mean;
- within a boot: each metric's range of iterations over their mean (the
  metrics with three kept rounds: orders 1-4);
- the level against the first setting's (the mean of the boot means);
- the /proc/vmstat deltas that differ between the settings by more than 10%.

With `--seeds N` every setting is also booted at phase seeds 1..N
(`kperf.phase_seed`, as the runner gives each boot), and reports the boots'
spread over the seeds (per metric, the sd of the seeds' medians over their
mean); `--against BRANCH` boots that fixture kernel at the same seeds and
counts the metrics whose mean over the seeds differs from the base's by over
0.5% and 1%: what a change the module never runs does to the readings.

Usage (builds the base kernel once, into ~/.cache/kperf):

    .venv/bin/python bench/pagealloc_vcpus.py [--boots 3] [--setting 1 --setting 2 ...] [--json out.json]
        [--save-raw DIR] [--seeds 6 [--against memcg-charge-slower]]

Results and the machine go in docs/benchmarks.md, "The page allocator on one vCPU and on two".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kperf_runner.backends import BootJob, BootResult
from kperf_runner.backends.qemu import QemuBackend
from kperf_runner.benchmarks import get_benchmark, resolve_params
from kperf_runner.toolchain import compile_all
from kperf_testing.kbuild import build_fixture_kernel, ensure_test_tree

BENCH = "pagealloc"


# The guest has no cat: kmodload copies a file to stdout after loading a
# module, so loading the module with almost no work (order 4, one batch,
# three rounds of one) reads a /proc file around the measurement.
PROC_FILES = ("/proc/interrupts", "/proc/softirqs")
# The quick grid's parameters this run changes (--inner).
OVERRIDES: dict[str, Any] = {}


def _read_proc(bindir: str, path: str) -> list[str]:
    return [f"{bindir}/kmodload", "-c", "0", "-o", path, f"{bindir}/pagealloc.ko", "orders=4", "batch_limit_kb=128"]


def boot(backend: QemuBackend, build: dict[str, Path], setting: str, state: Path) -> BootResult:
    vcpus, _, words = setting.partition(":")
    b = get_benchmark(BENCH)
    params = resolve_params(BENCH, "quick", OVERRIDES)
    binaries = compile_all(b.sources(), "x86_64", state)
    for name in b.artifacts():
        binaries[name] = build[name]
    bindir = backend.bindir.rstrip("/")
    before = [[*_read_proc(bindir, p), "outer=3", "inner=1"] for p in PROC_FILES]
    after = [[*_read_proc(bindir, p), "outer=3", "inner=1"] for p in (*PROC_FILES, "/proc/zoneinfo")]
    job = BootJob(
        [*before, *b.command(params, backend.bindir), *after],
        binaries,
        timeout=backend.timeout(b.expected_seconds(params), 1) * 4,
        clock="instructions",
        vcpus=int(vcpus),
        cmdline=words,
    )
    return backend.boot(job, build["kernel"])


def bench_output(result: BootResult) -> str:
    return result.commands[len(PROC_FILES)].output


def per_cpu_counts(text: str) -> dict[str, list[int]]:
    """{row: counts per CPU} of /proc/interrupts or /proc/softirqs."""
    cpus = sum(1 for word in text.splitlines()[0].split() if word.startswith("CPU")) if text.strip() else 0
    out: dict[str, list[int]] = {}
    for line in text.splitlines()[1:]:
        name, _, rest = line.partition(":")
        words = rest.split()
        if len(words) >= cpus and all(w.isdigit() for w in words[:cpus]):
            out[name.strip()] = [int(w) for w in words[:cpus]]
    return out


def proc_deltas(result: BootResult) -> dict[str, list[int]]:
    """{interrupt or softirq: per CPU, its count over the benchmark command (and the two reads after it)}."""
    n = len(PROC_FILES)
    out: dict[str, list[int]] = {}
    for i in range(n):
        first = per_cpu_counts(result.commands[i].output)
        last = per_cpu_counts(result.commands[n + 1 + i].output)
        for name, counts in last.items():
            delta = [c - f for c, f in zip(counts, first.get(name, [0] * len(counts)), strict=False)]
            if any(delta):
                out[name] = delta
    return out


def pcp(result: BootResult) -> list[str]:
    """Each zone's per-CPU list limits: "zone cpu high batch" (/proc/zoneinfo after the run)."""
    zone, cpu, out = "", "", []
    for line in result.commands[-1].output.splitlines():
        words = line.split()
        if line.startswith("Node"):
            zone = words[-1]
        elif words[:1] == ["cpu:"]:
            cpu = words[1]
        elif words[:1] == ["high:"]:
            out.append(f"{zone} cpu{cpu} high {words[1]}")
        elif words[:1] == ["batch:"] and out:
            out[-1] += f" batch {words[1]}"
    return out


def readings(result: BootResult) -> dict[str, list[float]]:
    """{metric: the boot's kept iterations}."""
    b = get_benchmark(BENCH)
    values: dict[str, list[float]] = {}
    for sample in b.parse(bench_output(result), resolve_params(BENCH, "quick", OVERRIDES)):
        values.setdefault(sample.metric, []).append(sample.value)
    return values


def _range_pct(values: list[float]) -> float:
    mean = statistics.fmean(values)
    return (max(values) - min(values)) / mean * 100.0 if mean else 0.0


def _dist(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), 4),
        "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 4),
        "max": round(ordered[-1], 4),
        "over_0.1pct": sum(v > 0.1 for v in ordered),
        "over_0.5pct": sum(v > 0.5 for v in ordered),
        "metrics": len(ordered),
    }


def summarise(boots: list[BootResult]) -> dict[str, Any]:
    per_boot = [readings(r) for r in boots]
    metrics = sorted(per_boot[0])
    means = {m: [statistics.fmean(b[m]) for b in per_boot] for m in metrics}
    between = [_range_pct(means[m]) for m in metrics]
    within = [_range_pct(b[m]) for b in per_boot for m in metrics if len(b[m]) >= 3]
    lines = [
        "".join(x for x in bench_output(r).splitlines(keepends=True) if x.startswith(("order", "pagealloc-total")))
        for r in boots
    ]
    deltas = [proc_deltas(r) for r in boots]
    counters: dict[str, float] = {}
    for r in boots:
        for name, delta in r.counters.get("vmstat", {}).items():
            counters[name] = counters.get(name, 0.0) + delta / len(boots)
    return {
        "boots": len(boots),
        "identical_result_lines": len(set(lines)) == 1,
        "between_boots_pct": _dist(between),
        "within_boot_pct": _dist(within),
        "level": {m: statistics.fmean(v) for m, v in means.items()},
        "vmstat_mean": counters,
        "irq_per_cpu_each_boot": {n: [d.get(n) for d in deltas] for n in sorted({k for d in deltas for k in d})},
        "pcp": pcp(boots[0]),
        "wall_s": [round(r.seconds, 1) for r in boots],
    }


def seeded(setting: str, seed: int) -> str:
    """`setting` with a phase seed among its kernel words."""
    vcpus, _, words = setting.partition(":")
    return f"{vcpus}:{words} kperf.phase_seed={seed}".replace(": ", ":")


def over_seeds(levels: dict[str, list[dict[str, float]]], against: str | None) -> dict[str, Any]:
    """From {kernel: per seed, {metric: the boot's median}}: the base's spread over the seeds and,
    with `against`, how many metrics that kernel's mean over the same seeds moves."""
    base = levels["base"]
    metrics = sorted(base[0])
    sds = []
    for m in metrics:
        values = [b[m] for b in base]
        sds.append(statistics.stdev(values) / statistics.fmean(values) * 100.0 if len(values) > 1 else 0.0)
    widest = sorted(zip(sds, metrics, strict=True), reverse=True)[:12]
    out: dict[str, Any] = {
        "seeds": len(base),
        "spread_over_seeds_pct": _dist(sds),
        "widest_over_seeds_pct": {m: round(sd, 3) for sd, m in widest},
    }
    if against:
        moved = []
        for m in metrics:
            b, h = statistics.fmean(x[m] for x in base), statistics.fmean(x[m] for x in levels[against])
            moved.append(abs(h - b) / b * 100.0 if b else 0.0)
        out[f"{against}_vs_base_pct"] = _dist(moved) | {"over_1pct": sum(v > 1.0 for v in moved)}
        most = sorted(zip(moved, metrics, strict=True), reverse=True)[:12]
        out[f"{against}_most_moved_pct"] = {m: round(v, 3) for v, m in most}
    return out


def _against_first(report: dict[str, Any], settings: list[str]) -> None:
    first = report["settings"][settings[0]]
    for s in settings[1:]:
        r = report["settings"][s]
        diffs = [(r["level"][m] - v) / v * 100.0 for m, v in first["level"].items() if v]
        r["level_vs_first_pct"] = {
            "median": round(statistics.median(diffs), 4),
            "min": round(min(diffs), 4),
            "max": round(max(diffs), 4),
        }
        names = set(first["vmstat_mean"]) | set(r["vmstat_mean"])
        r["vmstat_vs_first"] = {
            n: (round(first["vmstat_mean"].get(n, 0.0), 1), round(r["vmstat_mean"].get(n, 0.0), 1))
            for n in sorted(names)
            if abs(r["vmstat_mean"].get(n, 0.0) - first["vmstat_mean"].get(n, 0.0))
            > 0.1 * max(abs(first["vmstat_mean"].get(n, 0.0)), 1.0)
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--boots", type=int, default=3, help="boots per setting (default 3)")
    parser.add_argument("--setting", action="append", help="VCPUS[:kernel words] (default: 1 and 2)")
    parser.add_argument(
        "--cache", type=Path, default=Path(os.environ.get("KPERF_CACHE", Path.home() / ".cache" / "kperf"))
    )
    parser.add_argument("--profile", default="tiny", help="the base kernel's configuration profile (tiny, mm)")
    parser.add_argument("--seeds", type=int, default=0, help="also boot each setting at phase seeds 1..N")
    parser.add_argument("--against", help="with --seeds: a fixture branch booted at the same seeds")
    parser.add_argument("--inner", type=int, help="repetitions per round (default: the quick grid's)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--save-raw", type=Path, help="write each boot's raw output here")
    args = parser.parse_args(argv)
    settings: list[str] = args.setting or ["1", "2"]
    if args.inner:
        OVERRIDES["inner"] = args.inner
    tree = ensure_test_tree(args.cache)
    result = build_fixture_kernel(tree, "base", "x86_64", args.cache, profile=args.profile)
    if not result.ok:
        print(f"base did not build: {result.error}", file=sys.stderr)
        return 1
    build = {k: Path(v) for k, v in result.artifacts.items()}
    kernels = {"base": build}
    if args.against:
        other = build_fixture_kernel(tree, args.against, "x86_64", args.cache, profile=args.profile)
        if not other.ok:
            print(f"{args.against} did not build: {other.error}", file=sys.stderr)
            return 1
        kernels[args.against] = {k: Path(v) for k, v in other.artifacts.items()}
    state = args.cache / "pagealloc-vcpus"
    state.mkdir(parents=True, exist_ok=True)
    backend = QemuBackend("x86_64", state, accel="tcg")
    report: dict[str, Any] = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at start",
        "boots": args.boots,
        "profile": args.profile,
        "params": resolve_params(BENCH, "quick", OVERRIDES),
        "settings": {},
    }
    started = time.monotonic()
    for setting in settings:
        boots = []
        for i in range(args.boots):
            r = boot(backend, build, setting, state)
            boots.append(r)
            if args.save_raw:
                args.save_raw.mkdir(parents=True, exist_ok=True)
                name = f"vcpus-{setting.replace(':', '-').replace('=', '')}-{i}.txt"
                (args.save_raw / name).write_text(bench_output(r))
        report["settings"][setting] = summarise(boots)
        if args.seeds:
            levels = {
                name: [
                    {m: statistics.median(v) for m, v in readings(boot(backend, k, seeded(setting, n), state)).items()}
                    for n in range(1, args.seeds + 1)
                ]
                for name, k in kernels.items()
            }
            report["settings"][setting]["seeded"] = over_seeds(levels, args.against)
    _against_first(report, settings)
    for setting in settings:
        r = report["settings"][setting]
        print(
            f"{setting:>14}: identical {r['identical_result_lines']}; between boots {r['between_boots_pct']}; "
            f"within a boot {r['within_boot_pct']}; level vs first {r.get('level_vs_first_pct', '-')}; "
            f"vmstat vs first {r.get('vmstat_vs_first', '-')}; wall s {r['wall_s']}"
        )
        print(f"{'':>14}  per CPU over the run: {r['irq_per_cpu_each_boot']}; pcp {r['pcp']}")
        if "seeded" in r:
            print(f"{'':>14}  at phase seeds: {r['seeded']}")
    print(f"{args.boots} boots per setting, {time.monotonic() - started:.0f} s")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    **report,
                    "settings": {
                        s: {k: v for k, v in r.items() if k != "level"} for s, r in report["settings"].items()
                    },
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
