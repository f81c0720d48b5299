"""How a build was made (incremental from which commit, how much it
recompiled, a clean rebuild after a failed incremental one), as the builds
worker records it from the driver's result (kperf.core.builds.queue): shown in
the API and on the submission page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from kperf.core.models import KernelBuild, SubmissionBuild
from kperf.core.submissions.pipeline import prepare_submission

from tests.conftest import Api

pytestmark = pytest.mark.django_db


def test_a_build_shows_which_commit_it_was_built_incrementally_from(
    alice: Any, alice_api: Api, small_tree: Path, qemu_class: Any, settings_dirs: Any
) -> None:
    sub_id = alice_api.post(
        "/submissions", {"tree": str(small_tree), "branch": "feature", "base": "master", "benchmarks": ["spawn"]}
    ).json()["id"]
    prepare_submission(sub_id)
    builds = {sb.side: sb.build for sb in SubmissionBuild.objects.filter(submission_id=sub_id)}
    base, head = builds["base"], builds["head"]
    # What building._run writes from BuildResult once the driver returns.
    KernelBuild.objects.filter(pk=base.pk).update(status="done", compiled_files=968)
    KernelBuild.objects.filter(pk=head.pk).update(
        status="done",
        reused_sha=base.sha,
        compiled_files=12,
        incremental_error="ld: kernel/fork.o: file format not recognized",
    )

    shown = {b["side"]: b for b in alice_api.get(f"/submissions/{sub_id}").json()["builds"]}
    assert (shown["base"]["reused_sha"], shown["base"]["compiled_files"]) == ("", 968)
    assert (shown["head"]["reused_sha"], shown["head"]["compiled_files"]) == (base.sha, 12)
    assert shown["head"]["incremental_error"] == "ld: kernel/fork.o: file format not recognized"

    browser = Client()
    browser.force_login(alice)
    page = browser.get(f"/submissions/{sub_id}").content.decode()
    assert "clean, 968 files compiled" in page
    assert f"incremental from <code>{base.sha[:12]}</code>, 12 files compiled" in page
    assert "rebuilt clean after the incremental build failed" in page
