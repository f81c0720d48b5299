"""Patch series as mbox: read, refused with a reason, applied with git am, answered in their thread."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from kperf.core import alerts, artifacts, series, series_git
from kperf.core.models import Alert, KernelBuild, PatchSeries, Submission, SubmissionBuild
from kperf.core.workflow import prepare_submission
from kperf.testing.mbox import b4_mbox, message_id

from .conftest import Api, git
from .test_alerts import Inbox, real_smtp_backend, smtp  # noqa: F401 (fixtures)

COVER_ID = message_id("cover")


@pytest.fixture
def series_tree(small_tree: Path) -> Path:
    """small_tree with a branch `series` of two commits on master: one edits README, one adds NOTES."""
    git(small_tree, "checkout", "-q", "-b", "series", "master")
    (small_tree / "README").write_text("base\nmore\n")
    git(small_tree, "commit", "-q", "-am", "readme: say more")
    (small_tree / "NOTES").write_text("notes\n")
    git(small_tree, "add", "NOTES")
    git(small_tree, "commit", "-q", "-m", "notes: add notes")
    git(small_tree, "checkout", "-q", "master")
    return small_tree


@pytest.fixture
def mbox(series_tree: Path, tmp_path: Path) -> bytes:
    return b4_mbox(series_tree, ["master..series"], tmp_path / "patches", "readme and notes", "master")


def break_second(data: bytes) -> bytes:
    """The second patch changed to edit a file the base does not have."""
    text = data.decode().replace("new file mode 100644\n", "")
    text = text.replace("--- /dev/null", "--- a/NOTES").replace("index 0000000..", "index 1234567..")
    return text.replace("@@ -0,0 +1 @@", "@@ -1 +1 @@\n-old").encode()


def series_body(tree: Path, mbox: bytes, **extra: Any) -> dict[str, Any]:
    return {"tree": str(tree), "mbox": mbox.decode(), "base": "master", "benchmarks": ["spawn"], **extra}


def test_it_reads_subject_author_cover_and_patches_of_a_b4_mbox(mbox: bytes) -> None:
    parsed = series.parse(mbox, max_bytes=1 << 20)
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
    parsed = series.parse(data, max_bytes=1 << 20)
    assert not parsed.has_cover and parsed.message_id == COVER_ID
    assert parsed.subject == "readme: say more"


def test_a_message_id_missing_from_a_patch_is_read_from_its_link_trailer(mbox: bytes) -> None:
    data = mbox.replace(f"Message-Id: <{message_id('p1')}>\n".encode(), b"")
    assert series.parse(data, max_bytes=1 << 20).patches[0].message_id == message_id("p1")


def test_patches_out_of_order_are_applied_in_their_numbered_order(mbox: bytes) -> None:
    cover, first, second = series.split_mbox(mbox)
    parsed = series.parse(cover + second + first, max_bytes=1 << 20)
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
    with pytest.raises(series.SeriesError) as exc:
        series.parse(data, max_bytes=2048)
    assert says in str(exc.value)


def test_a_patch_missing_from_the_numbering_is_named(mbox: bytes) -> None:
    cover, _, second = series.split_mbox(mbox)
    with pytest.raises(series.SeriesError, match="patch 1 is missing"):
        series.parse(cover + second, max_bytes=1 << 20)


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
    assert git(mirror, "rev-parse", f"refs/kperf/series/{sub.pk}") == sub.head_sha
    # The tree's own branches are as they were, and survive a refetch with the series ref.
    assert "refs/heads/series" in git(mirror, "for-each-ref", "--format=%(refname)")
    assert git(mirror, "rev-parse", "refs/heads/master") == sub.base_sha
    from kperf.core import gitops

    gitops.update_mirror(str(small_tree), mirror)
    assert git(mirror, "rev-parse", f"refs/kperf/series/{sub.pk}") == sub.head_sha
    head = SubmissionBuild.objects.get(submission=sub, side="head").build
    assert head.sha == sub.head_sha

    # A build machine whose mirror never saw the series makes the same commit from the stored mbox.
    shutil.rmtree(mirror)
    assert series_git.restore(KernelBuild.objects.get(pk=head.pk))
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
    resp = alice_api.post("/submissions", {**series_body(small_tree, mbox), **change})
    assert resp.status_code == 400
    assert resp.json()["field"] == field and says in resp.json()["detail"]
    assert not Submission.objects.exists() and not PatchSeries.objects.exists()


@pytest.mark.django_db
def test_the_answer_goes_to_the_chosen_addresses_in_reply_to_the_cover_letter(
    smtp: Inbox,  # noqa: F811
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


def test_the_cli_refuses_an_mbox_that_is_not_utf8_before_sending_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kperf import cli

    # Nothing listens there: the file is refused before any request.
    monkeypatch.setenv("KPERF_SERVER", "http://127.0.0.1:9")
    monkeypatch.setenv("KPERF_TOKEN", "t")
    monkeypatch.setenv("KPERF_CONFIG", str(tmp_path / "cli.json"))
    latin1 = tmp_path / "latin1.mbox"
    latin1.write_bytes(b"From git@z Thu Jan  1 00:00:00 1970\nSubject: [PATCH] caf\xe9\n")
    assert cli.main(["submit", "--mbox", str(latin1), "--base", "v6.1"]) == 2
    assert "not UTF-8 text" in capsys.readouterr().err
    assert cli.main(["submit", "--mbox", str(tmp_path / "missing.mbx"), "--base", "v6.1"]) == 2
    assert "cannot read the mbox" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["submit", "--mbox", str(latin1), "--branch", "x", "--base", "v6.1"])
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.django_db
def test_the_web_form_takes_the_mbox_as_a_file_and_the_page_shows_the_series(
    alice: Any, small_tree: Path, mbox: bytes, qemu_class: Any, settings_dirs: Any
) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.test import Client

    browser = Client()
    assert browser.login(username="alice", password="alice-password-1")
    fields = {"tree": str(small_tree), "branch": "", "base": "master", "benchmarks": ["spawn"], "grid": "quick"}
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
