"""Preparing a patch series: git am in a sparse checkout of the files it touches, against a full checkout.

    KPERF_DEBUG=1 DATABASE_URL=postgres://... KPERF_BUILD_ROOT=/tmp/series-bench \\
        .venv/bin/python bench/series_apply.py --mirror ~/.cache/kperf/linux-test.git \\
        --base base --head fork-slow [--runs 3]

The series is `git format-patch base..head` of the mirror; each run applies it
in a fresh scratch repository (kperf.core.builds.apply_series.am), first with
the sparse checkout kperf uses, then with every file checked out, and prints
the seconds of each and whether both made the same commit. The refs it writes
(refs/kperf/bench/*) are deleted at the end. docs/performance.md has the
figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kperf.settings")
import django

django.setup()

from kperf.core.builds import apply_series, gitops, patch_series  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mirror", type=Path, required=True)
    p.add_argument("--base", required=True)
    p.add_argument("--head", required=True)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    mirror = args.mirror.expanduser()
    mbox = subprocess.run(
        ["git", "-C", str(mirror), "format-patch", "--stdout", f"{args.base}..{args.head}"],
        capture_output=True,
        check=True,
    ).stdout
    parsed = patch_series.parse(mbox, max_bytes=len(mbox))
    base = gitops.run_git(["-C", str(mirror), "rev-parse", f"refs/heads/{args.base}"], timeout=60).strip()
    print(f"{len(parsed.patches)} patches touching {apply_series.touched_paths(parsed)}")
    sparse_paths = apply_series.touched_paths
    times: dict[str, list[float]] = {"sparse": [], "full": []}
    shas: set[str] = set()
    try:
        for run in range(args.runs):
            for mode in ("sparse", "full"):
                apply_series.touched_paths = sparse_paths if mode == "sparse" else (lambda parsed: None)
                start = time.monotonic()
                shas.add(apply_series.am(mirror, base, args.base, parsed, f"refs/kperf/bench/{mode}-{run}"))
                times[mode].append(time.monotonic() - start)
    finally:
        refs = gitops.run_git(
            ["-C", str(mirror), "for-each-ref", "--format=%(refname)", "refs/kperf/bench/"], timeout=60
        )
        for ref in refs.split():
            gitops.run_git(["-C", str(mirror), "update-ref", "-d", ref], timeout=60)
    for mode, values in times.items():
        print(f"{mode:6}  median {statistics.median(values):6.1f} s  runs {', '.join(f'{v:.1f}' for v in values)}")
    print("same commit in every run and mode" if len(shas) == 1 else f"DIFFERENT commits: {sorted(shas)}")
    return 0 if len(shas) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
