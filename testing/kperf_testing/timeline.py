"""pytest plugin: when and where each test ran, for bench/test_timeline.py.

With KPERF_TEST_TIMELINE set to a file, every test appends a JSON line when
it starts and one when it is done (set-up, call and teardown), with the
wall-clock time, the node id, the pytest-xdist worker and the outcome.
Nothing is written without the variable. A test run's minutes are spent in
a few modules; the bench lays these lines beside the CPU's busy share over
the same seconds, so that where a core stood idle shows
(docs/development.md, "Where a test run's time goes").
"""

from __future__ import annotations

import json
import os
import time

import pytest

ENV = "KPERF_TEST_TIMELINE"

_outcomes: dict[str, str] = {}
_config: list[pytest.Config] = []


def pytest_configure(config: pytest.Config) -> None:
    _config[:] = [config]


def _controller() -> bool:
    # Under xdist the controller replays every worker's hooks: only the
    # process that runs a test writes its lines. Asked when writing, not at
    # configure time, when xdist may not have registered its session yet.
    return bool(_config) and _config[0].pluginmanager.hasplugin("dsession")


def _write(event: dict[str, object]) -> None:
    path = os.environ.get(ENV)
    if not path or _controller():
        return
    event["worker"] = os.environ.get("PYTEST_XDIST_WORKER", "")
    # One write of one short line, in append mode: two workers' lines
    # interleave but never mix.
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(event) + "\n")


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _write({"event": "start", "t": time.time(), "nodeid": nodeid})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Every test of every run passes here: nothing to keep without the variable.
    if not os.environ.get(ENV):
        return
    # The worst of the three phases: a failed set-up or teardown fails the test.
    if report.failed:
        _outcomes[report.nodeid] = "failed"
    elif report.skipped and _outcomes.get(report.nodeid) != "failed":
        _outcomes[report.nodeid] = "skipped"
    else:
        _outcomes.setdefault(report.nodeid, "passed")


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _write({"event": "end", "t": time.time(), "nodeid": nodeid, "outcome": _outcomes.pop(nodeid, "passed")})
