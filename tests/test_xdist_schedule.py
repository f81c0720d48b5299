"""kperf_testing.xdist_schedule's order for `make test TEST_WORKERS=2`: whole
modules, longest first, kernel modules held back until the x86_64 base is built."""

from __future__ import annotations

from pathlib import Path

from kperf_testing import xdist_schedule
from kperf_testing.xdist_schedule import BASE_READY, LongestFirst


def scheduler(state: Path, queue: list[str], kernel: set[str]) -> LongestFirst:
    # The order rule alone, without xdist's nodes: a scheduler as its first
    # schedule() leaves it, with the units queued longest first.
    sched = LongestFirst.__new__(LongestFirst)
    sched.state = state
    sched.kernel_units = frozenset(kernel)
    sched.workqueue = {scope: {f"{scope}::test": False} for scope in queue}
    return sched


def test_units_are_modules_and_the_long_kernel_modules_come_first() -> None:
    assert xdist_schedule.module_of("tests/test_e2e.py::test_x[param::y]") == "tests/test_e2e.py"
    modules = {"service/tests/test_api.py": 300, "tests/test_e2e.py": 7, "tests/test_kexec_runner.py": 1}
    order = sorted(modules, key=lambda m: -xdist_schedule.seconds(m, modules[m]))
    # A module of 300 quick tests counts 300 s: after the measured long ones.
    assert order == ["tests/test_e2e.py", "tests/test_kexec_runner.py", "service/tests/test_api.py"]


def test_a_kernel_module_waits_for_the_base_while_another_can_run(tmp_path: Path) -> None:
    queue = ["tests/test_e2e.py", "tests/test_kexec_runner.py", "service/tests/test_api.py"]
    sched = scheduler(tmp_path, queue, {"tests/test_e2e.py", "tests/test_kexec_runner.py"})
    assert sched._next_scope() == "service/tests/test_api.py"
    (tmp_path / BASE_READY).touch()
    assert sched._next_scope() == "tests/test_e2e.py"


def test_when_only_kernel_modules_are_left_they_go_out_without_the_base(tmp_path: Path) -> None:
    sched = scheduler(
        tmp_path,
        ["tests/test_e2e.py", "tests/test_kexec_runner.py"],
        {"tests/test_e2e.py", "tests/test_kexec_runner.py"},
    )
    assert not (tmp_path / BASE_READY).exists()
    assert sched._next_scope() == "tests/test_e2e.py"


def test_every_long_module_named_is_a_test_module_of_the_repository() -> None:
    # The units are keyed by path: a module moved or renamed would silently lose its place at the front.
    root = Path(__file__).resolve().parent.parent
    missing = [module for module in xdist_schedule.UNIT_SECONDS if not (root / module).is_file()]
    assert not missing, f"moved or renamed; update UNIT_SECONDS: {missing}"
