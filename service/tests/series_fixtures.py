"""Shared test scenarios, moved out of test_patch_series.py so no test module imports another."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kperf_testing.mbox import b4_mbox

from tests.conftest import git
from tests.mail_fixtures import Inbox, real_smtp_backend, smtp  # noqa: F401 (fixtures)


@pytest.fixture(autouse=True)
def lists_allowed(settings: Any) -> None:
    """The lists these series' answers go to are ones the operator allows (docs/submitting.md)."""
    settings.KPERF_MAIL_ALLOWED_RECIPIENTS = ["list@example.org", "other@example.org", "linux-mm@example.org"]


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


def series_body(tree: Path, mbox: bytes, **extra: Any) -> dict[str, Any]:
    return {"tree": str(tree), "mbox": mbox.decode(), "base": "master", "benchmarks": ["spawn"], **extra}
