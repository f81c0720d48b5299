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


# Fixtures that build, boot or share the kernel cache. Under pytest-xdist's
# `--dist loadgroup` (`make test`) every test that uses one is sent to one
# worker as one unit, in collection order: the fixture kernels are session
# fixtures, built once by the process that holds them, and the builds and
# boots measure nothing if two of them race for the same two cores. The other
# worker runs the service tests beside them.
KERNEL_FIXTURES = frozenset({"kernel_tree", "x86_64_kernel", "kperf_cache", "kernel"})
KERNEL_GROUP = "kernels"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("kernel") or KERNEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group(KERNEL_GROUP))


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
