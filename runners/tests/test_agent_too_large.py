"""The agent when the service refuses a body as too large (413 too-large).

The console or log is sent again cut to its end; results that are still too
large fail the job as an infrastructure fault, reported to the service.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agent_fixtures import FakeService, NativeBackend, _agent

from kperf_runner import agent as agent_module
from kperf_runner.agent import DONE, FAILED

TOO_LARGE = (413, {"detail": "the request body is over this service's limit", "code": "too-large"})


@pytest.fixture
def short_tail(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(agent_module, "RESEND_TAIL", 40)
    return 40


def test_results_too_large_are_sent_again_with_the_console_cut(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    spawn_binary: Path,
    short_tail: int,
) -> None:
    fake, url = service
    fake.script["results"] = [TOO_LARGE]
    assert _agent(url, tmp_path, NativeBackend(), runner_state).run_job(fake.job) == DONE
    whole, cut = fake.bodies("results")
    assert len(whole["console_log"]) > short_tail
    assert cut["console_log"].startswith("[kperf-runner: ") and "refused them as too large" in cut["console_log"]
    assert cut["console_log"].endswith(whole["console_log"][-short_tail:])
    assert cut["boots"] == whole["boots"] and not fake.bodies("fail")


def test_results_still_too_large_fail_the_job_as_infra(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    spawn_binary: Path,
    short_tail: int,
) -> None:
    fake, url = service
    fake.script["results"] = [TOO_LARGE, TOO_LARGE]
    fake.script["fail"] = [TOO_LARGE]
    assert _agent(url, tmp_path, NativeBackend(), runner_state).run_job(fake.job) == FAILED
    assert len(fake.bodies("results")) == 2
    # The failure report itself was too large with the whole log: sent again with its end.
    whole, cut = fake.bodies("fail")
    assert cut["kind"] == "infra" and "too large" in cut["message"]
    assert len(whole["log"]) > len(cut["log"]) and cut["log"].startswith("[kperf-runner: ")
    assert fake.delivered("fail") == [cut]


def test_progress_too_large_still_extends_the_lease(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    spawn_binary: Path,
    short_tail: int,
) -> None:
    fake, url = service
    answer = fake.answer

    def refuse_any_console(method: str, path: str, body: dict[str, Any], auth: str) -> tuple[int, Any]:
        # A service whose limit leaves no room for console text.
        if fake.endpoint(path) == "progress" and body.get("console"):
            fake.script["progress"] = [TOO_LARGE]
        return answer(method, path, body, auth)

    fake.answer = refuse_any_console  # type: ignore[method-assign]
    assert _agent(url, tmp_path, NativeBackend(), runner_state).run_job(fake.job) == DONE
    calls = fake.bodies("progress")
    refused = [c for c in calls if c["console"] and not c["console"].startswith("[kperf-runner: ")]
    cut = [c for c in calls if c["console"].startswith("[kperf-runner: ")]
    assert refused and cut, calls
    # Each refused call went out again without its console, so every one extended the lease.
    delivered = fake.delivered("progress")
    assert all(not c["console"] for c in delivered)
    for call in refused:
        assert {**call, "console": ""} in delivered
