"""`kperf import-mmtests` and `kperf compare-kernels` (wired into kperf.cli.main)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from kperf.cli.client import CliError, client_from_config
from kperf.mmtests import MmtestsImportError, read_run


def cmd_import_mmtests(args: argparse.Namespace) -> int:
    try:
        run = read_run(Path(args.dir), pft_mode=args.pft_mode)
    except MmtestsImportError as e:
        raise CliError(str(e)) from None
    body: dict[str, Any] = {
        "kernel_sha": args.kernel_sha,
        "machine_class": args.machine_class,
        "run_name": run.run_name,
        "environment": {"kernel_version": run.kernel_version, "mmtests_run": run.run_name},
        "benchmarks": {
            name: {
                "samples": [{"metric": m, "iteration": i, "value": v} for m, i, v in b.samples],
                "raw_output": f"imported from {', '.join(b.files)}",
            }
            for name, b in run.benchmarks.items()
        },
    }
    result = client_from_config().call("POST", "/imports/mmtests", body)
    names = ", ".join(f"{n} ({len(b.samples)} samples)" for n, b in sorted(run.benchmarks.items()))
    print(
        f"imported {run.run_name} ({run.kernel_version or 'kernel version unknown'}) as {args.kernel_sha[:12]} "
        f"on {args.machine_class}: {names}; jobs {', '.join(map(str, result['jobs']))}"
    )
    for why in run.left_out:
        print(f"left out: {why}")
    return 0


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
    lines = [f"{c['benchmark']} on {c['machine_class']}{clock}: {head} vs {base} ({c['method']}, alpha {c['alpha']})"]
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
    d = client_from_config().call("GET", f"/submissions/{args.submission}/mmtests?{urlencode(query)}")
    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        raise CliError(f"{out} is not empty: give a new directory")
    for rel, text in d["files"].items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    print(f"{d['boots']} boot(s) of {args.bench} ({args.side}) as mmtests run(s) {', '.join(d['runs'])} in {out}")
    for why in d["skipped"]:
        print(f"left out: {why}")
    print(f"mmtests reads them with: extract-mmtests.pl -d {out} -b <benchmark> -n <run>")
    return 0


def add_parsers(sub: Any) -> None:
    imp = sub.add_parser("import-mmtests", help="import an mmtests result directory (work/log/<run>)")
    imp.add_argument("dir", help="the run directory mmtests wrote, e.g. work/log/base-run")
    imp.add_argument("--kernel-sha", required=True, help="full sha of the kernel the run measured")
    imp.add_argument("--machine-class", required=True, help="the machine class the run's machine belongs to")
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
    exp.set_defaults(func=cmd_export_mmtests)
