"""How much of a comparison kperf decided: per submission and benchmark, its metrics' verdicts.

The goal of issue 41 on the realistic shape (`mm`, two vCPUs, all four benchmarks): for a change
that should move nothing, at least 95% of all metrics `no-change` within the boot budget and none
flagged. Reads submissions as the API gives them (GET /api/v1/submissions/N): the file the
realistic tier writes (tests/test_e2e_realistic.py prints its path), or a list or mapping of such
documents saved from a lab.

    .venv/bin/python bench/decided.py SUBMISSIONS.json [--json out.json]

Results and the machine go in docs/benchmarks.md, "The page allocator on one vCPU and on two".
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

GOAL = 0.95


def verdicts(submission: dict[str, Any]) -> dict[str, Counter[str]]:
    """{benchmark: Counter of its metrics' verdicts} over the submission's comparisons."""
    out: dict[str, Counter[str]] = {}
    for c in submission.get("comparisons", []):
        out.setdefault(c["benchmark"], Counter()).update(m["verdict"] for m in c["metrics"])
    return out


def summary(name: str, submission: dict[str, Any]) -> dict[str, Any]:
    per = verdicts(submission)
    total: Counter[str] = sum(per.values(), Counter())
    metrics = sum(total.values())
    return {
        "submission": name,
        "id": submission.get("id"),
        "branch": submission.get("branch"),
        "per_benchmark": {b: dict(sorted(c.items())) for b, c in sorted(per.items())},
        "metrics": metrics,
        "no_change": total["no-change"],
        "decided_no_change": round(total["no-change"] / metrics, 4) if metrics else 0.0,
        "flagged": total["regression"] + total["improvement"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("submissions", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    data = json.loads(args.submissions.read_text())
    named = data.items() if isinstance(data, dict) else ((str(d.get("id")), d) for d in data)
    rows = [summary(name, d) for name, d in named]
    for r in rows:
        per = "; ".join(f"{b} {' '.join(f'{v} {n}' for v, n in c.items())}" for b, c in r["per_benchmark"].items())
        mark = "meets" if r["decided_no_change"] >= GOAL and not r["flagged"] else "misses"
        print(
            f"{r['submission']}: {r['no_change']}/{r['metrics']} no-change "
            f"({100 * r['decided_no_change']:.1f}%), {r['flagged']} flagged; {mark} the goal for a change "
            f"that moves nothing\n  {per}"
        )
    if args.json:
        args.json.write_text(json.dumps({"goal": GOAL, "submissions": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
