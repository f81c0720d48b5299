"""What kperf's two dashboards share: the data source, SQL queries as
Grafana's PostgreSQL data source takes them, variables, layout, colours."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.models import dashboard as dm

HERE = Path(__file__).resolve().parent
JSON_DIR = HERE / "json"
READER_SQL = HERE / "grafana-reader.sql"

DATASOURCE_TYPE = "grafana-postgresql-datasource"
DATASOURCE_UID = "kperf-postgres"
DATASOURCE = dm.DataSourceRef(type_val=DATASOURCE_TYPE, uid=DATASOURCE_UID)
BRANCH_UID = "kperf-branch"
LAB_UID = "kperf-lab"

# The role the data source should log in as: SELECT on these tables only, so
# Grafana's users (who can type any SQL in Explore) cannot write, nor read
# password hashes, sessions or API token hashes.
READER_ROLE = "kperf_grafana"
READ_TABLES = (
    "core_alert",
    "core_bootrecord",
    "core_branchcommit",
    "core_changepoint",
    "core_job",
    "core_kernelbuild",
    "core_machineclass",
    "core_metricdef",
    "core_runner",
    "core_runnerevent",
    "core_sample",
    "core_submission",
    "core_trackedbranch",
    "core_tree",
    "core_triage",
)

# Submission.Status in the order a submission goes through them (checked
# against the model by the tests).
SUBMISSION_STATUSES = ("queued", "building", "testing", "analysing", "done", "failed")


def sql(text: str) -> str:
    return textwrap.dedent(text).strip()


class SqlQuery(cogvariants.Dataquery):
    """A query of Grafana's PostgreSQL data source, in code mode.

    The SDK has no model for the SQL data sources, so this is the JSON the
    data source's own query editor saves."""

    def __init__(self, ref_id: str, raw_sql: str, format_val: str) -> None:
        self.ref_id = ref_id
        self.raw_sql = raw_sql
        self.format_val = format_val

    def to_json(self) -> dict[str, object]:
        return {
            "datasource": DATASOURCE.to_json(),
            "editorMode": "code",
            "format": self.format_val,
            "rawQuery": True,
            "rawSql": self.raw_sql,
            "refId": self.ref_id,
        }


class Sql(cogbuilder.Builder[SqlQuery]):
    def __init__(self, raw_sql: str, ref_id: str = "A", format_val: str = "table") -> None:
        self._internal = SqlQuery(ref_id, raw_sql, format_val)

    def build(self) -> SqlQuery:
        return self._internal


def by_name(name: str, props: dict[str, object]) -> tuple[dm.MatcherConfig, list[dm.DynamicConfigValue]]:
    """A field override for one column, for `.with_override(*by_name(...))`; property ids
    as in Grafana's JSON (`unit`, `custom.width`...)."""
    return dm.MatcherConfig(id_val="byName", options=name), [
        dm.DynamicConfigValue(id_val=k, value=v) for k, v in props.items()
    ]


def colored_words(colors: dict[str, str]) -> dict[str, object]:
    """Properties that colour a text column by its value (statuses, directions)."""
    mapping = dm.ValueMap(
        options={word: dm.ValueMappingResult(color=color, index=i) for i, (word, color) in enumerate(colors.items())}
    )
    return {"mappings": [mapping], "custom.cellOptions": {"type": "color-text"}}


def variable(name: str, label: str, query: str) -> dashboard.QueryVariable:
    return (
        dashboard.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(dm.VariableRefresh.ON_DASHBOARD_LOAD)
        .sort(dm.VariableSort.DISABLED)
        .multi(False)
        .include_all(False)
        .allow_custom_value(False)
    )


def kperf_dashboard(title: str, uid: str, description: str) -> dashboard.Dashboard:
    """A dashboard with what every kperf dashboard has: the tag, links to the
    others, Grafana's own annotations (as Grafana itself saves them)."""
    return (
        dashboard.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["kperf"])
        .editable()
        .link(
            dashboard.DashboardLink("kperf dashboards")
            .type(dm.DashboardLinkType.DASHBOARDS)
            .tags(["kperf"])
            .as_dropdown(False)
            .include_vars(False)
            .keep_time(True)
        )
        .annotation(
            dashboard.AnnotationQuery()
            .name("Annotations & Alerts")
            .datasource(dm.DataSourceRef(type_val="grafana", uid="-- Grafana --"))
            .built_in(1)
            .enable(True)
            .hide(True)
            .icon_color("rgba(0, 211, 255, 1)")
            .type("dashboard")
        )
    )


class Layout:
    """Numbers panels in the order they are added; the SDK places them on the grid."""

    def __init__(self, board: dashboard.Dashboard) -> None:
        self.board = board
        self.next_id = 1

    def add(self, panel: Any, w: int, h: int) -> None:
        self.board.with_panel(panel.id(self.next_id).span(w).height(h).datasource(DATASOURCE))
        self.next_id += 1


STATUS_COLORS = {
    "queued": "text",
    "building": "blue",
    "testing": "blue",
    "analysing": "blue",
    "done": "green",
    "failed": "red",
    "cancelled": "text",
    "leased": "blue",
    "pending": "orange",
    "sent": "green",
    "no-recipient": "text",
    "good": "green",
    "quarantined": "red",
    "learning": "blue",
    "drift": "red",
    "regression": "red",
    "improvement": "green",
}

# Triage states (Triage.State, docs/triage.md): undecided stands out, decided recedes.
TRIAGE_COLORS = {
    "new": "red",
    "confirmed": "orange",
    "expected": "text",
    "invalid": "text",
    "fixed": "green",
    "wont-fix": "text",
}
