"""The dashboard "kperf: tracked branch" (docs/dashboards.md)."""

from __future__ import annotations

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard, table, trend
from grafana_foundation_sdk.models import common
from panels import (
    BRANCH_UID,
    STATUS_COLORS,
    TRIAGE_COLORS,
    Layout,
    Sql,
    by_name,
    colored_words,
    kperf_dashboard,
    sql,
    variable,
)

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

# The configuration profile its kernels were built with (docs/kernels.md):
# numbers of two profiles are never one series.
VAR_PROFILE = sql(
    f"""
    SELECT DISTINCT b.profile
    FROM core_job j
    JOIN core_branchcommit c ON c.id = j.branch_commit_id
    JOIN core_kernelbuild b ON b.id = j.build_id
    WHERE c.branch_id = {BRANCH_ID} AND j.machine_class_id = {CLASS_ID} AND j.clock = '$clock'
    ORDER BY 1
    """
)

VAR_BENCHMARK = sql(
    f"""
    SELECT DISTINCT j.benchmark
    FROM core_job j
    JOIN core_branchcommit c ON c.id = j.branch_commit_id
    JOIN core_kernelbuild b ON b.id = j.build_id
    WHERE c.branch_id = {BRANCH_ID} AND j.machine_class_id = {CLASS_ID} AND j.clock = '$clock'
      AND b.profile = '$profile'
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
    JOIN core_kernelbuild b ON b.id = j.build_id
    LEFT JOIN core_metricdef d ON d.name = s.metric
    WHERE c.branch_id = {BRANCH_ID} AND j.machine_class_id = {CLASS_ID} AND j.clock = '$clock'
      AND b.profile = '$profile' AND j.benchmark = '$benchmark' AND j.status = 'done'
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
      JOIN core_kernelbuild b ON b.id = j.build_id
      JOIN core_bootrecord r ON r.job_id = j.id
      JOIN core_sample s ON s.boot_record_id = r.id
      WHERE c.branch_id = {BRANCH_ID} AND c.on_branch AND c.status IN ('done', 'analysing')
        AND j.machine_class_id = {CLASS_ID} AND j.clock = '$clock' AND j.benchmark = '$benchmark'
        AND b.profile = '$profile' AND j.status = 'done' AND s.metric = '$metric'
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
      cp.first_seen AS "first seen",
      tr.state AS "triage",
      tr.note AS "triage note\""""

# A regression's triage (docs/triage.md); improvements have none.
TRIAGE_JOIN = "LEFT JOIN core_triage tr ON tr.change_point_id = cp.id"

CHANGE_POINTS = sql(
    f"""
    SELECT {CHANGE_POINT_COLUMNS.strip()}
    FROM core_changepoint cp
    JOIN core_branchcommit c ON c.id = cp.commit_id
    LEFT JOIN core_branchcommit p ON p.id = cp.previous_id
    JOIN core_branchcommit d ON d.id = cp.detected_at_id
    {TRIAGE_JOIN}
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
    {TRIAGE_JOIN}
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
        .with_override(*by_name("triage", colored_words(TRIAGE_COLORS)))
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
        .with_variable(variable("profile", "Profile", VAR_PROFILE))
        .with_variable(variable("benchmark", "Benchmark", VAR_BENCHMARK))
        .with_variable(variable("metric", "Metric", VAR_METRIC))
    )
    layout = Layout(board)
    _series(layout)
    _changes_and_commits(layout)
    return board


def _series(layout: Layout) -> None:
    """The branch, and the chosen metric's series with its change points."""
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
        .title("${metric:text} per commit ($benchmark on ${machine_class:text}, $profile profile, $clock clock)")
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


def _changes_and_commits(layout: Layout) -> None:
    """The change points found and the branch's commits."""
    layout.add(
        change_point_overrides(
            table.Panel()
            .title("Change points of ${metric:text}")
            .description(
                "At the first commit after the change; previous is the last measured commit before it, "
                "'untested between' the unmeasured commits between them (0: the culprit is known). "
                "Change % is negative when worse. Triage: what people decided about a regression "
                "(new until someone does; docs/triage.md)."
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
