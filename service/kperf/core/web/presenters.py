"""One JSON shape of a submission or tracked branch, shared by the API, the CLI and the web pages."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
from django.db.models import Exists, F, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce
from typing_extensions import TypedDict

from kperf.core.builds import configs, profiles
from kperf.core.lab import eta, sharing, tuning, waiting
from kperf.core.models import (
    BootRecord,
    ChangePoint,
    Clock,
    Job,
    PatchSeries,
    SharedJob,
    Submission,
    TrackedBranch,
)
from kperf.core.results import outcome, per_op, sweeps
from kperf.core.web.shapes import (
    BranchCommitRow,
    BranchDetail,
    BranchSummary,
    BuildRow,
    ChangePointOut,
    Comparison,
    ComparisonDetail,
    CounterRow,
    JobRow,
    PatchSeriesSummary,
    SideProgress,
    SubmissionDetail,
    SubmissionJob,
    SubmissionProgress,
    SubmissionSummary,
)
from kperf.stats import abtest


def _iso(dt: Any) -> str | None:
    return dt.isoformat() if dt else None


def build_dict(sb: Any) -> BuildRow:
    b = sb.build
    return {
        "id": b.pk,
        "side": sb.side,
        "sha": b.sha,
        "arch": b.arch,
        "config_digest": b.config_digest,
        "profile": b.profile,
        "warnings": b.warnings,
        "status": b.status,
        "phase": b.phase,
        "progress": b.progress,
        "error": b.error,
        "log_tail": b.log_tail if b.status == "failed" else "",
        "duration_s": b.duration_s,
        "reused_sha": b.reused_sha,
        "compiled_files": b.compiled_files,
        "incremental_error": b.incremental_error,
        "artifacts": {k: {"sha256": v["sha256"], "size": v["size"]} for k, v in b.artifacts.items()},
    }


def job_dict(j: Job) -> JobRow:
    return {
        "id": j.pk,
        "side": j.side,
        "benchmark": j.benchmark,
        "grid": j.grid,
        "machine_class": j.machine_class.name,
        "clock": j.clock,
        "build_id": j.build_id,
        "boots": j.boots,
        "status": j.status,
        "attempt": j.attempt,
        "runner": j.runner.name if j.runner else None,
        "phase": j.phase,
        "progress": j.progress,
        "failure_kind": j.failure_kind,
        "failure_message": j.failure_message,
        "queued": _iso(j.created),
        "started": _iso(j.started),
        "finished": _iso(j.finished),
        "duration_s": (j.finished - j.started).total_seconds() if j.started and j.finished else None,
        "suspect": j.suspect_note or None,
    }


def verdict_estimate(boots: list[list[float]], log_scale: bool) -> float | None:
    """A side's level as the verdict sees it: the mean of its boots' trimmed
    means, on the log scale (a geometric mean) when every value is positive.

    The plain means beside it weigh every iteration alike; the two can
    disagree in sign when one boot is off, and a reader must see which the
    change column was computed from.
    """
    kept = [b for b in boots if b]
    if not kept:
        return None
    summaries = abtest.boot_summaries(kept, log_scale)
    level = float(np.mean(summaries))
    return float(np.exp(level)) if log_scale else level


class _Estimates(TypedDict):
    base_estimate: float | None
    head_estimate: float | None


def _estimates(values: dict[str, list[list[float]]]) -> _Estimates:
    base, head = values.get("base") or [], values.get("head") or []
    log_scale = all(v > 0 for boots in (base, head) for boot in boots for v in boot)
    return {"base_estimate": verdict_estimate(base, log_scale), "head_estimate": verdict_estimate(head, log_scale)}


# (machine class id, benchmark, grid, clock, side): the boots one side of a comparison has.
_SideKey = tuple[int, str, str, str, str]


# Counter sources a boot uploads: /proc/vmstat deltas, and hardware counters
# (instructions, cycles) where the machine could count them.
_COUNTER_SOURCES = ("vmstat", "perf")
_PerBoot = tuple[dict[_SideKey, dict[str, float]], dict[_SideKey, int]]


def _counters_per_boot(sub: Submission, per_op_sides: dict[_SideKey, per_op.Side]) -> dict[str, _PerBoot]:
    """Per source: the mean per boot of every counter, and the boots it is over, per side.

    One query for the whole submission, every source. A boot without counters (an older
    runner, a kernel without /proc/vmstat) is left out rather than counted
    as a boot where nothing moved; a counter missing from a boot that has
    counters did not move in it (init prints nonzero deltas only). The same
    pass fills per_op_sides with the counts per command (kperf.core.results.per_op).
    """
    sums: dict[str, dict[_SideKey, dict[str, float]]] = {source: {} for source in _COUNTER_SOURCES}
    boots: dict[str, dict[_SideKey, int]] = {source: {} for source in _COUNTER_SOURCES}
    # Shared base boots count on the side they are shared for (kperf.core.lab.sharing).
    link = SharedJob.objects.filter(job=OuterRef("job_id"), submission=sub)
    rows = (
        BootRecord.objects.filter(Q(job__submission=sub) | Exists(link))
        .annotate(side=Coalesce(Subquery(link.values("side")[:1]), F("job__side")))
        .values_list(
            "job__machine_class_id", "job__benchmark", "job__grid", "job__clock", "side", "counters", "job__params"
        )
    )
    for mclass, benchmark, grid, clock, side, counters, params in rows:
        key = (mclass, benchmark, grid, clock, side)
        per_op.add_boot(per_op_sides, key, params, counters)
        for source in _COUNTER_SOURCES:
            values = counters.get(source) if isinstance(counters, dict) else None
            if not isinstance(values, dict):
                continue
            boots[source][key] = boots[source].get(key, 0) + 1
            acc = sums[source].setdefault(key, {})
            for name, value in values.items():
                acc[name] = acc.get(name, 0.0) + float(value)
    return {
        source: (
            {key: {n: v / boots[source][key] for n, v in acc.items()} for key, acc in sums[source].items()},
            boots[source],
        )
        for source in _COUNTER_SOURCES
    }


def perf_rows(base: dict[str, float], head: dict[str, float]) -> list[CounterRow]:
    """Hardware counters per boot as counter_rows, with instructions per cycle where both were counted."""
    with_ipc = []
    for side in (base, head):
        ipc = side["instructions"] / side["cycles"] if side.get("instructions") and side.get("cycles") else None
        with_ipc.append({**side, "instructions_per_cycle": ipc} if ipc is not None else side)
    return counter_rows(*with_ipc)


def counter_rows(base: dict[str, float], head: dict[str, float]) -> list[CounterRow]:
    """Counters that moved on either side, the largest relative change first.

    Not judged: no verdict, no test, no part of the false-discovery control;
    they are there to explain a verdict. A counter that moved only in head
    has no relative change (None) and sorts first.
    """
    moved = [(name, base.get(name, 0.0), head.get(name, 0.0)) for name in base.keys() | head.keys()]
    rows = [(name, b, h, (h - b) / abs(b) * 100 if b else None) for name, b, h in moved if b or h]
    rows.sort(key=lambda r: (-(math.inf if r[3] is None else abs(r[3])), -abs(r[2] - r[1]), r[0]))
    return [{"counter": n, "base_per_boot": b, "head_per_boot": h, "change_pct": c} for n, b, h, c in rows]


def comparisons(sub: Submission) -> list[Comparison]:
    out: list[Comparison] = []
    per_op_sides: dict[_SideKey, per_op.Side] = {}
    counted = _counters_per_boot(sub, per_op_sides)
    per_boot, counter_boots = counted["vmstat"]
    perf_per_boot, perf_boots = counted["perf"]
    # The vCPUs and NUMA nodes its own boots had per class (a class's setting may have changed since).
    shape = {c: (v, n) for c, v, n in sub.jobs.values_list("machine_class_id", "vcpus", "numa_nodes")}
    for comp in sub.comparisons.select_related("machine_class").prefetch_related("metrics"):
        side = {s: (comp.machine_class_id, comp.benchmark, comp.grid, comp.clock, s) for s in ("base", "head")}
        # Both sides need boots with counters, or there is nothing to set side by side.
        both = all(counter_boots.get(key) for key in side.values())
        both_perf = all(perf_boots.get(key) for key in side.values())
        out.append(
            {
                "machine_class": comp.machine_class.name,
                "benchmark": comp.benchmark,
                "grid": comp.grid,
                "clock": comp.clock,
                "clock_label": Clock(comp.clock).label,
                "profile": profiles.class_profile(comp.machine_class, sub.profile),
                "vcpus": shape.get(comp.machine_class_id, (comp.machine_class.vcpus, 0))[0],
                "numa_nodes": shape.get(comp.machine_class_id, (0, comp.machine_class.numa_nodes))[1],
                "sweeps": sweeps.sweeps((m.metric, m.change_pct, m.verdict) for m in comp.metrics.all()),
                "method": comp.method,
                "alpha": comp.alpha,
                "look": comp.look,
                "looks": comp.looks,
                "final": comp.final,
                "shared_base_boots": comp.shared_base_boots,
                "table": comp.table,
                "metrics": [
                    {
                        **outcome.metric_verdict(m.metric, m.unit, m.higher_is_better, m),
                        **_estimates(m.values),
                        "samples": m.values,
                        "summary": m.summary,
                    }
                    # Sweeps in numeric order (spawn-vmas-200 before spawn-vmas-1600).
                    for m in sorted(comp.metrics.all(), key=lambda m: sweeps.metric_order(m.metric))
                ],
                "counters": counter_rows(per_boot[side["base"]], per_boot[side["head"]]) if both else [],
                "counter_boots": {s: counter_boots.get(key, 0) for s, key in side.items()},
                "perf_counters": (
                    perf_rows(perf_per_boot[side["base"]], perf_per_boot[side["head"]]) if both_perf else []
                ),
                "perf_boots": {s: perf_boots.get(key, 0) for s, key in side.items()},
                "perf_per_op": per_op.rows(
                    per_op_sides.get(side["base"]), per_op_sides.get(side["head"]), comp.benchmark
                ),
                "perf_per_op_boots": {s: getattr(per_op_sides.get(key), "boots", 0) for s, key in side.items()},
                "perf_per_op_mixed": per_op.mixed(
                    per_op_sides.get(side["base"]), per_op_sides.get(side["head"]), comp.benchmark
                ),
            }
        )
    return out


def progress_summary(sub: Submission, jobs: Sequence[SubmissionJob]) -> SubmissionProgress:
    """Boots done per side (shared ones included): what 'boot n of K' means for a submission."""
    return {"base": _side_progress(jobs, "base"), "head": _side_progress(jobs, "head")}


def _side_progress(jobs: Sequence[SubmissionJob], side: str) -> SideProgress:
    side_jobs = [j for j in jobs if j["side"] == side]
    return {
        "boots_done": sum(j["boots"] for j in side_jobs if j["status"] == Job.Status.DONE),
        "boots_total": sum(j["boots"] for j in side_jobs),
        "boots_shared": sum(j["boots"] for j in side_jobs if j["shared"]),
    }


def submission_jobs(sub: Submission) -> list[SubmissionJob]:
    """The submission's jobs and, marked `shared`, the base boots it shares.

    A shared job shows its boot (status, runner, console) but nothing of the
    submission that owns it: that is another user's (kperf.core.access).
    """
    own_jobs = list(sub.jobs.select_related("runner", "machine_class").order_by("seq"))
    links = sharing.links(sub)
    # Why each queued one waits (a build, a runner, the jobs ahead): kperf.core.lab.waiting.
    why = waiting.job_reasons([*own_jobs, *(link.job for link in links)], sub.owner_id)
    own: list[SubmissionJob] = [{**job_dict(j), "shared": False, "waiting_for": why.get(j.pk)} for j in own_jobs]
    shared: list[SubmissionJob] = [
        {**job_dict(link.job), "side": link.side, "shared": True, "waiting_for": why.get(link.job_id)} for link in links
    ]
    return own + shared


def submission_summary(sub: Submission) -> SubmissionSummary:
    return {
        "id": sub.pk,
        "tree": sub.tree.url,
        "branch": sub.head_ref,
        "head_sha": sub.head_sha or None,
        "base": sub.base_ref,
        "base_sha": sub.base_sha or None,
        "benchmarks": sub.benchmarks,
        # The first grid, as before a submission could ask for several: `grids` has them all.
        "grid": sub.grids[0] if sub.grids else "",
        "grids": sub.grids,
        "arches": sub.arches,
        "min_effect_pct": sub.min_effect_pct,
        "boot_params": sub.boot_params,
        "thp": sub.thp,
        "profile": sub.profile,
        "status": sub.status,
        "final": sub.is_final,
        "error": sub.error,
        "reruns": sub.reruns,
        "owner": sub.owner.get_username(),
        "created": _iso(sub.created),
        "finished": _iso(sub.finished),
        "kind": sub.kind,
        "series": series_summary(sub),
        "mail_to": sub.mail_to,
    }


def series_summary(sub: Submission) -> PatchSeriesSummary | None:
    if sub.kind != Submission.Kind.SERIES:
        return None
    ps = PatchSeries.objects.filter(submission=sub).first()
    if ps is None:
        return None
    return {
        "subject": ps.subject,
        "author": ps.author,
        "message_id": ps.message_id,
        "has_cover": ps.has_cover,
        "patch_count": ps.patch_count,
        "patches": ps.patches,
        "mbox_sha256": ps.mbox.get("sha256"),
        "failed_patch": ps.failed_patch,
    }


def submission_detail(sub: Submission) -> SubmissionDetail:
    jobs = submission_jobs(sub)
    return {
        **submission_summary(sub),
        "queue_position": waiting.queue_position(sub),
        **eta.for_submission(sub, jobs),
        "waiting_for": waiting.submission_reason(sub, jobs),
        "verdict": outcome.verdict_line(sub),
        "rerun_notes": outcome.rerun_notes(sub),
        "builds": [build_dict(sb) for sb in sub.submission_builds.select_related("build").order_by("side", "id")],
        "jobs": jobs,
        "progress": progress_summary(sub, jobs),
        "comparisons": _comparison_details(sub, jobs),
        "config_differences": configs.submission_differences(sub),
    }


def _comparison_details(sub: Submission, jobs: list[SubmissionJob]) -> list[ComparisonDetail]:
    """The comparisons, each with its boots' differences in machine tuning (kperf.core.lab.tuning)
    and, when it used suspect boots, the runners' notes on them."""
    differences = tuning.differences(sub)
    out: list[ComparisonDetail] = []
    for comp in comparisons(sub):
        key = (comp["machine_class"], comp["benchmark"], comp["grid"], comp["clock"])
        suspect = {
            j["suspect"]
            for j in jobs
            if j["suspect"] and (j["machine_class"], j["benchmark"], j["grid"], j["clock"]) == key
        }
        out.append({**comp, "tuning_differences": differences.get(key, []), "suspect": sorted(suspect)})
    return out


def branch_summary(b: TrackedBranch) -> BranchSummary:
    return {
        "id": b.pk,
        "tree": b.tree.url,
        "branch": b.branch,
        "benchmarks": b.benchmarks,
        "grid": b.grid,
        "arches": b.arches,
        "profile": b.profile,
        "min_effect_pct": b.min_effect_pct,
        "boots": b.boots,
        "max_commits": b.max_commits,
        "notify": b.notify,
        "bisect": b.bisect,
        "enabled": b.enabled,
        "head_sha": b.head_sha or None,
        "last_polled": _iso(b.last_polled),
        "last_error": b.last_error,
        "owner": b.owner.get_username(),
        "created": _iso(b.created),
    }


def change_point_dict(cp: ChangePoint) -> ChangePointOut:
    triage = getattr(cp, "triage", None)
    return {
        "id": cp.pk,
        "triage": triage.state if triage is not None else None,
        "machine_class": cp.machine_class.name,
        "benchmark": cp.benchmark,
        "clock": cp.clock,
        "metric": cp.metric,
        "sha": cp.commit.sha,
        "subject": cp.commit.subject,
        "previous_sha": cp.previous.sha if cp.previous else None,
        "untested_between": cp.untested_between,
        "detected_at_sha": cp.detected_at.sha,
        "direction": cp.direction,
        "change_pct": cp.change_pct,
        "p_value": cp.p_value,
        "statistic": cp.statistic,
        "first_seen": _iso(cp.first_seen),
    }


MAX_BRANCH_COMMITS = 1000


def branch_detail(b: TrackedBranch, commits_limit: int = 200) -> BranchDetail:
    commits = list(b.commits.order_by("-position")[:commits_limit])
    # Boots per commit added up in the database: a commit of a long branch has a job per boot and benchmark.
    boots_done: dict[int, int] = defaultdict(int)
    boots_total: dict[int, int] = defaultdict(int)
    for commit_id, status, boots in (
        Job.objects.filter(branch_commit__in=commits)
        .values("branch_commit_id", "status")
        .annotate(boots=Sum("boots"))
        .values_list("branch_commit_id", "status", "boots")
    ):
        boots_total[commit_id] += boots
        if status == Job.Status.DONE:
            boots_done[commit_id] += boots
    # Unmeasured first-parent commits between each commit and the measured one before it.
    on_branch = [c for c in commits if c.on_branch]
    gaps = {c.pk: c.position - older.position - 1 for c, older in zip(on_branch, on_branch[1:], strict=False)}
    rows: list[BranchCommitRow] = [
        {
            "sha": c.sha,
            "position": c.position,
            "subject": c.subject,
            "untested_before": gaps.get(c.pk, 0),
            "on_branch": c.on_branch,
            "status": c.status,
            "error": c.error,
            "boots_done": boots_done[c.pk],
            "boots_total": boots_total[c.pk],
            "created": _iso(c.created),
            "finished": _iso(c.finished),
        }
        for c in commits
    ]
    return {
        **branch_summary(b),
        "commits": rows,
        "change_points": [
            change_point_dict(cp)
            for cp in b.change_points.select_related("machine_class", "commit", "previous", "detected_at", "triage")
        ],
    }
