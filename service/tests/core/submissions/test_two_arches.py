"""One submission for both arches: a verdict per machine class of each arch,
side by side on one page and in one API answer.

The runners are registered runners speaking the runner protocol over the
test client, one per class; the arm64 one measures a slower head and the
x86_64 one an unchanged head, so the two verdicts must not mix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from kperf.core.lifecycle import owners
from kperf.core.models import Job, MachineClass, Submission
from kperf.core.submissions.analysis import analyse_submission
from kperf.core.submissions.pipeline import SUBMISSION

from tests.conftest import Api, qemu_runner
from tests.lab_fixtures import results_body, submission_ready_for_testing

pytestmark = pytest.mark.django_db


def test_both_arches_give_a_verdict_per_machine_class_on_one_page(
    alice: Any, alice_api: Api, qemu_class: MachineClass, tmp_path: Path
) -> None:
    arm_class = MachineClass.objects.create(name="qemu-arm64", arch="arm64")
    sub = submission_ready_for_testing(alice, qemu_class, tmp_path, arches=("x86_64", "arm64"))
    assert set(Job.objects.filter(submission=sub).values_list("machine_class__name", flat=True)) == {
        "qemu-x86_64",
        "qemu-arm64",
    }

    # Each runner gets only its own arch's kernels; arm64's head is 30% slower.
    for mclass, head_value in ((qemu_class, 1000.0), (arm_class, 700.0)):
        _, api = qemu_runner(f"runner-{mclass.arch}", mclass)
        while (job := api.post("/runner/claim").json()["job"]) is not None:
            row = Job.objects.select_related("build").get(pk=job["id"])
            assert row.build.arch == mclass.arch and job["arch"] == mclass.arch
            value = 1000.0 if row.side == "base" else head_value
            resp = api.post(f"/runner/jobs/{job['id']}/results", results_body(job, value))
            assert resp.status_code == 200, resp.content
    owners.advance(SUBMISSION, sub.pk)
    analyse_submission(sub.pk)
    sub.refresh_from_db()
    assert sub.status == Submission.Status.DONE

    comparisons = alice_api.get(f"/submissions/{sub.pk}").json()["comparisons"]
    verdicts = {c["machine_class"]: {m["verdict"] for m in c["metrics"]} for c in comparisons}
    assert verdicts == {"qemu-x86_64": {"no-change"}, "qemu-arm64": {"regression"}}, verdicts

    browser = Client()
    browser.force_login(alice)
    html = browser.get(f"/submissions/{sub.pk}").content.decode()
    assert "spawn on qemu-x86_64" in html and "spawn on qemu-arm64" in html
