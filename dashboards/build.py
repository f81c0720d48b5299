"""kperf's Grafana dashboards, built in code (grafana-foundation-sdk).

    python dashboards/build.py           write dashboards/json/*.json and dashboards/grafana-reader.sql
    python dashboards/build.py --check   exit 1 if those files are not what this script writes

Every panel reads kperf's PostgreSQL through Grafana's PostgreSQL data source
(provisioned by dashboards/provisioning/datasources/kperf.yaml with the uid
below). Queries are plain read-only SQL. The tracked-branch dashboard, whose
x axis is a commit's position on the branch, uses template variables and no
time macros; the lab dashboard uses `$__time` and `$__timeFilter` where its
x axis is time. docs/dashboards.md describes what the panels show.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import barchart, dashboard, stat, table, timeseries, trend
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
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
    "core_sample",
    "core_submission",
    "core_trackedbranch",
    "core_tree",
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
    "regression": "red",
    "improvement": "green",
}

# ---------------------------------------------------------------------------
# Dashboard "kperf: tracked branch"
# ---------------------------------------------------------------------------

# The ids the branch and machine class variables hold. An empty variable
# (nothing tracked yet) matches no row instead of being a syntax error.
BRANCH_ID = "NULLIF('$branch', '')::bigint"
CLASS_ID = "NULLIF('$machine_class', '')::bigint"

VAR_BRANCH = sql(
    """
    SELECT b.id AS __value, t.url || ' ' || b.branch AS __text
    FROM core_trackedbranch b
    JOIN core_tree t ON t.id = b.tree_id
    ORDER BY t.url, b.branch
    """
)

VAR_MACHINE_CLASS = sql(
    f"""
    SELECT m.id AS __value, m.name AS __text
    FROM core_machineclass m
    WHERE EXISTS (
      SELECT 1 FROM core_job j
      JOIN core_branchcommit c ON c.id = j.branch_commit_id
      WHERE j.machine_class_id = m.id AND c.branch_id = {BRANCH_ID}
    )
    ORDER BY m.name
    """
)

# The clock that timed the series: two clocks' numbers are different metrics
# (docs/benchmarks.md), so a series, its change points and its metric list
# are always of one clock.
VAR_CLOCK = sql(
    f"""
    SELECT DISTINCT j.clock
    FROM core_job j
    JOIN core_branchcommit c ON c.id = j.branch_commit_id
    WHERE c.branch_id = {BRANCH_ID} AND j.machine_class_id = {CLASS_ID}
    ORDER BY 1
    """
)

VAR_BENCHMARK = sql(
    f"""
    SELECT DISTINCT j.benchmark
    FROM core_job j
    JOIN core_branchcommit c ON c.id = j.branch_commit_id
    WHERE c.branch_id = {BRANCH_ID} AND j.machine_class_id = {CLASS_ID} AND j.clock = '$clock'
    ORDER BY 1
    """
)

VAR_METRIC = sql(
    f"""
    SELECT DISTINCT s.metric AS __value, coalesce(s.metric || ' (' || d.unit || ')', s.metric) AS __text
    FROM core_sample s
    JOIN core_bootrecord r ON r.id = s.boot_record_id
    JOIN core_job j ON j.id = r.job_id
    JOIN core_branchcommit c ON c.id = j.branch_commit_id
    LEFT JOIN core_metricdef d ON d.name = s.metric
    WHERE c.branch_id = {BRANCH_ID} AND j.machine_class_id = {CLASS_ID} AND j.clock = '$clock'
      AND j.benchmark = '$benchmark' AND j.status = 'done'
    ORDER BY 1
    """
)

# One value per measured commit, as the change-point search sees the series:
# commits still on the branch, done (or being analysed), with finished jobs of
# the machine class and benchmark. The value is the mean over boots of each
# boot's mean over its iterations (the detector itself works on each boot's
# trimmed mean of log values, docs/statistics.md).
PER_COMMIT = f"""per_boot AS (
      SELECT j.branch_commit_id AS commit_id, r.id AS boot_id, avg(s.value) AS boot_mean
      FROM core_job j
      JOIN core_branchcommit c ON c.id = j.branch_commit_id
      JOIN core_bootrecord r ON r.job_id = j.id
      JOIN core_sample s ON s.boot_record_id = r.id
      WHERE c.branch_id = {BRANCH_ID} AND c.on_branch AND c.status IN ('done', 'analysing')
        AND j.machine_class_id = {CLASS_ID} AND j.clock = '$clock' AND j.benchmark = '$benchmark'
        AND j.status = 'done' AND s.metric = '$metric'
      GROUP BY j.branch_commit_id, r.id
    ),
    per_commit AS (
      SELECT commit_id, avg(boot_mean) AS value, count(*) AS boots
      FROM per_boot
      GROUP BY commit_id
    )"""

SERIES = sql(
    f"""
    WITH {PER_COMMIT}
    SELECT c.position,
      p.value,
      CASE WHEN cp.id IS NULL THEN NULL ELSE p.value END AS "change point",
      p.boots,
      left(c.sha, 12) AS "commit",
      c.subject
    FROM per_commit p
    JOIN core_branchcommit c ON c.id = p.commit_id
    LEFT JOIN core_changepoint cp
      ON cp.commit_id = c.id AND cp.machine_class_id = {CLASS_ID} AND cp.clock = '$clock'
      AND cp.benchmark = '$benchmark' AND cp.metric = '$metric'
    ORDER BY c.position
    """
)

CHANGE_POINT_COLUMNS = """
      left(c.sha, 12) AS "commit",
      c.position,
      c.subject,
      left(p.sha, 12) AS "previous",
      cp.change_pct AS "change %",
      cp.direction,
      cp.p_value AS "p",
      CASE WHEN p.id IS NULL THEN 0 ELSE greatest(0, c.position - p.position - 1) END AS "untested between",
      left(d.sha, 12) AS "detected at",
      cp.first_seen AS "first seen\""""

CHANGE_POINTS = sql(
    f"""
    SELECT {CHANGE_POINT_COLUMNS.strip()}
    FROM core_changepoint cp
    JOIN core_branchcommit c ON c.id = cp.commit_id
    LEFT JOIN core_branchcommit p ON p.id = cp.previous_id
    JOIN core_branchcommit d ON d.id = cp.detected_at_id
    WHERE cp.branch_id = {BRANCH_ID} AND cp.machine_class_id = {CLASS_ID} AND cp.clock = '$clock'
      AND cp.benchmark = '$benchmark' AND cp.metric = '$metric'
    ORDER BY c.position DESC
    """
)

ALL_CHANGE_POINTS = sql(
    f"""
    SELECT m.name AS "machine class", cp.clock, cp.benchmark, cp.metric,
      {CHANGE_POINT_COLUMNS.strip()}
    FROM core_changepoint cp
    JOIN core_machineclass m ON m.id = cp.machine_class_id
    JOIN core_branchcommit c ON c.id = cp.commit_id
    LEFT JOIN core_branchcommit p ON p.id = cp.previous_id
    JOIN core_branchcommit d ON d.id = cp.detected_at_id
    WHERE cp.branch_id = {BRANCH_ID}
    ORDER BY c.position DESC, m.name, cp.benchmark, cp.metric
    """
)

COMMITS = sql(
    f"""
    WITH {PER_COMMIT},
    boots AS (
      SELECT branch_commit_id AS commit_id,
        sum(boots) FILTER (WHERE status = 'done') AS done,
        sum(boots) AS total
      FROM core_job
      WHERE branch_commit_id IN (SELECT id FROM core_branchcommit WHERE branch_id = {BRANCH_ID})
      GROUP BY branch_commit_id
    )
    SELECT c.position,
      left(c.sha, 12) AS "commit",
      c.subject,
      c.status,
      c.on_branch AS "on branch",
      CASE WHEN c.on_branch
        THEN coalesce(c.position - lag(c.position) OVER (PARTITION BY c.on_branch ORDER BY c.position) - 1, 0)
        ELSE 0 END AS "untested before",
      p.value,
      coalesce(b.done, 0) || '/' || coalesce(b.total, 0) AS "boots",
      c.error,
      c.created,
      c.finished
    FROM core_branchcommit c
    LEFT JOIN per_commit p ON p.commit_id = c.id
    LEFT JOIN boots b ON b.commit_id = c.id
    WHERE c.branch_id = {BRANCH_ID}
    ORDER BY c.position DESC
    """
)

BRANCH = sql(
    f"""
    SELECT t.url AS tree,
      b.branch,
      CASE WHEN b.enabled THEN 'polling' ELSE 'paused' END AS "state",
      left(b.head_sha, 12) AS head,
      b.last_polled AS "last polled",
      b.last_error AS "last error",
      (SELECT count(*) FROM core_branchcommit c WHERE c.branch_id = b.id AND c.status = 'done') AS "done",
      (SELECT count(*) FROM core_branchcommit c
        WHERE c.branch_id = b.id AND c.status NOT IN ('done', 'failed')) AS "in flight",
      (SELECT count(*) FROM core_branchcommit c WHERE c.branch_id = b.id AND c.status = 'failed') AS "failed",
      (SELECT count(*) FROM core_changepoint cp WHERE cp.branch_id = b.id) AS "change points"
    FROM core_trackedbranch b
    JOIN core_tree t ON t.id = b.tree_id
    WHERE b.id = {BRANCH_ID}
    """
)


def change_point_overrides(panel: table.Panel) -> table.Panel:
    return (
        panel.with_override(*by_name("change %", {"unit": "percent", "decimals": 2}))
        .with_override(*by_name("p", {"decimals": 4}))
        .with_override(*by_name("direction", colored_words(STATUS_COLORS)))
    )


def tracked_branch() -> dashboard.Dashboard:
    board = (
        kperf_dashboard(
            "kperf: tracked branch",
            BRANCH_UID,
            "One metric's per-commit series of a tracked branch, its change points and the branch's commits.",
        )
        .refresh("5m")
        .time("now-30d", "now")
        .timepicker(dashboard.TimePicker().hidden(True))
        .with_variable(variable("branch", "Branch", VAR_BRANCH))
        .with_variable(variable("machine_class", "Machine class", VAR_MACHINE_CLASS))
        .with_variable(variable("clock", "Clock", VAR_CLOCK))
        .with_variable(variable("benchmark", "Benchmark", VAR_BENCHMARK))
        .with_variable(variable("metric", "Metric", VAR_METRIC))
    )
    layout = Layout(board)
    layout.add(
        table.Panel()
        .title("Branch")
        .description("The tracked branch: polling, its head, the last error of a poll, its commits by status.")
        .with_target(Sql(BRANCH)),
        24,
        4,
    )
    layout.add(
        trend.Panel()
        .title("${metric:text} per commit ($benchmark on ${machine_class:text}, $clock clock)")
        .description(
            "One point per measured commit in branch order (x: first-parent position): the mean over boots "
            "of each boot's mean. Red points are the commits where a change point of this metric was found. "
            "The commits table below has each position's sha and subject."
        )
        .with_target(Sql(SERIES))
        .x_field("position")
        .axis_label("")
        .show_points(common.VisibilityMode.ALWAYS)
        .point_size(5)
        .line_width(1)
        .span_nulls(True)
        .legend(
            common_builders.VizLegendOptions()
            .show_legend(True)
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
        )
        .tooltip(common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI).sort(common.SortOrder.NONE))
        .with_override(*by_name("value", {"displayName": "${metric}"}))
        .with_override(
            *by_name(
                "change point",
                {
                    "custom.drawStyle": "points",
                    "custom.pointSize": 14,
                    "color": {"mode": "fixed", "fixedColor": "red"},
                },
            )
        )
        # The number of boots is not drawn: its scale is not the metric's.
        .with_override(*by_name("boots", {"custom.hideFrom": {"legend": True, "tooltip": False, "viz": True}})),
        24,
        10,
    )
    layout.add(
        change_point_overrides(
            table.Panel()
            .title("Change points of ${metric:text}")
            .description(
                "At the first commit after the change; previous is the last measured commit before it, "
                "'untested between' the unmeasured commits between them (0: the culprit is known). "
                "Change % is negative when worse."
            )
            .with_target(Sql(CHANGE_POINTS))
        ),
        24,
        6,
    )
    layout.add(
        table.Panel()
        .title("Commits")
        .description(
            "Every commit kperf measured or is measuring on this branch, newest first, with this metric's "
            "value where it was measured on the machine class. 'Untested before' counts the first-parent "
            "commits between it and the measured commit before it."
        )
        .with_target(Sql(COMMITS))
        .with_override(*by_name("status", colored_words(STATUS_COLORS)))
        .with_override(*by_name("subject", {"custom.width": 320})),
        24,
        12,
    )
    layout.add(
        change_point_overrides(
            table.Panel()
            .title("Every change point of the branch")
            .description("All metrics, benchmarks and machine classes.")
            .with_target(Sql(ALL_CHANGE_POINTS))
        ),
        24,
        8,
    )
    return board


# ---------------------------------------------------------------------------
# Dashboard "kperf: lab"
# ---------------------------------------------------------------------------

JOBS_PER_CLASS = sql(
    """
    SELECT m.name AS "machine class",
      count(j.id) FILTER (WHERE j.status = 'queued') AS queued,
      count(j.id) FILTER (WHERE j.status = 'leased') AS leased
    FROM core_machineclass m
    LEFT JOIN core_job j ON j.machine_class_id = m.id AND j.status IN ('queued', 'leased')
    GROUP BY m.name
    ORDER BY m.name
    """
)

QUEUE_PER_CLASS = sql(
    """
    SELECT m.name AS "machine class",
      m.arch,
      count(j.id) FILTER (WHERE j.status = 'queued' AND j.submission_id IS NOT NULL) AS "queued: submissions",
      count(j.id) FILTER (WHERE j.status = 'queued' AND j.branch_commit_id IS NOT NULL) AS "queued: branches",
      count(j.id) FILTER (WHERE j.status = 'leased') AS leased,
      min(j.created) FILTER (WHERE j.status = 'queued') AS "oldest queued",
      (SELECT count(*) FROM core_runner r WHERE r.machine_class_id = m.id AND r.health = 'good') AS "good runners"
    FROM core_machineclass m
    LEFT JOIN core_job j ON j.machine_class_id = m.id AND j.status IN ('queued', 'leased')
    GROUP BY m.id, m.name, m.arch
    ORDER BY m.name
    """
)

RUNNERS = sql(
    """
    SELECT r.name AS runner,
      m.name AS "machine class",
      r.health,
      r.last_heartbeat AS "last heartbeat",
      extract(epoch FROM now() - r.last_heartbeat)::float8 AS "since heartbeat",
      (SELECT count(*) FROM core_job j WHERE j.runner_id = r.id AND j.status = 'leased') AS "leased jobs",
      r.version,
      r.hostname
    FROM core_runner r
    JOIN core_machineclass m ON m.id = r.machine_class_id
    ORDER BY m.name, r.name
    """
)

BUILD_DURATIONS = sql(
    """
    SELECT $__time(b.finished),
      extract(epoch FROM b.finished - b.started)::float8 AS duration,
      b.arch || ' ' || b.status AS metric
    FROM core_kernelbuild b
    WHERE $__timeFilter(b.finished) AND b.started IS NOT NULL
    ORDER BY 1
    """
)

SUBMISSIONS_PER_STATUS = sql(
    f"""
    SELECT st.status, count(s.id) AS submissions
    FROM (VALUES {", ".join(f"({i}, '{name}')" for i, name in enumerate(SUBMISSION_STATUSES))}) AS st(ord, status)
    LEFT JOIN core_submission s
      ON s.status = st.status AND ($__timeFilter(s.created) OR s.status NOT IN ('done', 'failed'))
    GROUP BY st.ord, st.status
    ORDER BY st.ord
    """
)

ALERT_COUNTS = sql(
    """
    SELECT count(*) FILTER (WHERE status = 'pending') AS pending,
      count(*) FILTER (WHERE status = 'failed') AS failed
    FROM core_alert
    """
)

ALERT_OUTBOX = sql(
    """
    SELECT a.created,
      a.kind,
      a.status,
      a.attempts,
      a.subject,
      array_to_string(ARRAY(SELECT jsonb_array_elements_text(a.recipients)), ', ') AS recipients,
      a.last_error AS "last error"
    FROM core_alert a
    WHERE a.status IN ('pending', 'failed')
    ORDER BY a.created DESC
    LIMIT 200
    """
)

TRACKED_BRANCHES = sql(
    """
    SELECT b.id,
      t.url AS tree,
      b.branch,
      CASE WHEN b.enabled THEN 'polling' ELSE 'paused' END AS "state",
      b.last_polled AS "last polled",
      b.last_error AS "last error",
      (SELECT count(*) FROM core_branchcommit c
        WHERE c.branch_id = b.id AND c.status NOT IN ('done', 'failed')) AS "commits in flight",
      (SELECT count(*) FROM core_changepoint cp WHERE cp.branch_id = b.id) AS "change points"
    FROM core_trackedbranch b
    JOIN core_tree t ON t.id = b.tree_id
    ORDER BY t.url, b.branch
    """
)


def lab() -> dashboard.Dashboard:
    board = (
        kperf_dashboard(
            "kperf: lab", LAB_UID, "Queues, runners, kernel builds, submissions and the mail outbox of a kperf service."
        )
        .refresh("1m")
        .time("now-7d", "now")
    )
    layout = Layout(board)
    layout.add(
        barchart.Panel()
        .title("Jobs waiting and running per machine class")
        .description("Queued: waiting for a runner of the class. Leased: a runner has it (booting or measuring).")
        .with_target(Sql(JOBS_PER_CLASS))
        .x_field("machine class")
        .stacking(common.StackingMode.NORMAL)
        .show_value(common.VisibilityMode.AUTO),
        12,
        8,
    )
    layout.add(
        table.Panel()
        .title("Queue per machine class")
        .description(
            "Submissions' jobs are claimed before tracked branches'. A class with queued jobs and no good "
            "runner waits until one is registered or brought back."
        )
        .with_target(Sql(QUEUE_PER_CLASS)),
        12,
        8,
    )
    layout.add(
        table.Panel()
        .title("Runners")
        .description(
            "Every registered runner; an idle runner polls every few seconds, so a heartbeat older than a "
            "few minutes means it is down or cannot reach the service."
        )
        .with_target(Sql(RUNNERS))
        .with_override(
            *by_name(
                "since heartbeat",
                {
                    "unit": "s",
                    "custom.cellOptions": {"type": "color-text"},
                    "thresholds": {
                        "mode": "absolute",
                        "steps": [
                            {"color": "green", "value": None},
                            {"color": "orange", "value": 120},
                            {"color": "red", "value": 900},
                        ],
                    },
                },
            )
        )
        .with_override(*by_name("health", colored_words(STATUS_COLORS))),
        24,
        8,
    )
    layout.add(
        timeseries.Panel()
        .title("Kernel build durations")
        .description("Each finished build, at the time it finished, by architecture and outcome.")
        .with_target(Sql(BUILD_DURATIONS, format_val="time_series"))
        .unit("s")
        .draw_style(common.GraphDrawStyle.POINTS)
        .point_size(6)
        .show_points(common.VisibilityMode.ALWAYS),
        12,
        8,
    )
    layout.add(
        barchart.Panel()
        .title("Submissions per status")
        .description("Submissions created in the time range, and every unfinished one however old.")
        .with_target(Sql(SUBMISSIONS_PER_STATUS))
        .x_field("status")
        .show_value(common.VisibilityMode.ALWAYS),
        12,
        8,
    )
    layout.add(
        stat.Panel()
        .title("Alerts waiting")
        .description(
            "Pending: not sent yet (no SMTP host, or the mail server refused and kperf retries). "
            "Failed: kperf gave up after KPERF_ALERT_MAX_ATTEMPTS."
        )
        .with_target(Sql(ALERT_COUNTS))
        .reduce_options(common_builders.ReduceDataOptions().values(False).calcs(["lastNotNull"]))
        .color_mode(common.BigValueColorMode.VALUE)
        .graph_mode(common.BigValueGraphMode.NONE)
        .thresholds(
            dashboard.ThresholdsConfig()
            .mode(dm.ThresholdsMode.ABSOLUTE)
            .steps([dm.Threshold(value=None, color="green"), dm.Threshold(value=1, color="orange")])
        ),
        6,
        8,
    )
    layout.add(
        table.Panel()
        .title("Alerts outbox: pending and failed")
        .description("The mails kperf has not delivered, newest first, with the last delivery error.")
        .with_target(Sql(ALERT_OUTBOX))
        .with_override(*by_name("status", colored_words(STATUS_COLORS))),
        18,
        8,
    )
    layout.add(
        table.Panel()
        .title("Tracked branches")
        .description("A branch's name links to its series and change points (the 'kperf: tracked branch' dashboard).")
        .with_target(Sql(TRACKED_BRANCHES))
        .with_override(*by_name("id", {"custom.hidden": True}))
        .with_override(
            *by_name(
                "branch",
                {
                    "links": [
                        {
                            "title": "series and change points",
                            "url": f"/d/{BRANCH_UID}?var-branch=${{__data.fields.id}}",
                        }
                    ]
                },
            )
        ),
        24,
        6,
    )
    return board


DASHBOARDS = {"kperf-branch.json": tracked_branch, "kperf-lab.json": lab}


def render(board: dashboard.Dashboard) -> str:
    return json.dumps(board.build(), cls=JSONEncoder, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def reader_sql() -> str:
    lines = [
        "-- The PostgreSQL role kperf's Grafana data source logs in as: read-only, and",
        "-- only on the tables the dashboards read. Generated by dashboards/build.py.",
        "-- Run it as the owner of kperf's tables (again after an upgrade: it is",
        "-- idempotent), then give the role a password (docs/dashboards.md):",
        f"--   ALTER ROLE {READER_ROLE} PASSWORD '...';",
        "DO $$",
        "BEGIN",
        f"  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{READER_ROLE}') THEN",
        f"    CREATE ROLE {READER_ROLE} LOGIN;",
        "  END IF;",
        "END",
        "$$;",
        f"ALTER ROLE {READER_ROLE} SET default_transaction_read_only = on;",
        f"GRANT USAGE ON SCHEMA public TO {READER_ROLE};",
        *(f"GRANT SELECT ON {name} TO {READER_ROLE};" for name in READ_TABLES),
    ]
    return "\n".join(lines) + "\n"


def outputs() -> dict[Path, str]:
    files = {JSON_DIR / name: render(make()) for name, make in DASHBOARDS.items()}
    files[READER_SQL] = reader_sql()
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if the written files differ from the generated")
    args = parser.parse_args(argv)
    stale = []
    for path, text in outputs().items():
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(HERE.parent)}")
    if stale:
        names = ", ".join(str(p.relative_to(HERE.parent)) for p in stale)
        print(f"out of date: {names}; run `python dashboards/build.py`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
