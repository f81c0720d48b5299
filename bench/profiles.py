"""What each configuration profile and vCPU count costs: builds, boots and their spread.

On the test kernel tree (kperf_testing.kbuild, Debian's linux-source-6.1),
x86_64, for each profile asked (default tiny and mm; distro when asked):

1. base, clean: an empty object tree and an empty ccache of its own (the
   cost of a first build of that profile on a new lab);
2. a fixture branch (default pagealloc-slow: one line in mm/page_alloc.c),
   incremental in base's warm tree (what a submission's head costs);
3. base booted on QEMU's instruction clock with 1, 2 and 4 vCPUs, twice
   each, running spawn's quick grid and pft's scaling grid: the host seconds
   a boot takes and the largest difference between the two boots of one
   kernel over every metric (0 means they repeat to the digit).

Usage (tiny and mm: about an hour on 2 cores, 10 GB under --work):

    .venv/bin/python bench/profiles.py [--profile tiny --profile mm] [--vcpus 1 --vcpus 2] \
        [--work DIR] [--markdown out.md] [--json out.json]

The figures, with the machine and date, go in docs/kernels.md, "Cost per
profile and vCPU count".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

from kperf_kbuild.driver import PROFILES, BuildRequest, BuildResult, build_kernel
from kperf_runner.backends import BootJob
from kperf_runner.backends.qemu import QemuBackend
from kperf_runner.benchmarks import get_benchmark, resolve_params
from kperf_runner.toolchain import compile_all
from kperf_testing.kbuild import ensure_test_tree

BENCHES = (("spawn", "quick"), ("pft", "scaling"))


def cache_dir() -> Path:
    return Path(os.environ.get("KPERF_CACHE", Path.home() / ".cache" / "kperf"))


def rev(tree: Path, branch: str) -> str:
    out = subprocess.run(["git", "-C", str(tree), "rev-parse", f"refs/heads/{branch}"], capture_output=True, text=True)
    return out.stdout.strip()


def build(tree: Path, sha: str, profile: str, work: Path, ccache: Path) -> tuple[BuildResult, float]:
    out = work / "out" / f"{profile}-{sha[:12]}"
    started = time.monotonic()
    result = build_kernel(
        BuildRequest(
            repo=tree, sha=sha, arch="x86_64", work_root=work, output_dir=out, ccache_dir=ccache, profile=profile
        )
    )
    return result, time.monotonic() - started


def boot(backend: QemuBackend, kernel: Path, vcpus: int, state: Path) -> tuple[dict[str, list[float]], float]:
    """One boot running every benchmark of BENCHES: {metric: values}, host seconds."""
    commands: list[list[str]] = []
    binaries: dict[str, Path] = {}
    parts: list[tuple[Any, dict[str, Any], int, int]] = []
    for name, grid in BENCHES:
        bench = get_benchmark(name)
        params = resolve_params(name, grid, clock="instructions")
        cmds = bench.command(params, backend.bindir)
        parts.append((bench, params, len(commands), len(cmds)))
        commands += cmds
        binaries.update(compile_all(bench.sources(), "x86_64", state))
    expected = sum(b.expected_seconds(p) for b, p, _, _ in parts)
    timeout = backend.timeout(expected, len(commands)) * 4
    job = BootJob(commands, binaries, timeout=timeout, clock="instructions", vcpus=vcpus)
    started = time.monotonic()
    result = backend.boot(job, kernel)
    seconds = time.monotonic() - started
    values: dict[str, list[float]] = {}
    for bench, params, _, _ in parts:
        for sample in bench.parse(result.raw_output, params):
            values.setdefault(sample.metric, []).append(sample.value)
    return values, seconds


def spread_pct(a: dict[str, list[float]], b: dict[str, list[float]]) -> float:
    """The largest relative difference between two boots' values, over every metric and iteration."""
    worst = 0.0
    for metric in a.keys() & b.keys():
        for x, y in zip(a[metric], b[metric], strict=False):
            if x:
                worst = max(worst, abs(y - x) / abs(x) * 100.0)
    return worst


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    tree = ensure_test_tree(args.cache)
    base, head = rev(tree, "base"), rev(tree, args.branch)
    rows: list[dict[str, Any]] = []
    for profile in args.profile or ["tiny", "mm"]:
        work = args.work / profile
        shutil.rmtree(work, ignore_errors=True)
        ccache = work / "ccache"
        clean, clean_s = build(tree, base, profile, work, ccache)
        if not clean.ok:
            print(f"{profile}: base did not build: {clean.error}", file=sys.stderr)
            continue
        incremental, incr_s = build(tree, head, profile, work, ccache)
        row: dict[str, Any] = {
            "profile": profile,
            "clean_s": clean_s,
            "clean_files": clean.compiled,
            "incremental_s": incr_s,
            "incremental_files": incremental.compiled,
            "image_bytes": Path(clean.artifacts["kernel"]).stat().st_size,
            "boots": {},
        }
        state = work / "runner"
        state.mkdir(parents=True, exist_ok=True)
        backend = QemuBackend("x86_64", state, accel="tcg")
        for vcpus in args.vcpus or [1, 2, 4]:
            first, first_s = boot(backend, Path(clean.artifacts["kernel"]), vcpus, state)
            second, second_s = boot(backend, Path(clean.artifacts["kernel"]), vcpus, state)
            row["boots"][vcpus] = {
                "seconds": [first_s, second_s],
                "spread_pct": spread_pct(first, second),
                "metrics": len(first),
            }
            print(f"{profile} {vcpus} vCPU: {first_s:.0f}/{second_s:.0f} s", file=sys.stderr)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    load = os.getloadavg()[0]
    lines = [
        f"Measured {date.today().isoformat()} on {platform.machine()}, {os.cpu_count()} cores, "
        f"load {load:.1f} at the end, QEMU TCG:",
        "",
        "| profile | clean build | incremental (one file) | image | vCPUs | boot | spread between two boots |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        for vcpus, b in sorted(r["boots"].items()):
            lines.append(
                f"| {r['profile']} | {r['clean_s']:.0f} s, {r['clean_files']} files | {r['incremental_s']:.0f} s, "
                f"{r['incremental_files']} files | {r['image_bytes'] / 2**20:.1f} MiB | {vcpus} | "
                f"{min(b['seconds']):.0f} to {max(b['seconds']):.0f} s | {b['spread_pct']:.3g}% |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="append", choices=PROFILES)
    parser.add_argument("--vcpus", action="append", type=int, choices=(1, 2, 4))
    parser.add_argument("--branch", default="pagealloc-slow")
    parser.add_argument("--cache", type=Path, default=cache_dir())
    parser.add_argument("--work", type=Path, default=cache_dir() / "bench-profiles")
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = measure(args)
    text = markdown(rows)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
