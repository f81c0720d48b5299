"""Patch series as mbox: read, refused with a reason, applied with git am, answered in their thread."""

from __future__ import annotations

import base64
import os
import re
import shutil
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from kperf import storage_settings
from kperf.core.builds import apply_series, artifacts, gitops, patch_series
from kperf.core.mail import alerts
from kperf.core.models import Alert, KernelBuild, PatchSeries, Submission, SubmissionBuild
from kperf.core.submissions import pipeline
from kperf.core.submissions.pipeline import prepare_submission
from kperf.core.submissions.request import SubmissionRequest
from kperf.core.tasks import sweeper
from kperf_testing.mbox import b4_mbox, message_id

from tests.conftest import Api, git, kperf_cli
from tests.mail_fixtures import Inbox, real_smtp_backend  # noqa: F401 (fixtures)
from tests.series_fixtures import lists_allowed, series_body  # noqa: F401  (fixtures; lists_allowed is autouse)

COVER_ID = message_id("cover")


def break_second(data: bytes) -> bytes:
    """The second patch changed to edit a file the base does not have."""
    text = data.decode().replace("new file mode 100644\n", "")
    text = text.replace("--- /dev/null", "--- a/NOTES").replace("index 0000000..", "index 1234567..")
    return text.replace("@@ -0,0 +1 @@", "@@ -1 +1 @@\n-old").encode()


def test_it_reads_subject_author_cover_and_patches_of_a_b4_mbox(mbox: bytes) -> None:
    parsed = patch_series.parse(mbox, max_bytes=1 << 20)
    assert parsed.subject == "readme and notes"
    assert parsed.author == "Dev <dev@example.org>"
    assert parsed.message_id == COVER_ID and parsed.has_cover
    assert [p.subject for p in parsed.patches] == ["[PATCH 1/2] readme: say more", "[PATCH 2/2] notes: add notes"]
    assert parsed.patches[1].message_id == message_id("p2")
    # git am gets the patches alone: the cover letter has no diff.
    assert b"[PATCH 0/2]" in mbox and b"[PATCH 0/2]" not in parsed.patches_mbox()


def test_without_a_cover_letter_the_answer_goes_to_the_thread_the_patches_answer(
    series_tree: Path, tmp_path: Path
) -> None:
    data = b4_mbox(series_tree, ["master..series"], tmp_path, "readme and notes", "master", cover=False)
    parsed = patch_series.parse(data, max_bytes=1 << 20)
    assert not parsed.has_cover and parsed.message_id == COVER_ID
    assert parsed.subject == "readme: say more"


def test_a_message_id_missing_from_a_patch_is_read_from_its_link_trailer(mbox: bytes) -> None:
    data = mbox.replace(f"Message-Id: <{message_id('p1')}>\n".encode(), b"")
    assert patch_series.parse(data, max_bytes=1 << 20).patches[0].message_id == message_id("p1")


def test_patches_out_of_order_are_applied_in_their_numbered_order(mbox: bytes) -> None:
    cover, first, second = patch_series.split_mbox(mbox)
    parsed = patch_series.parse(cover + second + first, max_bytes=1 << 20)
    assert [p.subject for p in parsed.patches] == ["[PATCH 1/2] readme: say more", "[PATCH 2/2] notes: add notes"]


HTML_ONLY = (
    b"From git@z Thu Jan  1 00:00:00 1970\nSubject: [PATCH] mm: x\nFrom: Dev <dev@example.org>\n"
    b"MIME-Version: 1.0\nContent-Type: text/html; charset=utf-8\n\n<p>diff --git a/x b/x</p>\n"
)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"", "empty"),
        (b"diff --git a/README b/README\n--- a/README\n+++ b/README\n", "bare diff"),
        (b"Subject: hello\nFrom: a@b\n\nbody\n", "without the mbox 'From ' line"),
        (b"\x7fELF\x00\x00", "NUL"),
        (HTML_ONLY, "HTML only"),
        (b"From git@z Thu Jan  1 00:00:00 1970\nSubject: [PATCH 0/1] x\nFrom: a@b.org\n\ncover\n", "no patches"),
        (b"From git@z Thu Jan  1 00:00:00 1970\nSubject: Re: x\nFrom: a@b.org\n\nLGTM\n", "no diff"),
        (b"From git@z Thu Jan  1 00:00:00 1970\nFrom: a@b.org\n\ndiff --git a/x b/x\n", "no Subject"),
        (b"From git@z Thu Jan  1 00:00:00 1970\n" + b"x" * 3000, "limit is 2048 bytes"),
    ],
)
def test_it_refuses_what_is_not_a_series_and_says_what_to_do(data: bytes, says: str) -> None:
    with pytest.raises(patch_series.SeriesError) as exc:
        patch_series.parse(data, max_bytes=2048)
    assert says in str(exc.value)


def test_a_patch_missing_from_the_numbering_is_named(mbox: bytes) -> None:
    cover, _, second = patch_series.split_mbox(mbox)
    with pytest.raises(patch_series.SeriesError, match="patch 1 is missing"):
        patch_series.parse(cover + second, max_bytes=1 << 20)


@pytest.mark.django_db
def test_a_series_is_applied_on_the_base_and_built_like_a_branch(
    alice_api: Api, small_tree: Path, mbox: bytes, qemu_class: Any, settings_dirs: Any
) -> None:
    resp = alice_api.post("/submissions", series_body(small_tree, mbox, mail_to=["list@example.org"]))
    assert resp.status_code == 201, resp.json()
    data = resp.json()
    assert data["kind"] == "series" and data["branch"] == "series: readme and notes"
    assert data["series"]["message_id"] == COVER_ID and data["series"]["patch_count"] == 2
    assert data["mail_to"] == ["list@example.org"]
    ps = PatchSeries.objects.get(submission_id=data["id"])
    # The mbox is kept as it came, checked by its sha256.
    assert artifacts.read_checked(ps.mbox, "mbox") == mbox
    # Before a worker takes it, it says what is left to do: no branch to resolve, a series to apply.
    waiting = alice_api.get(f"/submissions/{data['id']}").json()["waiting_for"]
    assert "apply the series on it" in waiting and "series: readme" not in waiting, waiting

    prepare_submission(data["id"])
    sub = Submission.objects.get(pk=data["id"])
    assert sub.status == Submission.Status.BUILDING, sub.error
    mirror = sub.tree.mirror_path
    assert sub.base_sha == git(small_tree, "rev-parse", "master")
    # Two commits on the base, with the authors and subjects of the mails.
    log = git(mirror, "log", "--format=%an|%s", f"{sub.base_sha}..{sub.head_sha}").splitlines()
    assert log == ["Dev|notes: add notes", "Dev|readme: say more"]
    assert git(mirror, "show", f"{sub.head_sha}:NOTES") == "notes"
    # Under its owner's namespace, which no one else's submission resolves (test_series_privacy.py).
    assert git(mirror, "rev-parse", f"refs/kperf/users/{sub.owner_id}/series/{sub.pk}") == sub.head_sha
    # The tree's own branches are as they were, and survive a refetch with the series ref.
    assert "refs/heads/series" in git(mirror, "for-each-ref", "--format=%(refname)")
    assert git(mirror, "rev-parse", "refs/heads/master") == sub.base_sha
    gitops.update_mirror(str(small_tree), mirror)
    assert git(mirror, "rev-parse", f"refs/kperf/users/{sub.owner_id}/series/{sub.pk}") == sub.head_sha
    head = SubmissionBuild.objects.get(submission=sub, side="head").build
    assert head.sha == sub.head_sha

    # A build machine whose mirror never saw the series makes the same commit from the stored mbox.
    shutil.rmtree(mirror)
    assert apply_series.restore(KernelBuild.objects.get(pk=head.pk))
    assert git(mirror, "rev-parse", f"{sub.head_sha}^{{commit}}") == sub.head_sha


@pytest.mark.django_db
def test_a_series_that_does_not_apply_fails_naming_the_patch_and_gits_error(
    alice_api: Api, small_tree: Path, mbox: bytes, qemu_class: Any, settings_dirs: Any
) -> None:
    sub_id = alice_api.post("/submissions", series_body(small_tree, break_second(mbox))).json()["id"]
    prepare_submission(sub_id)
    sub = Submission.objects.get(pk=sub_id)
    assert sub.status == Submission.Status.FAILED
    assert "patch 2/2 '[PATCH 2/2] notes: add notes' does not apply on master" in sub.error
    assert "NOTES" in sub.error and "hint:" not in sub.error
    assert PatchSeries.objects.get(submission=sub).failed_patch == 2
    assert not SubmissionBuild.objects.filter(submission=sub).exists()
    assert not git(sub.tree.mirror_path, "for-each-ref", "refs/kperf/")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"mbox": "not a mail\n"}, "mbox", "not an mbox"),
        ({"mail_to": ["not-an-address"]}, "mail_to", "not an e-mail address"),
        ({"branch": "feature"}, "mbox", "not both"),
        ({"mbox_b64": base64.b64encode(b"x").decode()}, "mbox", "mbox (text) or mbox_b64, not both"),
        ({"mbox": None, "mbox_b64": "not base64!"}, "mbox_b64", "mbox_b64 is not base64"),
    ],
)
def test_a_bad_series_submission_gets_a_400_and_stores_nothing(
    alice_api: Api,
    small_tree: Path,
    mbox: bytes,
    qemu_class: Any,
    settings_dirs: Any,
    change: dict[str, Any],
    field: str,
    says: str,
) -> None:
    body = {k: v for k, v in {**series_body(small_tree, mbox), **change}.items() if v is not None}
    resp = alice_api.post("/submissions", body)
    assert resp.status_code == 400
    assert resp.json()["field"] == field and says in resp.json()["detail"]
    assert not Submission.objects.exists() and not PatchSeries.objects.exists()


@pytest.mark.django_db
def test_the_answer_goes_to_the_chosen_addresses_in_reply_to_the_cover_letter(
    smtp: Inbox,
    alice_api: Api,
    small_tree: Path,
    mbox: bytes,
    qemu_class: Any,
    settings_dirs: Any,
) -> None:
    body = series_body(small_tree, break_second(mbox), mail_to=["linux-mm@example.org"])
    sub_id = alice_api.post("/submissions", body).json()["id"]
    prepare_submission(sub_id)  # the damaged patch does not apply: the submission fails and answers
    assert Submission.objects.get(pk=sub_id).status == Submission.Status.FAILED
    assert alerts.send_pending() == 1
    [(to, msg)] = smtp.messages
    assert sorted(to) == ["alice@example.org", "linux-mm@example.org"]
    assert msg["In-Reply-To"] == f"<{COVER_ID}>" and msg["References"] == f"<{COVER_ID}>"
    assert "series: readme and notes" in msg["Subject"]
    assert "patch 2/2" in msg.get_content()
    assert Alert.objects.get().in_reply_to == COVER_ID


def latin1(mbox: bytes) -> bytes:
    """The series with an 8-bit latin-1 name in the first patch's message, as older mailers send it."""
    data = mbox.replace(b"\nLink: https://lore", b"\nReported-by: Ren\xe9 <rene@example.org>\nLink: https://lore", 1)
    assert data != mbox
    return data


@pytest.mark.django_db
def test_the_cli_sends_the_mbox_bytes_as_they_are_so_a_latin1_series_is_taken_and_applied(
    live_server: Any, alice_api: Api, small_tree: Path, mbox: bytes, qemu_class: Any, settings_dirs: Any, tmp_path: Path
) -> None:
    path = tmp_path / "latin1.mbx"
    path.write_bytes(latin1(mbox))
    out = kperf_cli(live_server.url, alice_api, tmp_path / "main.json")(
        "submit", "--mbox", str(path), "--tree", str(small_tree), "--base", "master"
    )
    assert out.returncode == 0, out.stderr
    sub = Submission.objects.get()
    assert artifacts.read_checked(PatchSeries.objects.get(submission=sub).mbox, "mbox") == latin1(mbox)
    prepare_submission(sub.pk)
    sub.refresh_from_db()
    assert sub.status == Submission.Status.BUILDING, sub.error


def test_the_cli_refuses_an_unreadable_mbox_and_a_branch_with_it_before_sending_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kperf.cli import main

    # Nothing listens there: the file is refused before any request.
    monkeypatch.setenv("KPERF_SERVER", "http://127.0.0.1:9")
    monkeypatch.setenv("KPERF_TOKEN", "t")
    monkeypatch.setenv("KPERF_CONFIG", str(tmp_path / "main.json"))
    assert main.main(["submit", "--mbox", str(tmp_path / "missing.mbx"), "--base", "v6.1"]) == 2
    assert "cannot read the mbox" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main.main(["submit", "--mbox", str(tmp_path / "x.mbx"), "--branch", "x", "--base", "v6.1"])
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.django_db
def test_the_api_takes_the_mbox_bytes_in_base64(
    alice_api: Api, small_tree: Path, mbox: bytes, qemu_class: Any, settings_dirs: Any
) -> None:
    body = series_body(small_tree, mbox)
    del body["mbox"]
    resp = alice_api.post("/submissions", body | {"mbox_b64": base64.b64encode(latin1(mbox)).decode()})
    assert resp.status_code == 201, resp.content
    ps = PatchSeries.objects.get(submission_id=resp.json()["id"])
    assert ps.patch_count == 2 and artifacts.read_checked(ps.mbox, "mbox") == latin1(mbox)


@pytest.mark.django_db
def test_the_web_form_takes_the_mbox_as_a_file_and_the_page_shows_the_series(
    alice: Any, small_tree: Path, mbox: bytes, qemu_class: Any, settings_dirs: Any, django_user_model: Any
) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.test import Client

    browser = Client()
    assert browser.login(username="alice", password="alice-password-1")
    fields = {"tree": str(small_tree), "branch": "", "base": "master", "benchmarks": ["spawn"], "grids": ["quick"]}
    fields |= {"arches": ["x86_64"], "mail_to": "list@example.org, other@example.org"}
    resp = browser.post("/submissions/new", fields | {"mbox": SimpleUploadedFile("v2.mbx", mbox)})
    sub = Submission.objects.get()
    assert resp.status_code == 302 and sub.kind == Submission.Kind.SERIES
    assert sub.mail_to == ["list@example.org", "other@example.org"]
    page = browser.get(resp["Location"]).content.decode()
    assert "readme and notes" in page and f"&lt;{COVER_ID}&gt;" in page and "[PATCH 2/2] notes: add notes" in page

    # A file that is no mbox is refused next to its field, and nothing is stored.
    resp = browser.post("/submissions/new", fields | {"mbox": SimpleUploadedFile("x.html", b"<html></html>")})
    assert resp.status_code == 200 and "not an mbox" in resp.content.decode()
    assert Submission.objects.count() == 1

    # Staff see the series as kperf read it in the admin, read-only.
    staff = Client()
    staff.force_login(django_user_model.objects.create_superuser("root", "root@example.org"))
    listing = staff.get("/admin/core/patchseries/")
    assert listing.status_code == 200 and "readme and notes" in listing.content.decode()
    assert staff.get("/admin/core/patchseries/add/").status_code == 403


def without_dates(data: bytes) -> bytes:
    return re.sub(rb"(?m)^Date: .*\n", b"", data)


def mirror_of(tree: Path, root: Path) -> Path:
    mirror = root / "mirror.git"
    gitops.update_mirror(str(tree), mirror)
    return mirror


@pytest.mark.parametrize("cover_date", [True, False])
def test_patches_without_a_date_get_the_series_date_so_every_apply_gives_the_same_sha(
    series_tree: Path, mbox: bytes, tmp_path: Path, settings_dirs: Any, cover_date: bool
) -> None:
    cover, *patches = patch_series.split_mbox(mbox)
    date = "Tue, 14 Nov 2023 10:00:00 +0100"
    cover = re.sub(rb"(?m)^Date: .*$", f"Date: {date}".encode(), cover) if cover_date else without_dates(cover)
    parsed = patch_series.parse(cover + without_dates(b"".join(patches)), max_bytes=1 << 20)
    base = git(series_tree, "rev-parse", "master")
    # git am would take the clock's time for a patch without a Date: header.
    shas = [
        apply_series.am(mirror_of(series_tree, tmp_path / f"m{i}"), base, "master", parsed, "refs/kperf/x")
        for i in (1, 2)
    ]
    assert shas[0] == shas[1]
    dates = git(tmp_path / "m1" / "mirror.git", "log", "--format=%aD|%cD", f"{base}..{shas[0]}").splitlines()
    expected = date if cover_date else "Thu, 1 Jan 1970 00:00:00 +0000"
    assert dates == [f"{expected}|{expected}"] * 2


def test_the_series_is_applied_in_a_checkout_of_the_files_it_touches_and_gives_the_full_checkouts_sha(
    series_tree: Path, mbox: bytes, tmp_path: Path, settings_dirs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed = patch_series.parse(mbox, max_bytes=1 << 20)
    # A kernel checkout is a gigabyte: the scratch tree holds the two files the diffs name.
    assert apply_series.touched_paths(parsed) == ["NOTES", "README"]
    base = git(series_tree, "rev-parse", "master")
    sparse = apply_series.am(mirror_of(series_tree, tmp_path / "m1"), base, "master", parsed, "refs/kperf/x")
    monkeypatch.setattr(apply_series, "touched_paths", lambda parsed: None)
    full = apply_series.am(mirror_of(series_tree, tmp_path / "m2"), base, "master", parsed, "refs/kperf/x")
    assert sparse == full
    assert git(tmp_path / "m1" / "mirror.git", "ls-tree", "-r", "--name-only", sparse) == git(
        series_tree, "ls-tree", "-r", "--name-only", "series"
    )

    # A file missing from the checkout is no patch that does not apply: git am works on the
    # index, which has every file (and a failure in a sparse tree is tried again in a full one).
    monkeypatch.setattr(apply_series, "touched_paths", lambda parsed: ["Makefile"])
    again = apply_series.am(mirror_of(series_tree, tmp_path / "m3"), base, "master", parsed, "refs/kperf/x")
    assert again == full


def test_a_date_git_cannot_read_is_refused_naming_the_patch(mbox: bytes) -> None:
    data = re.sub(rb"(?m)^Date: .*$", b"Date: next tuesday", mbox)
    with pytest.raises(patch_series.SeriesError, match=r"message 2 .* has a Date: header that cannot be read"):
        patch_series.parse(data, max_bytes=1 << 20)


@pytest.mark.django_db
def test_an_applied_series_ref_is_reused_and_never_moved(
    alice_api: Api, small_tree: Path, mbox: bytes, qemu_class: Any, settings_dirs: Any
) -> None:
    sub_id = alice_api.post("/submissions", series_body(small_tree, mbox)).json()["id"]
    prepare_submission(sub_id)
    sub = Submission.objects.get(pk=sub_id)
    mirror, ref = sub.tree.mirror_path, f"refs/kperf/users/{sub.owner_id}/series/{sub_id}"
    # A worker re-driven after the apply (it died before the row moved on) takes the commits that are there.
    assert apply_series.apply(sub) == sub.head_sha
    # A ref that names something else is not moved to what applying gives now: a build may name it.
    git(mirror, "update-ref", ref, sub.base_sha)
    with pytest.raises(gitops.GitError, match="kperf does not move it"):
        apply_series.apply(sub)
    assert git(mirror, "rev-parse", ref) == sub.base_sha


@pytest.mark.django_db
def test_control_characters_of_encoded_headers_are_dropped_before_they_are_stored(
    alice_api: Api, small_tree: Path, mbox: bytes, qemu_class: Any, settings_dirs: Any
) -> None:
    # PostgreSQL refuses U+0000 in text and jsonb: this was a 500, and an mbox stored that no row named.
    data = mbox.replace(
        b"Subject: [PATCH 0/2] readme and notes", b"Subject: [PATCH 0/2] =?utf-8?q?readme=00_and_notes?="
    )
    data = data.replace(
        b"Subject: [PATCH 1/2] readme: say more", b"Subject: [PATCH 1/2] =?utf-8?q?readme=3A_say=07_more?="
    )
    data = data.replace(b"From: Dev <", b"From: =?utf-8?q?D=00ev=09X?= <")
    resp = alice_api.post("/submissions", series_body(small_tree, data))
    assert resp.status_code == 201, resp.content
    ps = PatchSeries.objects.get(submission_id=resp.json()["id"])
    assert ps.subject == "readme and notes" and ps.author == "Dev X <dev@example.org>"
    assert ps.patches[0]["subject"] == "[PATCH 1/2] readme: say more"


@pytest.mark.django_db
def test_a_series_postgresql_refuses_leaves_no_mbox_in_the_storage(
    alice: Any, small_tree: Path, mbox: bytes, qemu_class: Any, settings_dirs: Any, tmp_path: Path
) -> None:
    from django.db import IntegrityError, connection

    with connection.cursor() as cur:
        cur.execute("ALTER TABLE core_patchseries ADD CONSTRAINT refuse_all CHECK (false) NOT VALID")

    # A storage of its own, empty: assigning STORAGES makes Django drop the storages it had opened.
    settings_dirs.STORAGES = storage_settings.storages(tmp_path / "artifacts")
    req = SubmissionRequest(tree=str(small_tree), base="master", mbox=mbox)
    with pytest.raises(IntegrityError):
        pipeline.create_submission(alice, req)
    assert not list((tmp_path / "artifacts").rglob("*.mbox"))


def queued_series(api: Api, tree: Path, mbox: bytes) -> int:
    sub_id: int = api.post("/submissions", series_body(tree, mbox)).json()["id"]
    return sub_id


@pytest.mark.django_db
def test_an_infrastructure_error_is_tried_again_a_bounded_number_of_times_then_fails_saying_so(
    alice_api: Api, small_tree: Path, mbox: bytes, qemu_class: Any, settings_dirs: Any
) -> None:
    settings_dirs.KPERF_SERIES_APPLY_ATTEMPTS = 3
    # The scratch directory cannot be made: as a full disk, it fails every time.
    Path(settings_dirs.KPERF_BUILD_ROOT).mkdir(parents=True)
    (Path(settings_dirs.KPERF_BUILD_ROOT) / "series").write_text("not a directory")
    sub_id = queued_series(alice_api, small_tree, mbox)
    for attempt in (1, 2):
        prepare_submission(sub_id)
        sub = Submission.objects.get(pk=sub_id)
        assert sub.status == Submission.Status.QUEUED and not sub.error
        assert PatchSeries.objects.get(submission=sub).apply_attempts == attempt
    prepare_submission(sub_id)
    sub = Submission.objects.get(pk=sub_id)
    assert sub.status == Submission.Status.FAILED
    assert "in 3 attempts" in sub.error and "kperf's infrastructure, not the series" in sub.error
    assert "Error" in sub.error  # what failed, for the operator
    assert PatchSeries.objects.get(submission=sub).failed_patch is None


@pytest.mark.django_db
def test_a_series_whose_workers_were_all_killed_fails_instead_of_being_sent_again(
    alice_api: Api, small_tree: Path, mbox: bytes, qemu_class: Any, settings_dirs: Any
) -> None:
    settings_dirs.KPERF_SERIES_APPLY_ATTEMPTS = 2
    sub_id = queued_series(alice_api, small_tree, mbox)
    PatchSeries.objects.filter(submission_id=sub_id).update(apply_attempts=2)  # both began, neither finished
    prepare_submission(sub_id)
    sub = Submission.objects.get(pk=sub_id)
    assert sub.status == Submission.Status.FAILED
    assert "2 workers began and none finished" in sub.error and "infrastructure" in sub.error


@pytest.mark.django_db
def test_the_sweeper_gives_a_series_being_applied_its_time_limit_and_removes_killed_checkouts(
    alice_api: Api, small_tree: Path, mbox: bytes, qemu_class: Any, settings_dirs: Any
) -> None:
    settings_dirs.KPERF_REDRIVE_AFTER_SECONDS = 1
    settings_dirs.KPERF_GIT_TIMEOUT = 60
    sub_id = queued_series(alice_api, small_tree, mbox)
    PatchSeries.objects.filter(submission_id=sub_id).update(apply_attempts=1)
    Submission.objects.filter(pk=sub_id).update(updated=timezone.now() - timedelta(seconds=120))
    assert "submissions re-prepared" not in sweeper.redrive()  # a worker may still be applying it
    Submission.objects.filter(pk=sub_id).update(updated=timezone.now() - timedelta(seconds=4 * 60 + 200))
    assert sweeper.redrive()["submissions re-prepared"] == 1

    root = Path(settings_dirs.KPERF_BUILD_ROOT) / "series"
    old, new = root / "am-old", root / "am-new"
    for d in (old, new):
        (d / "tree").mkdir(parents=True)
    hours_ago = time.time() - 2 * 3600
    os.utime(old, (hours_ago, hours_ago))
    assert sweeper.redrive()["series scratch repositories removed"] == 1
    assert not old.exists() and new.exists()
