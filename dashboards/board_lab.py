"""The dashboard "kperf: lab" (docs/dashboards.md)."""

from __future__ import annotations

from grafana_foundation_sdk.builders import barchart, dashboard, stat, table, timeseries
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dm
from panels import (
    BRANCH_UID,
    LAB_UID,
    STATUS_COLORS,
    SUBMISSION_STATUSES,
    Layout,
    Sql,
    by_name,
    colored_words,
    kperf_dashboard,
    sql,
)

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
      r.health_reason AS reason,
      r.health_since AS since,
      r.last_calibration AS "last calibration",
      nullif(r.last_calibration_result, '') AS "calibration result",
      r.last_good_calibration AS "last good calibration",
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

CALIBRATIONS = sql(
    """
    SELECT $__time(e.created),
      kv.value::float8 AS value,
      r.name || ' ' || kv.key AS metric
    FROM core_runnerevent e
    JOIN core_runner r ON r.id = e.runner_id
    CROSS JOIN LATERAL jsonb_each_text(e.summary) AS kv
    WHERE e.kind = 'calibration' AND $__timeFilter(e.created)
    ORDER BY 1
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
    _queues_and_runners(layout)
    _builds_and_submissions(layout)
    _outbox_and_branches(layout)
    return board


def _queues_and_runners(layout: Layout) -> None:
    """Queues per machine class, the runners and their calibrations."""
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
            "few minutes means it is down or cannot reach the service. A quarantined runner claims nothing: "
            "reason and since say why and since when (a failed health check, a calibration that drifted "
            "beyond its learned noise, or an admin); an admin releases it (docs/calibration.md)."
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
        .with_override(*by_name("health", colored_words(STATUS_COLORS)))
        .with_override(*by_name("calibration result", colored_words(STATUS_COLORS))),
        24,
        8,
    )
    layout.add(
        timeseries.Panel()
        .title("Calibrations per runner")
        .description(
            "Each calibration's median per metric (the reference kernel, the class's calibration set), per "
            "runner: a step away from a runner's own line is what quarantines it (docs/calibration.md)."
        )
        .with_target(Sql(CALIBRATIONS, format_val="time_series"))
        .draw_style(common.GraphDrawStyle.LINE)
        .show_points(common.VisibilityMode.ALWAYS),
        24,
        8,
    )


def _builds_and_submissions(layout: Layout) -> None:
    """Kernel build durations and submissions per status."""
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


def _outbox_and_branches(layout: Layout) -> None:
    """The mail outbox and the tracked branches."""
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
