"""Fixtures shared by every test folder: the kernel test tree and fixture kernels.

Kernels are expensive (minutes each on two cores), so each fixture kernel is
built once per run, shared by every test that needs it, and its tree, git
repository and ccache live in KPERF_CACHE (default ~/.cache/kperf) so later
runs reuse them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent


def cache_dir() -> Path:
    path = Path(os.environ.get("KPERF_CACHE", Path.home() / ".cache" / "kperf"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def kperf_cache() -> Path:
    return cache_dir()


@pytest.fixture(scope="session")
def kernel_tree(kperf_cache: Path) -> Path:
    """A git repository made from Debian's linux-source-6.1: branch `base`
    plus one branch per fixture patch in kernel-builds/fixtures/."""
    from kperf_testing.kbuild import ensure_test_tree

    return ensure_test_tree(kperf_cache)


@pytest.fixture(scope="session")
def x86_64_kernel(kernel_tree: Path, kperf_cache: Path):  # type: ignore[no-untyped-def]
    """The base branch built for x86_64 with kperf's config fragment (once per run)."""
    from kperf_testing.kbuild import build_fixture_kernel

    return build_fixture_kernel(kernel_tree, "base", "x86_64", kperf_cache)


# `make test` runs in two pytest-xdist workers (TEST_WORKERS, Makefile). A
# module is one unit of work, run whole by one worker: module fixtures (the
# end-to-end stack, a browser, a live server) are made once, and a module's
# tests keep their order. Units go out longest first, so the two workers end
# together (longest-processing-time-first scheduling): the long units are the
# kernel tests', whose seconds on a 2-core VM are below; any other module
# counts a second a test. Kernel tests may run beside one another: the
# fixture kernels, the test tree and the Debian image are made under file
# locks and found made by whoever comes second, and what the tests measure
# either runs on the instruction clock, which is the same under any load, or
# asserts nothing a busy host could move (docs/development.md, "Two workers").
#
# Measured on 2026-11-29, a clean clone through `.ci/run`, empty cache, one
# process, on a VM slower than the one docs/quickstart.md measured before.
UNIT_SECONDS = {
    "tests/test_kexec_runner.py": 720,
    "service/tests/test_remote_build_worker.py": 650,
    "tests/test_e2e.py": 1500,
    "tests/test_e2e_arm64.py": 300,
    "tests/test_e2e_smp.py": 300,
    "tests/test_make_up.py": 120,
    "kernel-builds/tests/test_kbuild_kernel.py": 700,
    "kernel-builds/tests/test_profile_kernels.py": 500,
    "kernel-builds/tests/test_smp_kernels.py": 200,
    "runners/tests/test_qemu_smp.py": 300,
    "runners/tests/test_qemu_backend.py": 120,
    "runners/tests/test_mm_benchmarks_qemu.py": 60,
    "runners/tests/test_pagealloc_benchmark.py": 60,
    "service/tests/test_learned_drift.py": 90,
    "service/tests/test_api_schema.py": 80,
    "service/tests/test_recovery.py": 60,
}


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


# Optional: `make test TEST_WORKERS=0` runs with -p no:xdist, where the hook is unknown.
@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's scope scheduler with a module a unit, longest first."""
    from xdist.scheduler import LoadScopeScheduling

    class LongestFirst(LoadScopeScheduling):  # type: ignore[misc]
        collection: list[str] | None
        workqueue: dict[str, dict[str, bool]]

        def _split_scope(self, nodeid: str) -> str:
            return _module(nodeid)

        def schedule(self) -> None:
            if self.collection is not None or not self._check_nodes_have_same_collection():
                super().schedule()  # later calls, or xdist's own abort on differing collections
                return
            # The first call: xdist's own orders the units by their number
            # of tests; these go by their expected seconds instead.
            collection = list(next(iter(self.registered_collections.values())))
            self.collection = collection
            units: dict[str, dict[str, bool]] = {}
            for nodeid in collection:
                units.setdefault(_module(nodeid), {})[nodeid] = False
            for scope, unit in sorted(units.items(), key=lambda item: -_seconds(item[0], len(item[1]))):
                self.workqueue[scope] = unit
            for node in self.nodes:
                if self.workqueue:
                    self._assign_work_unit(node)
            for node in self.nodes:
                self._reschedule(node)

    return LongestFirst(config, log)


def _seconds(module: str, tests: int) -> float:
    return UNIT_SECONDS.get(module, float(tests))


# Work a test run can do before the tests that need it, each in a process of
# its own from the start of the run, at a lower priority: the service tests
# come first (pytest-django orders them so) and keep one core busy at most,
# so the kernels and the Debian image are made in the idle time instead of
# adding their minutes later. The tests take the same locks and find the work
# done (or wait for it); a failure here only means a test does it itself.
#
# - The Debian image the kexec test boots (kperf_testing.baremetal): mostly
#   downloading and unpacking packages.
# - The fixture kernels (kperf_testing.prebuild): the test tree, then the
#   x86_64, arm64 and mm kernels and the fixture branches the tests boot.
_helpers: list[subprocess.Popen[bytes]] = []


def _start_helper(cache: Path, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
    log = (cache / f"{name}.log").open("wb")
    _helpers.append(
        subprocess.Popen(
            [sys.executable, "-m", *argv, str(cache)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    # One process starts them: the only one, or xdist's first worker.
    first_process = os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0"
    if not first_process or _helpers or session.config.option.collectonly:
        return
    cache = cache_dir()
    if any(item.get_closest_marker("kernel") for item in session.items):
        # In one process the kernel tests come last and the builds take the
        # idle core below the service tests; in two workers tests wait for them.
        nice = "0" if os.environ.get("PYTEST_XDIST_WORKER") else "10"
        _start_helper(cache, "kernels-prepare", ["kperf_testing.prebuild"], {"KPERF_BUILD_NICE": nice})
    wanted = any(item.nodeid.startswith("tests/test_kexec_runner.py") for item in session.items)
    if wanted and os.geteuid() == 0:
        _start_helper(cache, "baremetal-prepare", ["kperf_testing.baremetal", "prepare"])


def pytest_sessionfinish(session: pytest.Session) -> None:
    # Interrupted runs leave no half image or kernel: each helper removes its
    # scratch work when terminated.
    for helper in _helpers:
        if helper.poll() is None:
            helper.terminate()
    for helper in _helpers:
        try:
            helper.wait(timeout=60)
        except subprocess.TimeoutExpired:
            helper.kill()
