"""Fixtures shared by every test folder: the kernel test tree and fixture kernels.

Kernels are expensive (minutes each on two cores), so each fixture kernel is
built once per run, shared by every test that needs it, and its tree, git
repository and ccache live in KPERF_CACHE (default ~/.cache/kperf) so later
runs reuse them.
"""

from __future__ import annotations

import os
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
    from kperf_kbuild.testing import ensure_test_tree

    return ensure_test_tree(kperf_cache)


@pytest.fixture(scope="session")
def x86_64_kernel(kernel_tree: Path, kperf_cache: Path):  # type: ignore[no-untyped-def]
    """The base branch built for x86_64 with kperf's config fragment (once per run)."""
    from kperf_kbuild.testing import build_fixture_kernel

    return build_fixture_kernel(kernel_tree, "base", "x86_64", kperf_cache)
