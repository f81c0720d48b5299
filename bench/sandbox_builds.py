"""What the build sandbox costs: incremental builds with and without it.

On the test kernel tree (kperf_testing.kbuild.ensure_test_tree, Debian's
linux-source-6.1) with kperf's x86_64 fragment, in a work_root of its own:
after one warm-up build of base, the bench alternates base and a fixture
branch (default pagealloc-slow: one line in mm/page_alloc.c), each an
incremental build in the same warm tree, ``--rounds`` times with the bwrap
sandbox and as many times without it, interleaved so that the machine's
load falls on both alike. Prints every build and the median of each mode;
the goal is the sandboxed incremental build within 10% of the plain one.

Usage (about 10 minutes on 2 cores with a warm ccache):

    .venv/bin/python bench/sandbox_builds.py [--rounds 3] [--branch pagealloc-slow] [--markdown out.md]

Results and the machine they ran on go in docs/security.md, "What the
sandbox costs".
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

# The same test tree and cache as bench/builds.py (run as a script, bench/ is on sys.path).
from builds import cache_dir, rev

from kperf_kbuild.driver import BuildRequest, build_kernel
from kperf_kbuild.sandbox import Sandbox
from kperf_testing.kbuild import ensure_test_tree

GOAL = 1.10


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--branch", default="pagealloc-slow")
    p.add_argument("--work", type=Path, default=cache_dir() / "bench-sandbox")
    p.add_argument("--markdown", type=Path)
    args = p.parse_args()

    tree = ensure_test_tree(cache_dir())
    base, head = rev(tree, "base"), rev(tree, args.branch)
    modes = {"bwrap": Sandbox.from_environ({"KPERF_BUILD_SANDBOX": "bwrap"}), "off": Sandbox(mode="off")}

    def build(sha: str, mode: str) -> tuple[float, int]:
        req = BuildRequest(
            repo=tree,
            sha=sha,
            arch="x86_64",
            work_root=args.work,
            output_dir=args.work / "out",
            ccache_dir=cache_dir() / "ccache",
            sandbox=modes[mode],
        )
        started = time.monotonic()
        result = build_kernel(req)
        seconds = time.monotonic() - started
        if not result.ok:
            raise SystemExit(f"{sha[:12]} did not build ({mode}): {result.error}")
        return seconds, result.compiled

    print("warm-up: base", flush=True)
    build(base, "bwrap")
    rows: list[tuple[str, str, float, int]] = []
    for n in range(args.rounds):
        for mode in ("bwrap", "off") if n % 2 == 0 else ("off", "bwrap"):
            for name, sha in ((args.branch, head), ("base", base)):
                seconds, compiled = build(sha, mode)
                rows.append((mode, name, seconds, compiled))
                print(f"round {n + 1} {mode:5} {name:16} {compiled:4} files {seconds:7.1f} s", flush=True)

    medians = {mode: statistics.median(s for m, _, s, _ in rows if m == mode) for mode in modes}
    ratio = medians["bwrap"] / medians["off"]
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
        f"{time.strftime('%Y-%m-%d')}",
        "",
        "| mode | incremental builds | median | files compiled (median) |",
        "|---|---|---|---|",
    ]
    for mode in modes:
        mine = [r for r in rows if r[0] == mode]
        lines.append(f"| {mode} | {len(mine)} | {medians[mode]:.1f} s | {statistics.median(r[3] for r in mine):.0f} |")
    lines += ["", f"sandboxed / plain: {ratio:.3f} (goal <= {GOAL:.2f})"]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0 if ratio <= GOAL else 1


if __name__ == "__main__":
    raise SystemExit(main())
