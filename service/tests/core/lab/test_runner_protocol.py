"""The runner protocol: tokens, claims, leases, results and failures."""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.utils import timezone

from kperf.core.lab import leases
from kperf.core.lifecycle import owners
from kperf.core.models import BootRecord, Job, Sample, Submission, SubmissionBuild
from kperf.core.submissions.pipeline import SUBMISSION, schedule_jobs

from tests.conftest import Api
from tests.lab_fixtures import results_body, submission_ready_for_testing

pytestmark = pytest.mark.django_db


@pytest.fixture
def sub(alice: Any, qemu_class: Any, tmp_path: Path) -> Submission:
    return submission_ready_for_testing(alice, qemu_class, tmp_path)


def claim(api: Api) -> dict[str, Any]:
    resp = api.post("/runner/claim")
    assert resp.status_code == 200, resp.content
    job: dict[str, Any] = resp.json()["job"]
    return job


def test_heartbeat_records_the_runner_and_refuses_a_class_change(runner_api: Any) -> None:
    runner, api = runner_api
    resp = api.post(
        "/runner/heartbeat", {"name": "qemu-1", "arch": "x86_64", "machine_class": "qemu-x86_64", "version": "0.1.0"}
    )
    assert resp.status_code == 200 and resp.json()["runner"] == "qemu-1"
    runner.refresh_from_db()
    assert runner.last_heartbeat is not None and runner.version == "0.1.0"
    resp = api.post("/runner/heartbeat", {"machine_class": "x86-skylake"})
    assert resp.status_code == 409 and resp.json()["code"] == "mismatch"


def test_runner_endpoints_need_a_runner_token(sub: Submission, alice_api: Api) -> None:
    assert Api(None).post("/runner/claim").status_code == 401
    resp = alice_api.post("/runner/claim")
    assert resp.status_code == 401 and resp.json()["code"] == "bad-token"
    assert not Job.objects.exclude(status=Job.Status.QUEUED).exists()


def test_jobs_are_claimed_base_and_head_alternately_with_a_lease(sub: Submission, runner_api: Any) -> None:
    _, api = runner_api
    first, second = claim(api), claim(api)
    sides = [Job.objects.get(pk=j["id"]).side for j in (first, second)]
    assert sides == ["base", "head"]
    assert first["benchmark"] == "spawn" and first["boots"] == 1 and first["attempt"] == 1
    assert first["params"]["iterations"] >= 1 and first["arch"] == "x86_64"
    art = first["artifacts"][0]
    assert art["name"] == "kernel" and len(art["sha256"]) == 64
    job = Job.objects.get(pk=first["id"])
    assert job.status == Job.Status.LEASED and job.lease_expires is not None


def test_a_runner_downloads_only_artifacts_of_builds_it_holds(
    sub: Submission, runner_api: Any, other_runner_api: Any
) -> None:
    _, api = runner_api
    _, other = other_runner_api
    job = claim(api)
    url = job["artifacts"][0]["url"].removeprefix("/api/v1")
    resp = api.get(url)
    assert resp.status_code == 200
    assert b"".join(resp.streaming_content).startswith(b"not really a kernel")
    assert other.get(url).status_code == 403


def test_results_are_stored_once_and_a_duplicate_changes_nothing(sub: Submission, runner_api: Any) -> None:
    _, api = runner_api
    job = claim(api)
    resp = api.post(f"/runner/jobs/{job['id']}/results", results_body(job))
    assert resp.status_code == 200, resp.content
    assert Job.objects.get(pk=job["id"]).status == Job.Status.DONE
    n = Sample.objects.count()
    assert n == len(job["params"]["extra_vmas"]) * job["params"]["iterations"]
    again = api.post(f"/runner/jobs/{job['id']}/results", results_body(job, value=1.0))
    assert again.status_code == 409 and again.json()["code"] == "duplicate"
    assert Sample.objects.count() == n
    assert not Sample.objects.filter(value__lt=10).exists()


def test_a_runner_cannot_report_on_a_job_it_does_not_hold(
    sub: Submission, runner_api: Any, other_runner_api: Any
) -> None:
    _, api = runner_api
    _, other = other_runner_api
    job = claim(api)
    for path, payload in [
        ("results", results_body(job)),
        ("progress", {"attempt": 1, "phase": "booting"}),
        ("fail", {"attempt": 1, "kind": "boot", "message": "x"}),
    ]:
        resp = other.post(f"/runner/jobs/{job['id']}/{path}", payload)
        assert resp.status_code == 409 and resp.json()["code"] == "not-held", path
    # Nor on a queued job nobody holds, nor on a job that does not exist.
    queued = Job.objects.filter(status=Job.Status.QUEUED).first()
    assert queued is not None
    assert other.post(f"/runner/jobs/{queued.pk}/results", results_body(job)).status_code == 409
    assert other.post("/runner/jobs/999999/results", results_body(job)).status_code == 404
    assert Job.objects.get(pk=job["id"]).status == Job.Status.LEASED
    assert not BootRecord.objects.exists()


def test_malformed_results_get_422_and_store_nothing(sub: Submission, runner_api: Any) -> None:
    _, api = runner_api
    job = claim(api)
    bad_metric = results_body(job)
    bad_metric["boots"][0]["samples"][0]["metric"] = "dhrystone"
    nan = results_body(job)
    nan["boots"][0]["samples"][0]["value"] = "NaN"
    no_boots = results_body(job)
    no_boots["boots"] = []
    flipped = results_body(job)
    flipped["metrics"]["spawn-vmas-0"]["higher_is_better"] = False
    for body, says in [(bad_metric, "dhrystone"), (nan, "finite"), (no_boots, "boots"), (flipped, "versions differ")]:
        resp = api.post(f"/runner/jobs/{job['id']}/results", body)
        assert resp.status_code == 422, resp.content
        assert says in resp.json()["detail"]
    resp = api.post(f"/runner/jobs/{job['id']}/results", raw=b"{")
    assert 400 <= resp.status_code < 500
    assert not BootRecord.objects.exists() and not Sample.objects.exists()
    assert Job.objects.get(pk=job["id"]).status == Job.Status.LEASED


def test_an_oversized_upload_is_refused_without_storing_anything(
    sub: Submission, runner_api: Any, settings: Any
) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    _, api = runner_api
    job = claim(api)
    body = results_body(job)
    body["console_log"] = "x" * 10000
    resp = api.post(f"/runner/jobs/{job['id']}/results", body)
    assert resp.status_code in (400, 413)
    assert not BootRecord.objects.exists()


def test_progress_extends_the_lease_and_keeps_the_console(sub: Submission, runner_api: Any) -> None:
    _, api = runner_api
    job = claim(api)
    Job.objects.filter(pk=job["id"]).update(lease_expires=timezone.now() + timedelta(seconds=5))
    resp = api.post(
        f"/runner/jobs/{job['id']}/progress",
        {"attempt": 1, "phase": "booting", "boot": 1, "boots": 1, "console": "Linux version 6.1\n"},
    )
    assert resp.status_code == 200
    j = Job.objects.get(pk=job["id"])
    assert j.lease_expires is not None and j.lease_expires > timezone.now() + timedelta(seconds=60)
    assert j.progress == "boot 1 of 1" and "Linux version" in j.console_log


def test_quiet_seconds_extend_the_lease_and_no_later_call_shortens_it(sub: Submission, runner_api: Any) -> None:
    _, api = runner_api
    job = claim(api)
    lease = django_settings.KPERF_LEASE_SECONDS
    before = timezone.now()
    resp = api.post(f"/runner/jobs/{job['id']}/progress", {"attempt": 1, "phase": "booting", "quiet_seconds": 3600})
    assert resp.status_code == 200, resp.content
    expires = Job.objects.get(pk=job["id"]).lease_expires
    assert expires is not None
    assert before + timedelta(seconds=lease + 3600) <= expires <= timezone.now() + timedelta(seconds=lease + 3600)
    # Out of bounds (over 6 h, negative, not an integer): refused, the lease untouched.
    for bad in (21601, -1, "1h"):
        resp = api.post(f"/runner/jobs/{job['id']}/progress", {"attempt": 1, "quiet_seconds": bad})
        assert resp.status_code == 422, (bad, resp.content)
        assert Job.objects.get(pk=job["id"]).lease_expires == expires
    # A keepalive after it (the agent still waiting for the jump) never
    # shortens the quiet lease ...
    resp = api.post(f"/runner/jobs/{job['id']}/progress", {"attempt": 1, "phase": "booting"})
    assert resp.status_code == 200, resp.content
    assert Job.objects.get(pk=job["id"]).lease_expires == expires
    # ... nor does a shorter quiet spell announced later.
    api.post(f"/runner/jobs/{job['id']}/progress", {"attempt": 1, "phase": "booting", "quiet_seconds": 60})
    assert Job.objects.get(pk=job["id"]).lease_expires == expires
    # Once that time has passed (the machine is back), a call extends from now again.
    Job.objects.filter(pk=job["id"]).update(lease_expires=timezone.now() + timedelta(seconds=5))
    before = timezone.now()
    api.post(f"/runner/jobs/{job['id']}/progress", {"attempt": 1, "phase": "running"})
    after = Job.objects.get(pk=job["id"]).lease_expires
    assert after is not None and before + timedelta(seconds=lease) <= after <= timezone.now() + timedelta(seconds=lease)


def test_an_expired_lease_goes_back_to_the_queue_then_fails_as_infra(
    sub: Submission, runner_api: Any, other_runner_api: Any
) -> None:
    _, api = runner_api
    _, other = other_runner_api
    job = claim(api)
    job_id = job["id"]
    for attempt in (1, 2, 3):
        Job.objects.filter(pk=job_id).update(lease_expires=timezone.now() - timedelta(seconds=1))
        assert leases.expire_leases() == 1
        j = Job.objects.get(pk=job_id)
        if attempt < 3:
            assert j.status == Job.Status.QUEUED and j.attempt == attempt + 1
            # The presumed-dead runner's late results are refused...
            late = api.post(f"/runner/jobs/{job_id}/results", results_body(job))
            assert late.status_code == 409 and late.json()["code"] == "not-held"
            # ...and the job is handed out again, at the new attempt.
            again = claim(other)
            assert again["id"] == job_id and again["attempt"] == attempt + 1
            job = again
    j = Job.objects.get(pk=job_id)
    assert j.status == Job.Status.FAILED and j.failure_kind == "infra"
    assert "lease expired on the last attempt" in j.failure_message


def test_an_infra_failure_is_retried_but_a_boot_failure_is_final(sub: Submission, runner_api: Any) -> None:
    _, api = runner_api
    job = claim(api)
    resp = api.post(f"/runner/jobs/{job['id']}/fail", {"attempt": 1, "kind": "infra", "message": "disk full"})
    assert resp.status_code == 200 and resp.json() == {"status": "queued", "attempt": 2}
    job = claim(api)
    assert job["attempt"] == 2
    resp = api.post(
        f"/runner/jobs/{job['id']}/fail",
        {
            "attempt": 2,
            "kind": "boot",
            "message": "Kernel panic - not syncing: No working init found",
            "log": "[    0.5] Kernel panic",
        },
    )
    assert resp.status_code == 200 and resp.json()["status"] == "failed"
    j = Job.objects.get(pk=job["id"])
    assert j.failure_kind == "boot" and "Kernel panic" in j.console_log
    owners.advance(SUBMISSION, sub.pk)
    sub.refresh_from_db()
    assert sub.status == Submission.Status.FAILED
    assert "did not boot" in sub.error and "No working init found" in sub.error
    assert not Job.objects.filter(submission=sub, status=Job.Status.QUEUED).exists()


def test_an_unknown_failure_kind_is_refused(sub: Submission, runner_api: Any) -> None:
    _, api = runner_api
    job = claim(api)
    resp = api.post(f"/runner/jobs/{job['id']}/fail", {"attempt": 1, "kind": "cosmic-ray"})
    assert resp.status_code == 422 and "kind must be one of" in resp.json()["detail"]
    assert Job.objects.get(pk=job["id"]).status == Job.Status.LEASED


def test_all_results_in_leads_to_a_verdict(sub: Submission, runner_api: Any) -> None:
    from kperf.core.submissions.analysis import analyse_submission

    _, api = runner_api
    while (job := claim(api)) is not None:
        side = Job.objects.get(pk=job["id"]).side
        value = 1000.0 if side == "base" else 600.0
        assert api.post(f"/runner/jobs/{job['id']}/results", results_body(job, value)).status_code == 200
    owners.advance(SUBMISSION, sub.pk)
    sub.refresh_from_db()
    assert sub.status == Submission.Status.ANALYSING
    analyse_submission(sub.pk)
    sub.refresh_from_db()
    assert sub.status == Submission.Status.DONE
    comp = sub.comparisons.get()
    verdicts = {m.metric: m.verdict for m in comp.metrics.all()}
    assert verdicts == {"spawn-vmas-0": "regression", "spawn-vmas-1000": "regression"}
    m = comp.metrics.get(metric="spawn-vmas-0")
    assert m.change_pct is not None and -41 < m.change_pct < -39
    assert m.base_boots == m.head_boots == 4


def test_a_runner_that_shares_the_build_host_waits_for_builds_on_the_wall_clock_only(
    sub: Submission, runner_api: Any
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from kperf.core.models import Clock, Job, KernelBuild

    runner, api = runner_api
    runner.yields_to_builds = True
    runner.save()
    other = KernelBuild.objects.create(
        tree=sub.tree,
        sha="c" * 40,
        arch="x86_64",
        config_digest="d" * 64,
        status="building",
        lease_expires=timezone.now() + timedelta(minutes=2),
    )
    # Wall-clock boots would time the compiler as well: none is handed out while a kernel builds.
    Job.objects.filter(submission=sub).update(clock=Clock.WALL)
    assert api.post("/runner/claim").json() == {"job": None}
    # Its worker died: the lease runs out, and the runner no longer waits
    # for a build nobody is running.
    other.lease_expires = timezone.now() - timedelta(seconds=1)
    other.save()
    assert api.post("/runner/claim").json()["job"]["clock"] == Clock.WALL

    # The instruction clock counts guest instructions, whatever the host does:
    # those boots run while a kernel builds.
    other.lease_expires = timezone.now() + timedelta(minutes=2)
    other.save()
    Job.objects.filter(submission=sub, status=Job.Status.QUEUED).update(clock=Clock.INSTRUCTIONS)
    assert api.post("/runner/claim").json()["job"]["clock"] == Clock.INSTRUCTIONS


def test_an_inconclusive_look_queues_more_boots_then_decides(sub: Submission, runner_api: Any) -> None:
    """Noisy boots at the first look: kperf adds boots instead of guessing."""
    from kperf.core.submissions.analysis import analyse_submission

    _, api = runner_api
    # Base and head draw the same values in a different order: no real change.
    noisy = iter([1000.0, 900.0, 1300.0, 800.0, 800.0, 1300.0, 900.0, 1000.0] * 4)

    def run_all() -> None:
        while (job := claim(api)) is not None:
            assert api.post(f"/runner/jobs/{job['id']}/results", results_body(job, next(noisy))).status_code == 200
        owners.advance(SUBMISSION, sub.pk)
        analyse_submission(sub.pk)
        sub.refresh_from_db()

    run_all()
    assert sub.status == Submission.Status.TESTING
    assert sub.reruns and sub.reruns[0]["look"] == 1 and sub.reruns[0]["more_boots"] == 4
    assert Job.objects.filter(submission=sub, status=Job.Status.QUEUED).count() == 8
    comp = sub.comparisons.get()
    assert not comp.final and comp.look == 1 and comp.looks == 2
    run_all()
    assert sub.status == Submission.Status.DONE
    comp = sub.comparisons.get()
    assert comp.final and comp.look == 2
    m = comp.metrics.get(metric="spawn-vmas-0")
    assert m.base_boots == m.head_boots == 8
    assert m.verdict != "regression"
    assert "Hmean" in comp.table and next(row["label"] for row in m.summary) == "Min"


def test_a_runner_claims_only_jobs_of_clocks_it_gives_and_uploads_only_that_clock(
    sub: Submission, runner_api: Any, alice_api: Api
) -> None:
    """The class times with the instruction clock: a KVM-only runner (wall
    clock) gets nothing; a runner that gives both gets the job with its clock,
    and an upload timed with the wall clock is refused whole."""
    _, api = runner_api
    hello = {"name": "qemu-1", "arch": "x86_64", "machine_class": "qemu-x86_64", "version": "0.1.0"}
    assert api.post("/runner/heartbeat", hello | {"capabilities": {"clocks": ["wall"]}}).status_code == 200
    assert claim(api) is None
    # A runner from before clocks says nothing about them: it is a wall-clock runner.
    assert api.post("/runner/heartbeat", hello).status_code == 200
    assert claim(api) is None
    assert api.post("/runner/heartbeat", hello | {"capabilities": {"clocks": ["instructions", "wall"]}}).status_code
    job = claim(api)
    assert job is not None and job["clock"] == "instructions"
    listed = {r["name"]: r for r in alice_api.get("/runners").json()}
    assert listed["qemu-1"]["clock"] == "instructions"
    assert listed["qemu-1"]["capabilities"]["clocks"] == ["instructions", "wall"]
    wrong = results_body(job | {"clock": "wall"})
    resp = api.post(f"/runner/jobs/{job['id']}/results", wrong)
    assert resp.status_code == 422 and "timed with the 'wall' clock but job" in resp.json()["detail"]
    assert not BootRecord.objects.filter(job_id=job["id"]).exists()
    assert api.post(f"/runner/jobs/{job['id']}/results", results_body(job)).status_code == 200
    record = BootRecord.objects.get(job_id=job["id"])
    assert record.environment["clock"] == "instructions" and record.job.clock == "instructions"


def test_switching_a_class_to_the_wall_clock_moves_its_unstarted_work(
    sub: Submission, runner_api: Any, alice: Any, qemu_class: Any, tmp_path: Path
) -> None:
    """A class whose runners can only give the wall clock (KVM) must not
    leave instruction-clock jobs waiting forever: `add_runner --clock wall`
    moves every queued job whose comparison has no boot yet, and keeps the
    clock of a comparison that already has boots (one comparison, one clock)."""
    _, api = runner_api
    # A second submission of the same two kernels, nothing measured yet.
    started = Submission.objects.create(
        owner=alice, tree=sub.tree, head_ref="other", base_ref="master", head_sha=sub.head_sha,
        base_sha=sub.base_sha, benchmarks=["spawn"], grids=["quick"], arches=["x86_64"],
        status=Submission.Status.TESTING,
    )  # fmt: skip
    schedule_jobs(
        started,
        [
            SubmissionBuild.objects.create(submission=started, build=sb.build, side=sb.side)
            for sb in sub.submission_builds.all()
        ],
    )
    job = claim(api)
    assert job is not None and Job.objects.get(pk=job["id"]).submission_id == sub.pk
    assert api.post(f"/runner/jobs/{job['id']}/results", results_body(job)).status_code == 200
    out = io.StringIO()
    call_command(
        "add_runner", "kvm-1", "--machine-class", qemu_class.name, "--arch", "x86_64", "--clock", "wall", stderr=out
    )
    qemu_class.refresh_from_db()
    assert qemu_class.clock == "wall"
    assert {j.clock for j in Job.objects.filter(submission=started)} == {"wall"}
    assert {j.clock for j in Job.objects.filter(submission=sub, status=Job.Status.QUEUED)} == {"instructions"}
    assert f"{Job.objects.filter(submission=started).count()} queued job(s) moved" in out.getvalue()
