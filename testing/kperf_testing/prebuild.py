"""The fixture kernels a test run needs, built ahead of the tests that boot them.

`make test` runs the service tests first (pytest-django orders them so) and
they keep about half of one core busy for their first ten minutes or so; the
kernel tests come after them and build their kernels one after another. Run
from the start of the session in a process of its own (conftest.py), this
builds the same kernels, with the same keys and locks as
``kperf_testing.kbuild.build_fixture_kernel``, into the idle cores: a test
that needs one finds it built, or waits on its lock while it finishes.

In a run in one process the builds run below the tests' priority
(KPERF_BUILD_NICE=10, conftest.py), so the service tests beside them keep
their pace and only the idle core goes to the builds. In a run in two
workers the kernel tests start at once and wait for these kernels: there
they build at the tests' own priority.

    python -m kperf_testing.prebuild CACHE_DIR
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from pathlib import Path

from kperf_kbuild.driver import BuildInfraError
from kperf_testing.kbuild import build_fixture_kernel, ensure_test_tree

# (branch, arch, profile), in the order the tests need them: the x86_64 base
# first (nearly every kernel test boots it, and the others build
# incrementally from its warm tree), then the other cold configurations, then
# the fixture branches the kernel-build tests read from the cache.
# broken-build is left out: a failed build is not cached, so its test builds it anyway.
KERNELS: tuple[tuple[str, str, str], ...] = (
    ("base", "x86_64", "tiny"),
    ("base", "arm64", "tiny"),
    ("base", "x86_64", "mm"),
    ("memcg-charge-slower", "x86_64", "mm"),
    ("pagealloc-slow", "x86_64", "tiny"),
    ("pagefault-slow", "x86_64", "tiny"),
    ("memcg-charge-slower", "x86_64", "tiny"),
    ("ipi-resched-slower", "x86_64", "tiny"),
)


def prebuild(cache: Path) -> int:
    """Build every kernel of KERNELS not yet in the cache; 1 if any failed (the tests say why)."""
    tree = ensure_test_tree(cache)
    failed = 0
    for branch, arch, profile in KERNELS:
        t0 = time.monotonic()
        try:
            result = build_fixture_kernel(tree, branch, arch, cache, profile=profile)
        except (BuildInfraError, ValueError, OSError) as error:
            print(f"{branch} {arch} {profile}: not built ({error})", flush=True)
            failed += 1
            continue
        state = "ready" if result.ok else f"failed: {result.error[:200]}"
        print(f"{branch} {arch} {profile}: {state} after {time.monotonic() - t0:.0f} s", flush=True)
        failed += 0 if result.ok else 1
    return 1 if failed else 0


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
    return prebuild(Path(argv[0]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
