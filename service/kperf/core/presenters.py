"""One JSON shape of a submission, shared by the API, the CLI and the web page."""

from __future__ import annotations

from typing import Any

from kperf.core import workflow
from kperf.core.models import Job, Submission


def _iso(dt: Any) -> str | None:
    return dt.isoformat() if dt else None


def build_dict(sb: Any) -> dict[str, Any]:
    b = sb.build
    return {
        "id": b.pk,
        "side": sb.side,
        "sha": b.sha,
        "arch": b.arch,
        "config_digest": b.config_digest,
        "status": b.status,
        "phase": b.phase,
        "progress": b.progress,
        "error": b.error,
        "log_tail": b.log_tail if b.status == "failed" else "",
        "duration_s": b.duration_s,
        "artifacts": {k: {"sha256": v["sha256"], "size": v["size"]} for k, v in b.artifacts.items()},
    }


def job_dict(j: Job) -> dict[str, Any]:
    return {
        "id": j.pk,
        "side": j.side,
        "benchmark": j.benchmark,
        "grid": j.grid,
        "machine_class": j.machine_class.name,
        "build_id": j.build_id,
        "status": j.status,
        "attempt": j.attempt,
        "runner": j.runner.name if j.runner else None,
        "phase": j.phase,
        "progress": j.progress,
        "failure_kind": j.failure_kind,
        "failure_message": j.failure_message,
        "started": _iso(j.started),
        "finished": _iso(j.finished),
    }


def comparisons(sub: Submission) -> list[dict[str, Any]]:
    out = []
    for comp in sub.comparisons.select_related("machine_class").prefetch_related("metrics"):
        out.append(
            {
                "machine_class": comp.machine_class.name,
                "benchmark": comp.benchmark,
                "method": comp.method,
                "alpha": comp.alpha,
                "look": comp.look,
                "looks": comp.looks,
                "final": comp.final,
                "table": comp.table,
                "metrics": [
                    {
                        "metric": m.metric,
                        "unit": m.unit,
                        "higher_is_better": m.higher_is_better,
                        "verdict": m.verdict,
                        "base_mean": m.base_mean,
                        "head_mean": m.head_mean,
                        "change_pct": m.change_pct,
                        "ci_low_pct": m.ci_low_pct,
                        "ci_high_pct": m.ci_high_pct,
                        "p_value": m.p_value,
                        "q_value": m.q_value,
                        "min_effect_pct": m.min_effect_pct,
                        "base_boots": m.base_boots,
                        "head_boots": m.head_boots,
                        "base_samples": m.base_samples,
                        "head_samples": m.head_samples,
                        "samples": m.values,
                        "summary": m.summary,
                        "note": m.note,
                    }
                    for m in comp.metrics.all()
                ],
            }
        )
    return out


def progress_summary(sub: Submission, jobs: list[Job]) -> dict[str, Any]:
    """Boots done per side: what 'boot n of K' means for a submission."""
    out: dict[str, Any] = {}
    for side in ("base", "head"):
        side_jobs = [j for j in jobs if j.side == side]
        out[side] = {
            "boots_done": sum(j.boots for j in side_jobs if j.status == Job.Status.DONE),
            "boots_total": sum(j.boots for j in side_jobs),
        }
    return out


def submission_summary(sub: Submission) -> dict[str, Any]:
    return {
        "id": sub.pk,
        "tree": sub.tree.url,
        "branch": sub.head_ref,
        "head_sha": sub.head_sha or None,
        "base": sub.base_ref,
        "base_sha": sub.base_sha or None,
        "benchmarks": sub.benchmarks,
        "grid": sub.grid,
        "arches": sub.arches,
        "status": sub.status,
        "error": sub.error,
        "reruns": sub.reruns,
        "owner": sub.owner.get_username(),
        "created": _iso(sub.created),
        "finished": _iso(sub.finished),
    }


def submission_detail(sub: Submission) -> dict[str, Any]:
    jobs = list(sub.jobs.select_related("runner", "machine_class").order_by("seq"))
    data = submission_summary(sub)
    data.update(
        {
            "queue_position": workflow.queue_position(sub),
            "builds": [build_dict(sb) for sb in sub.submission_builds.select_related("build").order_by("side", "id")],
            "jobs": [job_dict(j) for j in jobs],
            "progress": progress_summary(sub, jobs),
            "comparisons": comparisons(sub),
        }
    )
    return data
