"""Celery tasks: short, named, taking ids, each calling one domain function."""

from __future__ import annotations

from celery import shared_task

from kperf.core import alerts, analysis, building, leases, tracking, workflow


@shared_task(name="kperf.prepare_submission")
def prepare_submission(sub_id: int) -> None:
    workflow.prepare_submission(sub_id)


@shared_task(name="kperf.build_kernel")
def build_kernel(build_id: int) -> None:
    building.run_build(build_id)


@shared_task(name="kperf.advance_submission")
def advance_submission(sub_id: int) -> None:
    workflow.advance_submission(sub_id)


@shared_task(name="kperf.analyse_submission")
def analyse_submission(sub_id: int) -> None:
    analysis.analyse_submission(sub_id)


@shared_task(name="kperf.expire_leases")
def expire_leases() -> int:
    return leases.expire_leases()


@shared_task(name="kperf.poll_tracked_branches")
def poll_tracked_branches() -> int:
    return tracking.poll_all()


@shared_task(name="kperf.poll_branch")
def poll_branch(branch_id: int, backfill: int = 0) -> None:
    tracking.poll_branch(branch_id, backfill)


@shared_task(name="kperf.advance_branch_commit")
def advance_branch_commit(commit_id: int) -> None:
    tracking.advance_branch_commit(commit_id)


@shared_task(name="kperf.analyse_branch_commit")
def analyse_branch_commit(commit_id: int) -> None:
    tracking.analyse_branch_commit(commit_id)


@shared_task(name="kperf.reanalyse_branch")
def reanalyse_branch(branch_id: int) -> None:
    tracking.reanalyse_branch(branch_id)


@shared_task(name="kperf.send_alerts")
def send_alerts() -> int:
    return alerts.send_pending()
