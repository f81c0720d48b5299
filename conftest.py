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
import tempfile
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


# Fixtures that build, boot or share the kernel cache. Under pytest-xdist
# (`make test TEST_WORKERS=2`) every test that uses one, or is marked
# `kernel`, is sent to one worker as one unit, first and in collection order:
# the fixture kernels are session fixtures, built once by the process that
# holds them, and the builds and boots measure nothing if two of them race for
# the same two cores. The other worker runs the service tests beside them.
#
# pytest-xdist's own `--dist loadgroup` cannot do this with pytest 9.2: it
# marks a group by appending "@name" to `item._nodeid`, while pytest 9.2 keeps
# a node's id in `item._id`, so it groups nothing. So each worker writes the
# ids of the kernel tests it collected to a file the controller names, and
# the controller's scheduler (below) reads them.
KERNEL_FIXTURES = frozenset({"kernel_tree", "x86_64_kernel", "kperf_cache", "kernel"})
KERNEL_GROUP = "kernels"
_KERNEL_TESTS_ENV = "KPERF_XDIST_KERNEL_TESTS"


def _is_kernel_test(item: pytest.Item) -> bool:
    return bool(item.get_closest_marker("kernel") or KERNEL_FIXTURES & set(getattr(item, "fixturenames", ())))


def pytest_configure(config: pytest.Config) -> None:
    # The controller of an xdist run, before it starts its workers (they inherit the variable).
    if getattr(config.option, "dist", "no") != "no" and not os.environ.get("PYTEST_XDIST_WORKER"):
        fd, path = tempfile.mkstemp(prefix="kperf-kernel-tests-")
        os.close(fd)
        os.environ[_KERNEL_TESTS_ENV] = path


def pytest_unconfigure(config: pytest.Config) -> None:
    path = os.environ.get(_KERNEL_TESTS_ENV)
    if path and not os.environ.get("PYTEST_XDIST_WORKER"):
        for leftover in Path(path).parent.glob(f"{Path(path).name}*"):
            leftover.unlink(missing_ok=True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    path, worker = os.environ.get(_KERNEL_TESTS_ENV), os.environ.get("PYTEST_XDIST_WORKER")
    if path and worker:
        ids = "".join(f"{item.nodeid}\n" for item in items if _is_kernel_test(item))
        Path(f"{path}.{worker}.tmp").write_text(ids)
        os.replace(f"{path}.{worker}.tmp", f"{path}.{worker}")


# Optional: the default `make test` runs with -p no:xdist, where the hook is unknown.
@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's scope scheduler with one scope for every kernel test and
    one per test otherwise; scopes go out largest first, so the kernels' first."""
    path = os.environ.get(_KERNEL_TESTS_ENV)
    if not path:
        return None
    from xdist.scheduler import LoadScopeScheduling

    class KernelLane(LoadScopeScheduling):  # type: ignore[misc]
        kernel_tests: frozenset[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.kernel_tests is None:
                # Every worker collected the same tests (xdist checks): gw0's list is everyone's.
                self.kernel_tests = frozenset(Path(f"{path}.gw0").read_text().splitlines())
            return KERNEL_GROUP if nodeid in self.kernel_tests else nodeid

    return KernelLane(config, log)


# The Debian image the kexec test boots (kperf_testing.baremetal) is mostly
# downloading and unpacking packages: made in a process of its own from the
# start of the run, it overlaps the kernel builds instead of adding its
# minutes at the end. The test takes the same lock and finds it done (or
# waits for it); a failed build here only means the test builds it itself.
_image_builder: subprocess.Popen[bytes] | None = None


def pytest_collection_finish(session: pytest.Session) -> None:
    global _image_builder
    wanted = any(item.nodeid.startswith("tests/test_kexec_runner.py") for item in session.items)
    # One xdist worker starts it (the test waits on its lock wherever it runs).
    first_process = os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0"
    if not wanted or not first_process or os.geteuid() != 0 or _image_builder is not None:
        return
    cache = cache_dir()
    log = (cache / "baremetal-prepare.log").open("wb")
    _image_builder = subprocess.Popen(
        [sys.executable, "-m", "kperf_testing.baremetal", "prepare", str(cache)],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _image_builder is not None and _image_builder.poll() is None:
        # Interrupted runs leave no half image: the builder removes its
        # scratch directory when terminated.
        _image_builder.terminate()
        try:
            _image_builder.wait(timeout=60)
        except subprocess.TimeoutExpired:
            _image_builder.kill()
