"""Clean versus incremental kernel builds: what a head costs after its base.

On the test kernel tree (kperf_testing.kbuild.ensure_test_tree, Debian's
linux-source-6.1) with kperf's x86_64 fragment, in a work_root of its own:

1. base, clean: an empty object tree and an empty ccache of its own, what a
   commit costs from nothing;
2. a fixture branch (default pagealloc-slow: one line in mm/page_alloc.c),
   incremental in base's warm tree, what a submission's head costs;
3. base again, incremental from the branch: a bisection step back;
4. the branch clean in a new work_root with the now warm ccache: what every
   head cost before warm trees (a fresh checkout and object tree per build).

Prints one row per build: files compiled, seconds, and the share of the
clean build. The goal is an incremental head at most 12% of a clean build.

Usage (about 8 minutes on 2 cores; needs ~4 GB under the work directory):

    .venv/bin/python bench/builds.py [--branch pagealloc-slow] [--work DIR] [--markdown out.md]

Results and the machine they ran on go in docs/operations.md,
"Incremental builds".
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from kperf_kbuild.driver import BuildRequest, BuildResult, build_kernel
from kperf_testing.kbuild import ensure_test_tree

GOAL = 0.12


@dataclass
class Row:
    name: str
    mode: str
    result: BuildResult
    seconds: float


def cache_dir() -> Path:
    return Path(os.environ.get("KPERF_CACHE", Path.home() / ".cache" / "kperf"))


def rev(tree: Path, branch: str) -> str:
    return subprocess.run(
        ["git", "-C", str(tree), "rev-parse", f"refs/heads/{branch}"], check=True, capture_output=True, text=True
    ).stdout.strip()


def build(tree: Path, sha: str, work_root: Path, out: Path, ccache: Path) -> tuple[BuildResult, float]:
    started = time.monotonic()
    result = build_kernel(
        BuildRequest(repo=tree, sha=sha, arch="x86_64", work_root=work_root, output_dir=out, ccache_dir=ccache),
        progress=lambda phase, message: print(f"  {phase}: {message}"[:150], file=sys.stderr, flush=True),
    )
    seconds = time.monotonic() - started
    if not result.ok:
        raise SystemExit(f"{sha[:12]} did not build: {result.error}\n{result.log_tail}")
    return result, seconds


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0]
    return f"{os.cpu_count()} cores ({model or platform.machine()}), load average {load:.1f} at the end"


def table(rows: list[Row]) -> str:
    clean = rows[0].seconds
    lines = [
        "| build | how | files compiled | seconds | of the clean build |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.name} | {row.mode} | {row.result.compiled} | {row.seconds:.1f} | {row.seconds / clean:.0%} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--branch", default="pagealloc-slow", help="fixture branch with a small mm/ change")
    parser.add_argument("--work", type=Path, help="work directory (default: a temporary one in KPERF_CACHE)")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    args = parser.parse_args()

    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    tree = ensure_test_tree(cache)
    base, head = rev(tree, "base"), rev(tree, args.branch)
    work = Path(tempfile.mkdtemp(prefix="bench-builds-", dir=args.work or cache))
    try:
        ccache = work / "ccache"  # empty: the first build is a clean one in every sense
        rows: list[Row] = []
        result, seconds = build(tree, base, work / "warm", work / "out-1", ccache)
        rows.append(Row("base", "clean, empty ccache", result, seconds))
        result, seconds = build(tree, head, work / "warm", work / "out-2", ccache)
        assert result.reused_sha == base, result.reused_sha
        rows.append(Row(args.branch, "incremental from base", result, seconds))
        result, seconds = build(tree, base, work / "warm", work / "out-3", ccache)
        assert result.reused_sha == head, result.reused_sha
        rows.append(Row("base", f"incremental from {args.branch}", result, seconds))
        result, seconds = build(tree, head, work / "fresh", work / "out-4", ccache)
        assert result.reused_sha == "", result.reused_sha
        rows.append(Row(args.branch, "fresh tree, warm ccache (before warm trees)", result, seconds))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    out = table(rows)
    ratio = rows[1].seconds / rows[0].seconds
    verdict = "meets" if ratio <= GOAL else "misses"
    summary = (
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}, {machine()}\n\n{out}\n\n"
        f"incremental head / clean build: {ratio:.1%} ({verdict} the {GOAL:.0%} goal)"
    )
    print(summary)
    if args.markdown:
        args.markdown.write_text(summary + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
