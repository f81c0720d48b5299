"""The fixture kernels a test run needs, built ahead of the tests that boot them.

`make test` runs the service tests first (pytest-django orders them so) and
they keep about half of one core busy for their first ten minutes or so; the
kernel tests come after them and build their kernels one after another. Run
from the start of the session in a process of its own (conftest.py), this
builds the same kernels, with the same keys and locks as
``kperf_testing.kbuild.build_fixture_kernel``, into the idle cores: a test
that needs one finds it built, or waits on its lock while it finishes.

In a run in one process the builds run below the tests' priority
(KPERF_BUILD_NICE=10, conftest.py). On a VM a busy second core still slows
the first (measured: docs/quickstart.md, "Tests"). In a run in two
workers the kernel tests start at once and wait for these kernels: there
they build at the tests' own priority.

    python -m kperf_testing.prebuild CACHE_DIR
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from pathlib import Path

from kperf_kbuild.driver import BuildInfraError, BuildResult
from kperf_testing.kbuild import build_fixture_kernel, ensure_test_tree
from kperf_testing.xdist_schedule import BASE_READY, STATE_ENV

# (branch, arch, profile), in the order the tests need them: the x86_64 base
# first (nearly every kernel test boots it), then the fixture branches built
# incrementally from its warm tree, then the other cold configurations with
# theirs. Each configuration's kernels come together, so that a test stack
# that waits for them (`prebuilt`) never builds in a warm tree the prebuild
# still holds: it would make a new tree beside it and build everything again
# there (kperf_kbuild.trees), 159 s for the `mm` base on 2026-12-01's VM
# where a build in the prebuild's tree took 31 s. The kernel-build tests read the
# fixture branches from the cache; the end-to-end stacks find them built in
# their warm trees (kperf_testing.kbuild).
# broken-build is left out: a failed build is not cached, so its test builds it anyway.
KERNELS: tuple[tuple[str, str, str], ...] = (
    ("base", "x86_64", "tiny"),
    ("pagealloc-slow", "x86_64", "tiny"),
    ("pagefault-slow", "x86_64", "tiny"),
    ("memcg-charge-slower", "x86_64", "tiny"),
    ("ipi-resched-slower", "x86_64", "tiny"),
    ("base", "arm64", "tiny"),
    ("base", "x86_64", "mm"),
    ("memcg-charge-slower", "x86_64", "mm"),
)


def prebuilt(tree: Path, cache: Path, arch: str, profile: str = "tiny") -> list[BuildResult]:
    """Every kernel of KERNELS for `arch` and `profile`: found built, waited
    for on its lock while the prebuild makes it, or built here. A test stack
    takes these before its service builds in the same warm trees."""
    return [build_fixture_kernel(tree, b, a, cache, profile=p) for b, a, p in KERNELS if (a, p) == (arch, profile)]


def prebuild(cache: Path, ready: Path | None = None) -> int:
    """Build every kernel of KERNELS not yet in the cache; 1 if any failed
    (the tests say why). Touch `ready` once the first is done or given up:
    a two-worker run holds its kernel tests back until then
    (kperf_testing.xdist_schedule)."""
    failed = 0
    try:
        tree = ensure_test_tree(cache)
        first, *rest = KERNELS
        failed += _build(tree, cache, *first)
        if ready is not None:
            ready.touch()
        for branch, arch, profile in rest:
            failed += _build(tree, cache, branch, arch, profile)
    finally:
        if ready is not None:
            ready.touch()
    return 1 if failed else 0


def _build(tree: Path, cache: Path, branch: str, arch: str, profile: str) -> int:
    t0 = time.monotonic()
    try:
        result = build_fixture_kernel(tree, branch, arch, cache, profile=profile)
    except (BuildInfraError, ValueError, OSError) as error:
        print(f"{branch} {arch} {profile}: not built ({error})", flush=True)
        return 1
    state = "ready" if result.ok else f"failed: {result.error[:200]}"
    print(f"{branch} {arch} {profile}: {state} after {time.monotonic() - t0:.0f} s", flush=True)
    return 0 if result.ok else 1


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m kperf_testing.prebuild CACHE_DIR", file=sys.stderr)
        return 2

    def stop(signum: int, _frame: object) -> None:
        # SystemExit unwinds through the build, which kills its sandbox
        # (kperf_kbuild.sandbox) and leaves no manifest for a half kernel.
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    state = os.environ.get(STATE_ENV)
    return prebuild(Path(argv[0]), Path(state) / BASE_READY if state else None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
