"""`kperf import-mmtests` and `kperf compare-kernels` (wired into kperf.cli.main)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from kperf.cli.client import CliError, client_from_config
from kperf.mmtests import KPERF_RUN_FILE, ImportedBenchmark, ImportedRun, MmtestsImportError, read_run


def cmd_import_mmtests(args: argparse.Namespace) -> int:
    try:
        run = read_run(Path(args.dir), pft_mode=args.pft_mode)
    except MmtestsImportError as e:
        raise CliError(str(e)) from None
    sha, mclass = import_target(run, args.kernel_sha, args.machine_class)
    body: dict[str, Any] = {
        "kernel_sha": sha,
        "machine_class": mclass,
        "run_name": run.run_name,
        "environment": {"kernel_version": run.kernel_version, "mmtests_run": run.run_name},
        "benchmarks": {
            name: {
                "samples": [{"boot": n, "metric": m, "iteration": i, "value": v} for n, m, i, v in b.readings],
                "raw_output": f"imported from {', '.join(b.files)}",
            }
            for name, b in run.benchmarks.items()
        },
    }
    if run.kperf is not None:
        # How kperf measured it: the server keeps it and judges the run by it.
        k = run.kperf
        body |= {"clock": k.clock, "arch": k.arch, "profile": k.profile, "vcpus": k.vcpus, "numa_nodes": k.numa_nodes}
        how = f"{k.clock} clock, {k.profile} profile, {k.vcpus} vCPUs, {k.numa_nodes} NUMA nodes"
    else:
        how = "wall clock: a plain mmtests run"
    result = client_from_config().call("POST", "/imports/mmtests", body)
    names = ", ".join(f"{n} ({len(b.readings)} samples{_boots(b)})" for n, b in sorted(run.benchmarks.items()))
    print(
        f"imported {run.run_name} ({run.kernel_version or 'kernel version unknown'}) as {sha[:12]} "
        f"on {mclass} ({how}): {names}; jobs {', '.join(map(str, result['jobs']))}"
    )
    for why in run.left_out:
        print(f"left out: {why}")
    return 0


def _boots(b: ImportedBenchmark) -> str:
    boots = len({n for n, _, _, _ in b.readings})
    return f" in {boots} boots" if boots > 1 else ""


def import_target(run: ImportedRun, kernel_sha: str | None, machine_class: str | None) -> tuple[str, str]:
    """The kernel and machine class to import a run as: the options', else its kperf-run.json's.

    The kernel must be the one the file says was measured. The machine class
    may be another (another lab's name for a class of the same shape; the
    server checks the shape)."""
    file = run.kperf
    if file is None:
        if not kernel_sha or not machine_class:
            raise CliError(
                f"{run.run_name} is a plain mmtests run (no {KPERF_RUN_FILE}): "
                "give the kernel it measured and its machine class, --kernel-sha and --machine-class"
            )
        return kernel_sha, machine_class
    if kernel_sha and kernel_sha != file.kernel_sha:
        raise CliError(
            f"{run.run_name}'s {KPERF_RUN_FILE} says it measured kernel {file.kernel_sha}, not {kernel_sha}: "
            "leave --kernel-sha out to import it as the kernel it measured"
        )
    return file.kernel_sha, machine_class or file.machine_class


def cmd_compare_kernels(args: argparse.Namespace) -> int:
    query = urlencode(
        {"machine_class": args.machine_class, "benchmark": args.bench, "base": args.base, "head": args.head}
    )
    result = client_from_config().call("GET", f"/compare?{query}")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print("\n".join(render_kernel_comparison(result)))
    return 0


def render_kernel_comparison(c: dict[str, Any]) -> list[str]:
    """compare-mmtests.pl's summary rows of every metric, kperf's verdict beside each mean row,
    then what each verdict rests on."""
    from kperf.stats.summary import TABLE_WIDTH, SummaryRow, render_rows, verdict_lines

    base, head = c["base_sha"][:12], c["head_sha"][:12]
    clock = f", {c['clock']} clock" if c.get("clock") else ""
    shape = f", {c['profile']} profile, {c['vcpus']} vCPUs, {c['numa_nodes']} NUMA nodes" if c.get("profile") else ""
    lines = [
        f"{c['benchmark']} on {c['machine_class']}{clock}{shape}: {head} vs {base} ({c['method']}, alpha {c['alpha']})"
    ]
    metrics = [(m["metric"], [SummaryRow(**row) for row in m.get("summary", [])], m["verdict"]) for m in c["metrics"]]
    # As wide as the names and verdicts need (label, two values with their
    # changes, then "  <verdict>"): a terminal, not a cover letter.
    names = max((len(name) for name, _, _ in metrics), default=0)
    verdicts = max((len(verdict) for _, _, verdict in metrics), default=0)
    lines += render_rows(metrics, base, head, width=max(TABLE_WIDTH, 10 + names + 2 * 23 + 1 + 2 + verdicts))
    lines.append("")
    for m in c["metrics"]:
        lines += verdict_lines(m["metric"], m)
    for side in ("base", "head"):
        if c.get(f"only_in_{side}"):
            lines.append(f"only in {side}: {', '.join(c[f'only_in_{side}'])}")
    return lines


def cmd_export_mmtests(args: argparse.Namespace) -> int:
    query = {"side": args.side, "benchmark": args.bench}
    query |= {k: v for k, v in (("clock", args.clock), ("machine_class", args.machine_class), ("grid", args.grid)) if v}
    d = client_from_config().call("GET", f"/submissions/{args.submission}/mmtests?{urlencode(query)}")
    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        raise CliError(f"{out} is not empty: give a new directory")
    for rel, text in d["files"].items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    print(f"{d['boots']} boot(s) of {args.bench} ({args.side}) as mmtests run(s) {', '.join(d['runs'])} in {out}")
    print(f"how they were measured (clock, profile, vCPUs, kernel): each run's {KPERF_RUN_FILE}")
    for why in d["skipped"]:
        print(f"left out: {why}")
    print(f"mmtests reads them with: extract-mmtests.pl -d {out} -b <benchmark> -n <run>")
    return 0


def add_parsers(sub: Any) -> None:
    imp = sub.add_parser("import-mmtests", help="import an mmtests result directory (work/log/<run>)")
    imp.add_argument("dir", help="the run directory mmtests wrote, e.g. work/log/base-run")
    imp.add_argument(
        "--kernel-sha", help=f"full sha of the kernel the run measured (a run kperf exported: its {KPERF_RUN_FILE}'s)"
    )
    imp.add_argument(
        "--machine-class",
        help=f"the machine class the run's machine belongs to (a run kperf exported: its {KPERF_RUN_FILE}'s)",
    )
    imp.add_argument("--pft-mode", choices=["threads", "processes"], help="when the run's commands.log does not say")
    imp.set_defaults(func=cmd_import_mmtests)

    cmp_ = sub.add_parser("compare-kernels", help="compare every result of two kernels on a machine class")
    cmp_.add_argument("--base", required=True, help="base kernel sha")
    cmp_.add_argument("--head", required=True, help="head kernel sha")
    cmp_.add_argument("--machine-class", required=True)
    cmp_.add_argument("--bench", required=True)
    cmp_.add_argument("--json", action="store_true")
    cmp_.set_defaults(func=cmd_compare_kernels)

    exp = sub.add_parser("export-mmtests", help="write one side of a submission as mmtests result directories")
    exp.add_argument("submission", type=int)
    exp.add_argument("--side", choices=["base", "head"], required=True)
    exp.add_argument("--bench", required=True)
    exp.add_argument("--out", required=True, help="a new directory (work/log in mmtests' terms)")
    exp.add_argument("--clock", help="only boots timed with this clock (instructions, wall)")
    exp.add_argument("--machine-class", help="only boots of this machine class")
    exp.add_argument("--grid", help="only boots of this grid (needed when the submission ran the benchmark on several)")
    exp.set_defaults(func=cmd_export_mmtests)
