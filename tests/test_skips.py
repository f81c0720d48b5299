"""A skip for a missing host feature fails the run (kperf_testing.skips), but for the reasons
docs/development.md lists, and for everything when KPERF_TEST_ALLOW_SKIPS=1."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from kperf_testing import skips

ROOT = Path(__file__).resolve().parent.parent

TESTS = """
import pytest

def test_needs_a_tool_the_machine_lacks():
    pytest.skip("needs frobnicate (apt-get install frobnicate)")

@pytest.mark.skipif(True, reason="needs cpio")
def test_skipped_by_a_mark():
    pass

def test_needs_kvm():
    pytest.skip("no KVM here that --qemu-accel auto would use")

@pytest.mark.xfail(reason="known")
def test_expected_to_fail():
    assert False

def test_passes():
    pass
"""


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    clean = {k: v for k, v in os.environ.items() if k not in ("KPERF_TEST_ALLOW_SKIPS", "PYTEST_ADDOPTS")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "kperf_testing.skips", "-rA", "test_probe.py"],
        cwd=tmp_path,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _summary(out: str) -> str:
    return out.strip().splitlines()[-1]


def test_a_skip_for_a_missing_tool_fails_and_says_what_to_do(tmp_path: Path) -> None:
    run = _run(tmp_path)
    assert run.returncode == 1, run.stdout
    summary = _summary(run.stdout)
    # pytest.skip in the test fails it; a skipif mark fails its setup, which pytest counts as an error.
    assert re.search(r"\b1 failed\b", summary) and re.search(r"\b1 error\b", summary), summary
    assert re.search(r"\b1 skipped\b", summary), summary
    assert "1 passed" in summary and "1 xfailed" in summary, summary
    assert "needs frobnicate" in run.stdout and "needs cpio" in run.stdout, run.stdout
    assert ".ci/run installs it" in run.stdout
    assert "KPERF_TEST_ALLOW_SKIPS=1" in run.stdout


def test_every_skip_is_a_skip_again_where_allowed(tmp_path: Path) -> None:
    run = _run(tmp_path, KPERF_TEST_ALLOW_SKIPS="1")
    assert run.returncode == 0, run.stdout
    assert re.search(r"\b3 skipped\b", _summary(run.stdout)), run.stdout


def test_each_allowed_reason_is_listed_in_the_docs() -> None:
    docs = (ROOT / "docs" / "development.md").read_text()
    for pattern, why in skips.ALLOWED.items():
        assert why in docs, f"docs/development.md, 'Skips', does not say why {pattern!r} may skip"
