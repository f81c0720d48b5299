"""Why queued work waits, in words: for which build, for which runner.

"queued" and "boots 0 of 8" leave a developer guessing whether anything
will ever happen. A queued job waits for one of a few things, checked here
in the order kperf.core.lab.leases.claim checks them: a runner of its machine
class that is in service, gives the job's clock and is alive; no kernel
build running when every such runner yields to builds (the local runner of
`make up`, which would measure the compiler); and the jobs claimed before
it. Each answer names the thing waited for, so the page, the API
(`waiting_for`) and `kperf status` can say it.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from kperf.core.lab.claim_order import claim_key as _claim_key
from kperf.core.models import Clock, Job, KernelBuild, Runner, Submission

# A runner polls every few seconds and heartbeats with each poll; one not
# heard from for this long is most likely not running at all.
SILENT_AFTER = timedelta(minutes=10)


def build_label(build: KernelBuild, owner_id: int | None) -> str:
    """ "build #12 (head of submission 7)": the build and who asked for it first.

    The submission is named only when it is `owner_id`'s (the owner of the
    submission that waits): another user's submissions are theirs to see
    (kperf.core.access), so theirs is "another user's submission".
    """
    link = build.submission_builds.select_related("submission").order_by("submission_id", "id").first()
    if link is not None:
        if link.submission.owner_id != owner_id:
            return f"build #{build.pk} (for another user's submission)"
        return f"build #{build.pk} ({link.side} of submission {link.submission_id})"
    # Which branch, and its commits, may be another user's to see (kperf.core.access).
    if build.branch_commits.exists():
        return f"build #{build.pk} (for a tracked branch)"
    return f"build #{build.pk} ({build.arch})"


def _doing(build: KernelBuild) -> str:
    return " ".join(part for part in (build.phase, build.progress) if part) or "starting"


def _runner_reason(mclass: str, clock: str, runners: list[Runner], now: Any) -> tuple[str | None, list[Runner]]:
    """Why no runner of the class can take a job of `clock`, or None; and the runners that could."""
    where = f"a runner of class {mclass}"
    if not runners:
        return f"waiting for {where}: none is registered (docs/runners.md)", []
    good = [r for r in runners if r.health == Runner.Health.GOOD]
    if not good:
        return f"waiting for {where}: all {len(runners)} are quarantined (docs/calibration.md)", []
    able = [r for r in good if clock in r.clocks()]
    if not able:
        label = Clock(clock).label if clock in Clock.values else clock
        return f"waiting for {where} that gives the {label}: none of its runners in service does", []
    heard = [r.last_heartbeat for r in able if r.last_heartbeat is not None]
    if not heard or max(heard) < now - SILENT_AFTER:
        since = f"since {max(heard):%Y-%m-%d %H:%M} UTC" if heard else "yet"
        return (
            f"waiting for {where}: none of its {len(able)} runner{'s' if len(able) != 1 else ''} "
            f"has been heard from {since}; is kperf-runner running? (docs/runners.md)",
            able,
        )
    return None, able


def job_reasons(jobs: Sequence[Job], owner_id: int | None) -> dict[int, str]:
    """Why each queued job of `jobs` waits, by job id; jobs that do not wait are left out.

    `owner_id`: whose page this is, so that only their own submissions are named.
    """
    queued = [j for j in jobs if j.status == Job.Status.QUEUED]
    if not queued:
        return {}
    now = timezone.now()
    classes = {j.machine_class_id for j in queued}
    runners: dict[int, list[Runner]] = {c: [] for c in classes}
    for r in Runner.objects.filter(machine_class_id__in=classes).order_by("name"):
        runners[r.machine_class_id].append(r)
    building = (
        KernelBuild.objects.filter(status=KernelBuild.Status.BUILDING, lease_expires__gt=now)
        .order_by("started", "id")
        .first()
    )
    out: dict[int, str] = {}
    groups: dict[tuple[int, str], list[Job]] = {}
    for j in queued:
        groups.setdefault((j.machine_class_id, j.clock), []).append(j)
    for (mclass_id, clock), group in groups.items():
        mclass = group[0].machine_class.name
        reason, able = _runner_reason(mclass, clock, runners[mclass_id], now)
        # Only wall-clock jobs wait for builds (kperf.core.lab.leases.claim).
        yielding = clock == Clock.WALL and all(r.yields_to_builds for r in able)
        if reason is None and building is not None and yielding:
            reason = (
                f"waiting for {build_label(building, owner_id)} to finish ({_doing(building)}): "
                f"the runners of class {mclass} do not measure while a kernel builds"
            )
        if reason is not None:
            out.update((j.pk, reason) for j in group)
            continue
        # The queue of this class and clock, in claim order: what runs first.
        queue = Job.objects.filter(machine_class_id=mclass_id, clock=clock, status=Job.Status.QUEUED)
        owners = [j.submission_id for j in group if j.submission_id is not None]
        if len(owners) == len(group):
            # Only calibrations and older submissions can be ahead of a
            # submission's job: a long tracked branch's queue is not read.
            queue = queue.filter(Q(pinned_runner__isnull=False) | Q(submission_id__lte=max(owners)))
        keys = sorted(
            _claim_key(*row)
            for row in queue.values_list(
                "pinned_runner_id", "submission_id", "branch_commit_id", "seq", "id"
            ).order_by()
        )
        running = Job.objects.filter(machine_class_id=mclass_id, status=Job.Status.LEASED).count()
        for j in group:
            ahead = bisect.bisect_left(
                keys, _claim_key(j.pinned_runner_id, j.submission_id, j.branch_commit_id, j.seq, j.pk)
            )
            if ahead:
                out[j.pk] = f"waiting for a runner of class {mclass}: {ahead} job{'s' if ahead != 1 else ''} ahead"
            elif running >= len(able):
                out[j.pk] = f"next for a runner of class {mclass}, once one of its {len(able)} finishes its job"
            else:
                out[j.pk] = f"next for a runner of class {mclass}"
    return out


def submission_reason(sub: Submission, jobs: Sequence[Mapping[str, Any]]) -> str | None:
    """What a submission that is not moving waits for; None when it is moving (or finished).

    `jobs` are the presenter's job rows, with their `waiting_for`.
    """
    if sub.status == Submission.Status.QUEUED:
        if sub.kind == Submission.Kind.SERIES:
            return f"waiting for a worker to fetch {sub.tree.url}, resolve {sub.base_ref} and apply the series on it"
        return f"waiting for a worker to fetch {sub.tree.url} and resolve {sub.head_ref} and {sub.base_ref}"
    if sub.status == Submission.Status.BUILDING:
        unbuilt = [
            sb.build
            for sb in sub.submission_builds.select_related("build").order_by("side", "id")
            if sb.build.status in (KernelBuild.Status.QUEUED, KernelBuild.Status.BUILDING)
        ]
        if not unbuilt:
            return None
        build = next((b for b in unbuilt if b.status == KernelBuild.Status.BUILDING), unbuilt[0])
        if build.status == KernelBuild.Status.BUILDING:
            return f"waiting for {build_label(build, sub.owner_id)}, building: {_doing(build)}"
        return f"waiting for a build worker to start {build_label(build, sub.owner_id)}"
    if sub.status == Submission.Status.TESTING and not any(j["status"] == Job.Status.LEASED for j in jobs):
        return next((j["waiting_for"] for j in jobs if j.get("waiting_for")), None)
    return None


def queue_position(sub: Submission) -> int | None:
    """1 when this submission is next (or running); None once it is finished."""
    if sub.is_final:
        return None
    ahead = Submission.objects.exclude(status__in=Submission.FINAL).filter(created__lt=sub.created).count()
    return ahead + 1
