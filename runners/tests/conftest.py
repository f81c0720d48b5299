"""Fixtures for the runner's tests: one compile cache for the whole run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kperf_runner.toolchain import compile_static, host_arch


@pytest.fixture(scope="session")
def runner_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state directory shared by every test, so each C file compiles once."""
    return tmp_path_factory.mktemp("runner-state")


@pytest.fixture(scope="session")
def spawn_binary(runner_state: Path) -> Path:
    return compile_static("spawn.c", host_arch(), runner_state)


@pytest.fixture(scope="session")
def init_binary(runner_state: Path) -> Path:
    return compile_static("init.c", host_arch(), runner_state)


@pytest.fixture(scope="module")
def kernel(request: pytest.FixtureRequest) -> Path:
    """The fixture kernel (built once per run), or KPERF_RUNNER_TEST_KERNEL's bzImage."""
    given = os.environ.get("KPERF_RUNNER_TEST_KERNEL")
    if given:
        return Path(given)
    build = request.getfixturevalue("x86_64_kernel")
    if not build.ok:
        pytest.fail(f"the fixture kernel did not build: {build.error}")
    path = build.artifacts["kernel"]
    assert isinstance(path, Path)
    return path


# The fake service every agent test talks to, shared from its fixture module (no test module imports another).
from agent_fixtures import service  # noqa: E402, F401
