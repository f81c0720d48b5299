"""How far builds of one source differ when an unrelated change moves the code, and what kperf's intervals make of it.

Under QEMU's instruction clock two boots of one build agree to the last
digit, so an interval made of boots says "no doubt at all" -- while a change
no benchmark runs moves functions and data, and with them every metric's
instruction count a little (docs/statistics.md, "Between builds"). This
script measures that spread directly:

- K perturbed builds of the base: the same source plus a function no one
  calls, of a different size each time (`.skip` bytes in init/main.c, linked
  early, so the text of nearly every object after it moves by that much:
  every alignment phase of a cache line and a page is hit across K). Made
  with git plumbing as branches `perturb-NN` of the test tree; built once,
  cached like the fixtures.
- every benchmark's quick grid booted on each, B boots per kernel, on the
  instruction clock;
- per metric: the between-build sd and the largest difference of any build
  from the base;
- kperf's A/B test of the base against each perturbed build, as the service
  runs it today (boots only), and with the between-build part estimated from
  the other perturbed builds (leave one out: what a lab that built the base's
  perturbed builds once would know): the share of metrics flagged at the
  practical thresholds 0.5%, 0.25% and 0.1%, and the share of intervals that
  contain the true difference, 0;
- the power left on fixtures (`--fixture brk-slower ...`): their expected
  metrics still regressions with the between-build part in the interval.

`--perturb fault-path` makes the K builds differ in what they *execute*
instead: build n spins 4n times more in `handle_mm_fault` (mm/memory.c), a
few dozen instructions per page fault, like a small patch to the fault path;
`--perturb fault-pause` spins with cpu_relax() (a pause, as a waiting loop
does), which under TCG also ends the vCPU's turn; `--perturb cache-pause`
spins so at the top of every page-cache insertion (`__filemap_add_folio`,
mm/filemap.c), which every page of the initramfs takes at boot.
Padding moves code without changing what runs, and on the instruction clock
that moves nothing; on two vCPUs a kernel whose faults cost a little more
leaves the page allocator in another state when its module runs
(docs/benchmarks.md, "The page allocator on one vCPU and on two"). Only the
page allocator's figures mean anything then: pft, spawn and aim9 run the
path the builds change. `--vcpus N` boots every kernel with N vCPUs.

Usage (builds what it needs into ~/.cache/kperf):

    .venv/bin/python bench/build_noise.py [--kernels 20] [--boots 2] [--jobs 2]
        [--bench spawn ...] [--fixture brk-slower ...] [--json out.json] [--markdown out.md]

Results and the machine they ran on go in docs/statistics.md, "Between
builds, measured".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import date
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from kperf.stats.abtest import MetricInput, NoisePrior, Verdict, compare_metrics, min_effect_for_clock
from kperf.stats.boot_spread import spread_of_runs
from kperf.stats.builds import between_build_noise, measured_build_prior
from kperf.stats.sequential import Plan, sequential_look
from kperf_kbuild.profiles import DEFAULT_PROFILE, PROFILES
from kperf_runner.backends import BootJob
from kperf_runner.backends.qemu import QemuBackend
from kperf_runner.benchmarks import get_benchmark, resolve_params
from kperf_runner.toolchain import compile_all
from kperf_testing.kbuild import FIXTURES_DIR, build_fixture_kernel, ensure_test_tree, read_fixture

BENCHMARKS = ("spawn", "aim9", "pft", "pagealloc")
THRESHOLDS = (0.5, 0.4, 0.3, 0.25, 0.2, 0.1)
CLOCK = "instructions"
PAD_FILE = "init/main.c"
# Pad sizes: 48 bytes apart, so K of them land on K different offsets within
# a 64-byte cache line and spread over most of a 4 KiB page.
PAD_STEP = 48
# --perturb fault-path: where build n spins FAULT_STEP * n times, at the top of every page fault.
FAULT_FILE = "mm/memory.c"
FAULT_ANCHOR = "\tcount_vm_event(PGFAULT);\n"
FAULT_STEP = 4
# --perturb cache-pause: the same spin with pauses at the top of every page-cache insertion
# (__filemap_add_folio, which charges the page to its memcg): the initramfs's pages at boot take it.
CACHE_FILE = "mm/filemap.c"
CACHE_ANCHOR = "\tVM_BUG_ON_FOLIO(folio_test_swapbacked(folio), folio);\n"
# The benchmarks --perturb fault-path measures: the others run the changed path themselves.
FAULT_PATH_BENCHMARKS = ("pagealloc",)
# The service's KPERF_ALPHA by default.
SERVICE_ALPHA = 0.05
# Tries per boot before the bench gives up (a boot the host starved past its limit is made again).
BOOT_ATTEMPTS = 3

Runs = dict[str, dict[str, list[list[float]]]]  # kernel -> metric -> boots of iterations


def _git(tree: Path, *args: str, env: Mapping[str, str] | None = None, stdin: str | None = None) -> str:
    run = subprocess.run(
        ["git", "-C", str(tree), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    )
    return run.stdout.strip()


def padding(n: int) -> str:
    """The unrelated change of perturbed build n: a function nothing calls, PAD_STEP * n bytes long."""
    return (
        f"\n/* kperf bench/build_noise.py: perturbation {n}, code no one runs. */\n"
        f"static void __used noinline kperf_perturb_{n}(void)\n"
        f'{{\n\tasm volatile(".skip {PAD_STEP * n}, 0");\n}}\n'
    )


def fault_spin(source: str, n: int, wait: str = "barrier", anchor: str = FAULT_ANCHOR) -> str:
    """mm/memory.c with build n's extra work: FAULT_STEP * n rounds of `wait` in a loop before
    handle_mm_fault's first counter update (or before another `anchor`). barrier() costs a few
    instructions a round; cpu_relax() is x86's pause, which under TCG also ends the vCPU's turn
    (the fixture memcg-charge-slower spins with it, as a waiting loop in a real patch would)."""
    if source.count(anchor) != 1:
        raise ValueError(f"the anchor {anchor!r} is not there exactly once")
    spin = (
        f"\t{{ /* kperf bench/build_noise.py: fault-path perturbation {n}. */\n"
        f"\t\tint kperf_i;\n\t\tfor (kperf_i = 0; kperf_i < {FAULT_STEP * n}; kperf_i++)\n"
        f"\t\t\t{wait}();\n\t}}\n"
    )
    return source.replace(FAULT_ANCHOR, spin + FAULT_ANCHOR)


def perturbed_branch(tree: Path, n: int, kind: str = "padding") -> str:
    """Make (once) branch perturb-NN (padding(n) at the end of PAD_FILE) or perturb-fault-NN
    (fault_spin(n) in FAULT_FILE) from base; its name."""
    name = {
        "padding": f"perturb-{n:02d}",
        "fault-path": f"perturb-fault-{n:02d}",
        "cache-pause": f"perturb-cache-{n:02d}",
    }.get(kind, f"perturb-pause-{n:02d}")
    path = {"padding": PAD_FILE, "cache-pause": CACHE_FILE}.get(kind, FAULT_FILE)
    base = _git(tree, "rev-parse", "refs/heads/base")
    try:
        existing = _git(tree, "rev-parse", f"refs/heads/{name}")
        if _git(tree, "rev-parse", f"{existing}^") == base:
            return name
    except subprocess.CalledProcessError:
        pass
    original = _git(tree, "cat-file", "blob", f"{base}:{path}")
    if kind == "padding":
        text = original + "\n" + padding(n)
    else:
        anchor = CACHE_ANCHOR if kind == "cache-pause" else FAULT_ANCHOR
        text = fault_spin(original + "\n", n, "barrier" if kind == "fault-path" else "cpu_relax", anchor)
    blob = _git(tree, "hash-object", "-w", "--stdin", stdin=text)
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git(tree, "read-tree", base, env=env)
        _git(tree, "update-index", "--cacheinfo", f"100644,{blob},{path}", env=env)
        new_tree = _git(tree, "write-tree", env=env)
    who = {
        "GIT_AUTHOR_NAME": "kperf bench",
        "GIT_AUTHOR_EMAIL": "bench@kperf.invalid",
        "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
        "GIT_COMMITTER_NAME": "kperf bench",
        "GIT_COMMITTER_EMAIL": "bench@kperf.invalid",
        "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    }
    commit = _git(tree, "commit-tree", new_tree, "-p", base, "-m", f"perturbation {n}", env=who)
    _git(tree, "update-ref", f"refs/heads/{name}", commit)
    return name


def boot_once(
    backend: QemuBackend, kernel: Path, bench: str, state: Path, cmdline: str = "", vcpus: int = 0
) -> dict[str, list[float]]:
    """One instruction-clock boot of `kernel` running `bench`'s quick grid: {metric: iteration values}
    (`vcpus` 0: the runner's default, one)."""
    b = get_benchmark(bench)
    params = resolve_params(bench, "quick")
    commands = b.command(params, backend.bindir)
    binaries = compile_all(b.sources(), backend.arch, state)
    for name in b.artifacts():
        binaries[name] = kernel.parent / name
    timeout = backend.timeout(b.expected_seconds(params), len(commands), CLOCK)
    job = BootJob(commands, binaries, cmdline=cmdline, timeout=timeout, clock=CLOCK, vcpus=vcpus)
    result = backend.boot(job, kernel)
    out: dict[str, list[float]] = {}
    for sample in b.parse(result.raw_output, params):
        out.setdefault(sample.metric, []).append(sample.value)
    return out


def first_boots(runs: Runs, n: int) -> Runs:
    """`runs` cut to each kernel's first n boots of every metric."""
    return {k: {m: boots[:n] for m, boots in metrics.items()} for k, metrics in runs.items()}


def _flagged(results: Iterable[Any]) -> int:
    return sum(r.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT) for r in results)


def compare_at(inputs: Mapping[str, MetricInput], threshold: float, first_look: bool = False) -> dict[str, Any]:
    """kperf's A/B test of one pair at practical threshold `threshold` (percent).

    first_look: as the service's first sequential look decides instead (the
    boots there are K a side of a budget of 2K, alpha spent O'Brien-Fleming:
    kperf.stats.sequential), which spends less than the whole alpha on it.
    """
    at = {m: replace(i, min_effect_pct=threshold) for m, i in inputs.items()}
    if not first_look:
        return compare_metrics(at)
    k = min(min(len(i.base), len(i.head)) for i in at.values())
    return sequential_look(at, 1, Plan(looks=(k, 2 * k), alpha=SERVICE_ALPHA)).results


def analyse(
    runs: Runs,
    directions: Mapping[str, bool],
    perturbed: Sequence[str],
    fixtures: Mapping[str, Sequence[str]] = {},
    thresholds: Sequence[float] = THRESHOLDS,
    service_prior: NoisePrior | None = None,
    min_effect_pct: float | None = None,
    boot_spread: bool = False,
) -> dict[str, Any]:
    """The figures from runs of "base", the perturbed kernels and any fixtures.

    directions: {metric: higher_is_better}. fixtures: {kernel: fnmatch patterns of the metrics it moves}.
    service_prior: the between-build part the service uses where it has learned none
    (kperf.stats.builds.measured_build_prior); given, a third way ("as the service") is reported.
    min_effect_pct: the practical threshold the fixtures' verdicts are given at (default: the clock's).
    boot_spread: the service's ways also take each metric's boot noise as the service does without
    history (kperf.stats.boot_spread), measured on the perturbed kernels other than the pair's head
    (the base and the fixtures left out), so that a pair is never judged with a spread its own
    boots made.
    """
    fixture_threshold = min_effect_for_clock(CLOCK) if min_effect_pct is None else min_effect_pct
    metrics = sorted(set.intersection(*(set(runs[k]) for k in ("base", *perturbed))))
    rows = []
    for metric in metrics:
        group = [runs[k][metric] for k in ("base", *perturbed)]
        noise = between_build_noise([group])
        diffs: list[float] = []
        for k in perturbed:
            one = compare_metrics({metric: MetricInput(runs["base"][metric], runs[k][metric], directions[metric])})
            change = one[metric].change_pct
            if change is not None:
                diffs.append(change)
        rows.append(
            {
                "metric": metric,
                "between_build_pct": noise.sd * (100.0 if noise.log_scale else 1.0),
                "boot_sd_pct": noise.boot_sd * (100.0 if noise.log_scale else 1.0),
                "largest_pct": max((abs(d) for d in diffs), default=0.0),
            }
        )

    def pair_inputs(head: str, held_out: Sequence[str], fixed: NoisePrior | None = None) -> dict[str, MetricInput]:
        """Base against `head`; the between-build part `fixed`, or from the perturbed builds in `held_out`."""
        inputs = {}
        spread = {}
        if boot_spread and fixed is not None:
            spread = spread_of_runs({k: runs[k] for k in perturbed if k != head})
        for metric in metrics:
            prior = fixed
            if held_out and fixed is None:
                est = between_build_noise([[runs["base"][metric], *(runs[k][metric] for k in held_out)]])
                # None when the builds spread no more than their boots explain.
                prior = est.prior()
            inputs[metric] = MetricInput(
                runs["base"][metric],
                runs[head][metric],
                directions[metric],
                min_effect_pct=fixture_threshold,
                noise=spread.get(metric),
                build_noise=prior,
            )
        return inputs

    ways: dict[str, dict[str, Any]] = {}
    service_ways = ["as the service", "the service's first look"] if service_prior else []
    for way in ("boots only", "with perturbed builds", *service_ways):
        flagged = {t: 0 for t in thresholds}
        # Pairs with at least one metric flagged: what a submitter of an
        # unrelated change sees, one comparison of the whole benchmark.
        pairs_flagged = {t: 0 for t in thresholds}
        covered = total = 0
        for k in perturbed:
            others = [o for o in perturbed if o != k] if way == "with perturbed builds" else []
            inputs = pair_inputs(k, others, service_prior if way in service_ways else None)
            for t in thresholds:
                n = _flagged(compare_at(inputs, t, first_look=way == "the service's first look").values())
                flagged[t] += n
                pairs_flagged[t] += n > 0
            for r in compare_metrics(inputs).values():
                if r.ci_low_pct is not None and r.ci_high_pct is not None:
                    total += 1
                    covered += r.ci_low_pct <= 0.0 <= r.ci_high_pct
        pairs = len(perturbed) * len(metrics)
        ways[way] = {
            "false_flag_share": {str(t): flagged[t] / pairs if pairs else 0.0 for t in thresholds},
            "pairs_flagged_share": {
                str(t): pairs_flagged[t] / len(perturbed) if perturbed else 0.0 for t in thresholds
            },
            "coverage": covered / total if total else 0.0,
        }

    power: dict[str, Any] = {}
    for fixture, moves in fixtures.items():
        if fixture not in runs:
            continue
        # As the service would judge it when a prior is given, else with the held-out builds' part.
        chosen = pair_inputs(fixture, [], service_prior) if service_prior else pair_inputs(fixture, perturbed)
        inputs = {m: i for m, i in chosen.items() if m in runs[fixture]}
        results = compare_metrics(inputs)
        expected = [m for m in results if any(fnmatch(m, p) for p in moves)]
        power[fixture] = {
            m: {"verdict": str(results[m].verdict), "change_pct": results[m].change_pct} for m in expected
        }
    return {"metrics": rows, "ways": ways, "power": power, "kernels": len(perturbed) + 1}


def figures(
    bench: str, runs: Runs, perturbed: Sequence[str], claims: Mapping[str, Sequence[str]], boots: int
) -> dict[str, Any]:
    """analyse() for one benchmark, as the service judges too; with `boots` (seeded runs) also for 2..boots-1 a side."""
    b = get_benchmark(bench)
    directions = {m.name: m.higher_is_better for m in b.metrics(resolve_params(bench, "quick"))}
    prior = measured_build_prior(bench)
    # The fixtures judged at the benchmark's own default, as the service judges them.
    threshold = min_effect_for_clock(CLOCK, bench)
    out = analyse(runs, directions, perturbed, claims, service_prior=prior, min_effect_pct=threshold, boot_spread=True)
    # What fewer boots a side would have given: the first n of each kernel's.
    out["by_boots"] = {
        str(n): analyse(
            first_boots(runs, n),
            directions,
            perturbed,
            claims,
            service_prior=prior,
            min_effect_pct=threshold,
            boot_spread=True,
        )
        for n in range(2, boots)
    }
    out["runs"] = runs
    return out


def thresholds_today(benches: Sequence[str]) -> str:
    """The practical thresholds the fixtures are judged at: each benchmark's default on the clock."""
    return ", ".join(f"{b} {min_effect_for_clock(CLOCK, b):g}%" for b in benches)


def reanalyse(record: Path, boots: int) -> dict[str, Any]:
    """The figures again from a record's runs, with today's analysis: no boot needed."""
    data = json.loads(record.read_text())
    out: dict[str, Any] = {}
    kind = "builds"
    for bench, result in data["results"].items():
        runs: Runs = result["runs"]
        perturbed = sorted(k for k in runs if k.startswith(("phase-", "perturb-")))
        if any(k.startswith("phase-") for k in perturbed):
            kind = "phases"
        fixtures = [k for k in runs if k != "base" and k not in perturbed]
        claims = {f: read_fixture(FIXTURES_DIR / f"{f}.patch").moves for f in fixtures}
        out[bench] = figures(bench, runs, perturbed, claims, boots)
    again = f"Analysed again {date.today().isoformat()}, practical thresholds {thresholds_today(list(out))}."
    header = f"{data['header']} {again}"
    return {"header": header, "kind": kind, "results": out}


def markdown(result: dict[str, Any], header: str) -> str:
    lines = [header, "", "| metric | between-build sd | boot sd | largest build vs base |", "|---|---|---|---|"]
    for r in result["metrics"]:
        lines.append(
            f"| {r['metric']} | {r['between_build_pct']:.3f}% | {r['boot_sd_pct']:.3f}% | {r['largest_pct']:.3f}% |"
        )
    lines += ["", "| interval | " + " | ".join(f"flagged at {t}%" for t in THRESHOLDS) + " | 95% CI covers 0 |"]
    lines.append("|---|" + "---|" * (len(THRESHOLDS) + 1))
    for way, w in result["ways"].items():
        cells = " | ".join(f"{100 * w['false_flag_share'][str(t)]:.1f}%" for t in THRESHOLDS)
        lines.append(f"| {way} | {cells} | {100 * w['coverage']:.1f}% |")
    for n, fewer in result.get("by_boots", {}).items():
        for way, w in fewer["ways"].items():
            cells = " | ".join(f"{100 * w['false_flag_share'][str(t)]:.1f}%" for t in THRESHOLDS)
            lines.append(f"| {way}, {n} boots a side | {cells} | {100 * w['coverage']:.1f}% |")
    lines += ["", "| pairs with any metric flagged | " + " | ".join(f"at {t}%" for t in THRESHOLDS) + " |"]
    lines.append("|---|" + "---|" * len(THRESHOLDS))
    for label, ways in [
        ("", result["ways"]),
        *((f", {n} boots a side", f["ways"]) for n, f in result.get("by_boots", {}).items()),
    ]:
        for way, w in ways.items():
            if "pairs_flagged_share" in w:
                cells = " | ".join(f"{100 * w['pairs_flagged_share'][str(t)]:.0f}%" for t in THRESHOLDS)
                lines.append(f"| {way}{label} | {cells} |")
    for fixture, found in result["power"].items():
        listing = ", ".join(f"{m} {v['verdict']} ({v['change_pct']:+.2f}%)" for m, v in found.items())
        lines.append(f"\n{fixture}, with the between-build part: {listing}")
    return "\n".join(lines) + "\n"


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "an unknown CPU"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=20, help="perturbed builds of the base (default 20)")
    parser.add_argument(
        "--boots", type=int, default=2, help="boots per kernel and benchmark (default 2: the A/B test needs two a side)"
    )
    parser.add_argument("--jobs", type=int, default=2, help="boots at once (default 2: the instruction clock allows)")
    parser.add_argument("--bench", action="append", choices=BENCHMARKS)
    parser.add_argument("--fixture", action="append", default=[], help="fixture branches to measure power on")
    parser.add_argument(
        "--phases",
        type=int,
        default=0,
        help="instead of perturbed builds: the base booted this many ways, settling 100, 101, ... ms "
        "before each command (kperf.settle_ms), so each command starts at another phase of the kernel's "
        "periodic work",
    )
    parser.add_argument(
        "--seeded",
        action="store_true",
        help="every boot with a phase seed of its own (kperf.phase_seed, as the runner gives each "
        "instruction-clock boot): the boots sample the phases, and the figures are given for 2, 3, ... "
        "boots a side",
    )
    parser.add_argument(
        "--phase-span-us", type=int, default=0, help="with --seeded: kperf.phase_span_us (default: init's own)"
    )
    parser.add_argument(
        "--perturb",
        choices=("padding", "fault-path", "fault-pause", "cache-pause"),
        default="padding",
        help="what the K builds change: code no one runs (padding), a few instructions more per page "
        "fault (fault-path), a few pauses more per page fault (fault-pause) or per page put in the page "
        "cache (cache-pause); all but padding measure the "
        "page allocator only",
    )
    parser.add_argument("--vcpus", type=int, default=1, help="vCPUs of every boot (default 1)")
    parser.add_argument("--arch", choices=("x86_64", "arm64"), default="x86_64", help="guest architecture")
    parser.add_argument(
        "--profile", choices=PROFILES, default=DEFAULT_PROFILE, help="configuration profile (docs/kernels.md)"
    )
    parser.add_argument("--reanalyse", type=Path, help="no boots: the figures again from this --json record's runs")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "kperf")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    if args.reanalyse:
        again = reanalyse(args.reanalyse, args.boots)
        text = "\n".join(markdown(r, f"### {b}\n\n{again['header']}") for b, r in again["results"].items())
        print(text)
        if args.json:
            args.json.write_text(json.dumps(again, indent=1))
        return 0
    benches = args.bench or list(BENCHMARKS if args.perturb == "padding" else FAULT_PATH_BENCHMARKS)
    if args.perturb != "padding" and (args.phases or set(benches) - set(FAULT_PATH_BENCHMARKS)):
        parser.error(
            f"--perturb {args.perturb} measures {', '.join(FAULT_PATH_BENCHMARKS)} only, and not with --phases"
        )
    tree = ensure_test_tree(args.cache)
    if args.phases:
        perturbed = [f"phase-{n:02d}" for n in range(1, args.phases + 1)]
        branches = ["base", *args.fixture]
    else:
        perturbed = [perturbed_branch(tree, n, args.perturb) for n in range(1, args.kernels + 1)]
        branches = ["base", *perturbed, *args.fixture]
    # What each name boots: a branch's build, with kperf init's settle (ms) on its command line.
    cmdlines = {name: f"kperf.settle_ms={100 + n}" for n, name in enumerate(perturbed, start=1) if args.phases}
    kernels: dict[str, Path] = {}
    started = time.monotonic()
    for name in branches:
        t0 = time.monotonic()
        result = build_fixture_kernel(tree, name, args.arch, args.cache, profile=args.profile)
        if not result.ok:
            print(f"{name} did not build: {result.error}", file=sys.stderr)
            return 1
        kernels[name] = Path(result.artifacts["kernel"])
        print(f"built {name}: {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    for name in cmdlines:
        kernels[name] = kernels["base"]
    built = time.monotonic()
    out: dict[str, Any] = {}
    for bench in benches:
        tasks = [(k, i) for i in range(args.boots) for k in kernels]
        runs: Runs = {}

        def one(task: tuple[str, int], bench: str = bench) -> tuple[str, dict[str, list[float]]]:
            kernel, i = task
            # One state directory per thread: compiled binaries and QEMU's files are not shared.
            state = args.cache / "build-noise" / f"{args.arch}-thread-{threading.get_ident()}"
            state.mkdir(parents=True, exist_ok=True)
            backend = QemuBackend(args.arch, state, accel="tcg")
            cmdline = cmdlines.get(kernel, "")
            if args.seeded:
                cmdline = f"{cmdline} kperf.phase_seed={random.getrandbits(32)}".strip()
                if args.phase_span_us:
                    cmdline += f" kperf.phase_span_us={args.phase_span_us}"
            for attempt in range(1, BOOT_ATTEMPTS + 1):
                try:
                    got = boot_once(backend, kernels[kernel], bench, state, cmdline, args.vcpus)
                    break
                except Exception as e:
                    # A long run on a shared host must not end with a boot the
                    # host starved past its time limit: that is the host's fault,
                    # and the boot is made again (same seed, same kernel).
                    print(f"{bench} {kernel} boot {i + 1} attempt {attempt} failed: {e}", file=sys.stderr, flush=True)
                    if attempt == BOOT_ATTEMPTS:
                        raise
            print(f"{bench} {kernel} boot {i + 1}", file=sys.stderr, flush=True)
            return kernel, got

        with ThreadPoolExecutor(args.jobs) as pool:
            for kernel, got in pool.map(one, tasks):
                for metric, values in got.items():
                    runs.setdefault(kernel, {}).setdefault(metric, []).append(values)
        claims = {f: read_fixture(FIXTURES_DIR / f"{f}.patch").moves for f in args.fixture}
        out[bench] = figures(bench, runs, perturbed, claims, args.boots if args.seeded else 0)
    header = (
        f"Measured {date.today().isoformat()} on {cpu_model()} ({platform.machine()}, "
        f"{len(os.sched_getaffinity(0))} cores), {args.arch} guest, the {args.profile} profile, "
        f"{args.vcpus} vCPU(s), instruction clock, quick grids, "
        + (
            f"the base at {args.phases} settle phases + base, "
            if args.phases
            else f"{args.kernels} perturbed builds ({args.perturb}) + base, "
        )
        + f"{args.boots} boot(s) each"
        + (", each boot at a seeded phase (kperf.phase_seed); " if args.seeded else "; ")
        + f"builds {built - started:.0f} s, boots {time.monotonic() - built:.0f} s. "
        f"Practical thresholds today: {thresholds_today(benches)}."
    )
    text = "\n".join(markdown(r, f"### {bench}\n\n{header}") for bench, r in out.items())
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        # "kind" tells the service's KPERF_BUILD_NOISE_RECORDS which records hold a between-build part.
        kind = "phases" if args.phases else "builds"
        shape = {"arch": args.arch, "profile": args.profile, "vcpus": args.vcpus, "perturb": args.perturb}
        args.json.write_text(json.dumps({"header": header, "kind": kind, **shape, "results": out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
