"""How `make test` shares its tests between two pytest-xdist workers (docs/development.md, "Two workers").

- A module is one unit, run whole and in order by one worker: its module
  fixtures (an end-to-end stack, a browser, a live server) are made once.
- Units go out longest first (longest-processing-time-first), so the workers
  end together. The long units are the kernel tests'; their seconds are
  UNIT_SECONDS, any other module counts a second a test.
- A unit with a kernel test waits until the fixture kernels' prebuild
  (kperf_testing.prebuild) has the x86_64 base: every kernel test boots it or
  builds from it, and a worker that took one earlier would only wait on its
  lock. Until then the workers take the other units, and when only kernel
  units are left they take those.

The controller learns which tests are kernel tests from the workers: each
writes the ids of the ones it collected (marked `kernel`, or using a kernel
fixture) into the run's state directory, which the controller names in
KPERF_XDIST_STATE before it starts them. The prebuild writes `base-ready`
there once the x86_64 base is built, or it gave up on it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

STATE_ENV = "KPERF_XDIST_STATE"
BASE_READY = "base-ready"
KERNEL_FIXTURES = frozenset({"kernel_tree", "x86_64_kernel", "kperf_cache", "kernel"})

# Seconds of each long module on a 2-core VM with an empty cache, one
# process: the kexec VM and the remote build worker measured on 2026-11-29,
# the others estimated from the longest tests of earlier runs
# (docs/quickstart.md, "Tests"). Only their order matters.
UNIT_SECONDS = {
    "tests/test_e2e.py": 1500,
    "tests/test_kexec_runner.py": 720,
    "kernel-builds/tests/test_kbuild_kernel.py": 700,
    "service/tests/core/builds/test_remote_build_worker.py": 650,
    "kernel-builds/tests/test_profile_kernels.py": 500,
    "tests/test_e2e_arm64.py": 300,
    "tests/test_e2e_smp.py": 300,
    "runners/tests/test_qemu_smp.py": 300,
    "kernel-builds/tests/test_smp_kernels.py": 200,
    "tests/test_make_up.py": 120,
    "runners/tests/test_qemu_backend.py": 120,
    "service/tests/core/tracking/test_learned_drift.py": 90,
    "service/tests/core/web/api/test_api_schema.py": 80,
    "runners/tests/test_mm_benchmarks_qemu.py": 60,
    "runners/tests/test_pagealloc_benchmark.py": 60,
    "service/tests/core/tasks/test_recovery.py": 60,
}


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def is_kernel_test(item: pytest.Item) -> bool:
    return bool(item.get_closest_marker("kernel") or KERNEL_FIXTURES & set(getattr(item, "fixturenames", ())))


def write_kernel_tests(state: Path, worker: str, items: Iterable[pytest.Item]) -> None:
    """A worker's list of its kernel tests, written whole (the controller may read it any time after)."""
    tmp = state / f"kernel-tests.{worker}.tmp"
    tmp.write_text("".join(f"{item.nodeid}\n" for item in items if is_kernel_test(item)))
    tmp.replace(state / f"kernel-tests.{worker}")


def seconds(module: str, tests: int) -> float:
    return UNIT_SECONDS.get(module, float(tests))


class LongestFirst(LoadScopeScheduling):  # type: ignore[misc]
    """xdist's scope scheduler with the units and order above."""

    collection: list[str] | None
    workqueue: dict[str, dict[str, bool]]
    assigned_work: dict[Any, dict[str, dict[str, bool]]]
    registered_collections: dict[Any, list[str]]

    def __init__(self, config: pytest.Config, log: Any, state: Path) -> None:
        super().__init__(config, log)
        self.state = state
        self.kernel_units: frozenset[str] = frozenset()

    def _split_scope(self, nodeid: str) -> str:
        return module_of(nodeid)

    def schedule(self) -> None:
        if self.collection is not None or not self._check_nodes_have_same_collection():
            super().schedule()  # later calls, or xdist's own abort on differing collections
            return
        # The first call. Every worker collected the same tests (checked
        # above): gw0's list of kernel tests is everyone's.
        collection = list(next(iter(self.registered_collections.values())))
        self.collection = collection
        kernel_file = self.state / "kernel-tests.gw0"
        kernel_tests = set(kernel_file.read_text().splitlines()) if kernel_file.is_file() else set()
        self.kernel_units = frozenset(module_of(nodeid) for nodeid in kernel_tests)
        units: dict[str, dict[str, bool]] = {}
        for nodeid in collection:
            units.setdefault(module_of(nodeid), {})[nodeid] = False
        for scope, unit in sorted(units.items(), key=lambda item: -seconds(item[0], len(item[1]))):
            self.workqueue[scope] = unit
        for node in self.nodes:
            if self.workqueue:
                self._assign_work_unit(node)
        for node in self.nodes:
            self._reschedule(node)

    def _next_scope(self) -> str:
        """The longest unit, unless it waits for the kernels and another need not."""
        if self.kernel_units and not (self.state / BASE_READY).exists():
            for scope in self.workqueue:
                if scope not in self.kernel_units:
                    return scope
        return next(iter(self.workqueue))

    def _assign_work_unit(self, node: Any) -> None:
        scope = self._next_scope()
        work_unit = self.workqueue.pop(scope)
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        collection = self.registered_collections[node]
        node.send_runtest_some([collection.index(nodeid) for nodeid, done in work_unit.items() if not done])


def make_scheduler(config: pytest.Config, log: Any) -> LongestFirst | None:
    state = os.environ.get(STATE_ENV)
    return LongestFirst(config, log, Path(state)) if state else None
