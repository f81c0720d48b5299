"""Fixtures shared by every test folder: the kernel test tree and fixture kernels.

Kernels are expensive (minutes each on two cores), so each fixture kernel is
built once per run, shared by every test that needs it, and its tree, git
repository and ccache live in KPERF_CACHE (default ~/.cache/kperf) so later
runs reuse them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from kperf_testing import xdist_schedule

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


# `make test` runs in two pytest-xdist workers; kperf_testing.xdist_schedule
# says how it shares the tests between them (docs/development.md, "Two workers").


def pytest_configure(config: pytest.Config) -> None:
    # The controller of an xdist run, before it starts its workers (they inherit the variable).
    if getattr(config.option, "dist", "no") != "no" and not os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ[xdist_schedule.STATE_ENV] = tempfile.mkdtemp(prefix="kperf-xdist-")


def pytest_unconfigure(config: pytest.Config) -> None:
    state = os.environ.get(xdist_schedule.STATE_ENV)
    if state and not os.environ.get("PYTEST_XDIST_WORKER"):
        shutil.rmtree(state, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state, worker = os.environ.get(xdist_schedule.STATE_ENV), os.environ.get("PYTEST_XDIST_WORKER")
    if state and worker:
        xdist_schedule.write_kernel_tests(Path(state), worker, items)


# Optional: `make test TEST_WORKERS=0` runs with -p no:xdist, where the hook is unknown.
@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    return xdist_schedule.make_scheduler(config, log)


# Work a test run can do before the tests that need it, each in a process of
# its own from the start of the run: the service tests come first
# (pytest-django orders them so) and keep one core busy at most, so the
# kernels and the Debian image are made beside them instead of adding their
# minutes later. (On a VM a busy second core also slows the first: measured,
# this wins less than the idle time suggests; docs/quickstart.md, "Tests".)
# The tests take the same locks and find the work done (or wait for it); a
# failure here only means a test does it itself.
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
    elif state := os.environ.get(xdist_schedule.STATE_ENV):
        (Path(state) / xdist_schedule.BASE_READY).touch()  # nothing to wait for
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
