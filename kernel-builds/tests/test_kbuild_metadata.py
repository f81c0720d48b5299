"""A build's outcome comes from tuxmake's metadata.json, read as carefully as any output of the sandbox."""

from __future__ import annotations

import json
from pathlib import Path

from kperf_kbuild import logscan
from kperf_kbuild.logscan import read_target_status


def metadata(targets: object) -> str:
    # The shape tuxmake writes (tuxmake.build.Build.collect_metadata), cut to what kperf reads.
    return json.dumps({"results": {"status": "FAIL", "targets": targets, "artifacts": {}, "errors": 1}})


def test_each_targets_status_is_read_from_tuxmakes_record(tmp_path: Path) -> None:
    (tmp_path / "metadata.json").write_text(
        metadata(
            {
                "config": {"status": "PASS", "duration": 4.2},
                "kernel": {"status": "FAIL", "duration": 80.0},
                "modules": {"status": "SKIP", "duration": 0},
            }
        )
    )
    assert read_target_status(tmp_path) == {"config": "PASS", "kernel": "FAIL", "modules": "SKIP"}


def test_a_record_that_is_not_tuxmakes_counts_as_none(tmp_path: Path) -> None:
    path = tmp_path / "metadata.json"
    assert read_target_status(tmp_path) is None  # tuxmake stopped before writing its results
    for text in ("{", "[]", json.dumps({"build": {}}), json.dumps({"results": {"targets": ["kernel"]}})):
        path.write_text(text)
        assert read_target_status(tmp_path) is None, text
    # Statuses tuxmake never writes are left out, not believed.
    path.write_text(metadata({"kernel": {"status": "OK"}, "config": "PASS", "modules": {"status": "PASS"}}))
    assert read_target_status(tmp_path) == {"modules": "PASS"}
    # Far larger than tuxmake writes: not read at all.
    path.write_text(metadata({"kernel": {"status": "PASS"}}) + " " * logscan.METADATA_MAX_BYTES)
    assert read_target_status(tmp_path) is None


def test_a_planted_link_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(metadata({"kernel": {"status": "PASS"}}))
    out = tmp_path / "out"
    out.mkdir()
    (out / "metadata.json").symlink_to(elsewhere)
    assert read_target_status(out) is None
