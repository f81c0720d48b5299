"""The generated dashboards: up to date, complete, and all on the provisioned data source."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard
from grafana_sql import DASHBOARDS, dashboards, panel

ROOT = DASHBOARDS.parent

BRANCH_PANELS = {
    "Branch": "table",
    "${metric:text} per commit ($benchmark on ${machine_class:text}, $profile profile, $clock clock)": "trend",
    "Change points of ${metric:text}": "table",
    "Commits": "table",
    "Every change point of the branch": "table",
}
LAB_PANELS = {
    "Jobs waiting and running per machine class": "barchart",
    "Queue per machine class": "table",
    "Runners": "table",
    "Calibrations per runner": "timeseries",
    "Kernel build durations": "timeseries",
    "Submissions per status": "barchart",
    "Alerts waiting": "stat",
    "Alerts outbox: pending and failed": "table",
    "Tracked branches": "table",
}


def provisioned_datasource() -> dict[str, Any]:
    data = yaml.safe_load((DASHBOARDS / "provisioning" / "datasources" / "kperf.yaml").read_text())
    (ds,) = data["datasources"]
    result: dict[str, Any] = ds
    return result


def build(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(folder / "build.py"), *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_committed_files_are_what_build_py_writes() -> None:
    result = build(DASHBOARDS, "--check")
    assert result.returncode == 0, result.stderr


def test_check_fails_on_a_stale_file_and_a_build_fixes_it(tmp_path: Path) -> None:
    copy = tmp_path / "dashboards"
    shutil.copytree(DASHBOARDS, copy, ignore=shutil.ignore_patterns("tests", "__pycache__"))
    stale = copy / "json" / "kperf-lab.json"
    stale.write_text(stale.read_text().replace("Runners", "Runnerz"))
    (copy / "grafana-reader.sql").unlink()
    result = build(copy, "--check")
    assert result.returncode == 1
    assert "json/kperf-lab.json" in result.stderr and "grafana-reader.sql" in result.stderr
    assert "kperf-branch.json" not in result.stderr
    assert build(copy).returncode == 0
    assert build(copy, "--check").returncode == 0
    assert stale.read_text() == (DASHBOARDS / "json" / "kperf-lab.json").read_text()


def test_the_two_dashboards_have_their_panels_and_variables() -> None:
    boards = dashboards()
    assert set(boards) == {"kperf-branch", "kperf-lab"}
    branch, lab = boards["kperf-branch"], boards["kperf-lab"]
    assert branch["title"] == "kperf: tracked branch" and lab["title"] == "kperf: lab"
    assert {p["title"]: p["type"] for p in branch["panels"]} == BRANCH_PANELS
    assert {p["title"]: p["type"] for p in lab["panels"]} == LAB_PANELS

    variables = branch["templating"]["list"]
    assert [v["name"] for v in variables] == ["branch", "machine_class", "clock", "profile", "benchmark", "metric"]
    # Chained: each variable's query narrows by the ones before it.
    for i, v in enumerate(variables):
        assert v["type"] == "query" and not v["multi"] and not v["includeAll"]
        used = set(re.findall(r"\$(\w+)", v["query"]))
        assert used == {p["name"] for p in variables[:i]}, (v["name"], used)
    assert not lab.get("templating", {}).get("list")

    trend = panel(branch, "${metric:text} per commit")
    assert trend["options"]["xField"] == "position"
    marked = [o for o in trend["fieldConfig"]["overrides"] if o["matcher"]["options"] == "change point"]
    assert marked and {"id": "custom.drawStyle", "value": "points"} in marked[0]["properties"]


def test_the_sdk_reads_the_json_back() -> None:
    """Grafana's schema, as the SDK models it, accepts every field: parsing and
    writing again changes nothing but the defaults the SDK fills in."""
    register_default_plugins()
    for raw in dashboards().values():
        again = json.loads(json.dumps(Dashboard.from_json(raw), cls=JSONEncoder))
        for p in (*raw["panels"], *again["panels"]):
            p.get("fieldConfig", {}).pop("defaults", None)
        assert again == raw


def test_every_panel_and_variable_reads_the_provisioned_datasource() -> None:
    ds = provisioned_datasource()
    ref = {"type": ds["type"], "uid": ds["uid"]}
    assert ds["type"] == "grafana-postgresql-datasource"
    for board in dashboards().values():
        for v in board.get("templating", {}).get("list", []):
            assert v["datasource"] == ref, v["name"]
        ids = [p["id"] for p in board["panels"]]
        assert len(set(ids)) == len(ids)
        for p in board["panels"]:
            assert p["datasource"] == ref, p["title"]
            assert p["targets"], p["title"]
            for t in p["targets"]:
                assert t["datasource"] == ref, p["title"]
                assert t["rawQuery"] and t["editorMode"] == "code" and t["format"] in ("table", "time_series")
                sql = t["rawSql"]
                # One read-only statement (the database tests run each one in a
                # read-only transaction as the reader role).
                assert re.match(r"(SELECT|WITH)\b", sql) and ";" not in sql, p["title"]


def test_panels_sit_on_the_grid_without_overlapping() -> None:
    for board in dashboards().values():
        taken: set[tuple[int, int]] = set()
        for p in board["panels"]:
            g = p["gridPos"]
            assert g["x"] + g["w"] <= 24 and g["w"] > 0 and g["h"] > 0, p["title"]
            cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
            assert not cells & taken, p["title"]
            taken |= cells


def test_time_macros_only_where_the_x_axis_is_time() -> None:
    boards = dashboards()
    for p in boards["kperf-branch"]["panels"]:
        assert "$__" not in p["targets"][0]["rawSql"], p["title"]
    for v in boards["kperf-branch"]["templating"]["list"]:
        assert "$__" not in v["query"]
    timed = {p["title"] for p in boards["kperf-lab"]["panels"] if "$__" in p["targets"][0]["rawSql"]}
    assert timed == {"Calibrations per runner", "Kernel build durations", "Submissions per status"}


def test_the_provisioning_files_fit_together() -> None:
    ds = provisioned_datasource()
    # Credentials and address come from Grafana's environment, never the file.
    for key in ("url", "user"):
        assert re.fullmatch(r"\$\{KPERF_GRAFANA_DB_\w+\}", ds[key]), key
    assert re.fullmatch(r"\$\{KPERF_GRAFANA_DB_\w+\}", ds["secureJsonData"]["password"])
    assert re.fullmatch(r"\$\{KPERF_GRAFANA_DB_\w+\}", ds["jsonData"]["database"])
    assert not ds["editable"]

    providers = yaml.safe_load((DASHBOARDS / "provisioning" / "dashboards" / "kperf.yaml").read_text())
    (provider,) = providers["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/")
    assert provider["allowUiUpdates"] is False  # the JSON is generated: changes go into build.py

    reader = (DASHBOARDS / "grafana-reader.sql").read_text()
    assert "GRANT SELECT ON core_sample TO kperf_grafana;" in reader
    for secret in ("auth_user", "core_apitoken", "django_session"):
        assert secret not in reader
