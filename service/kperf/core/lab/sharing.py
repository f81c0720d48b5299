"""Base boots measured once for every submission of the same base kernel.

Several branches submitted against one base need the same measurement of
the base kernel: the same build booted on the same machine class, with the
same benchmark, grid parameters and clock. When a submission queues base
boots, it first links boots of that build which another submission has
queued, is running, or measured within KPERF_BASE_SHARE_WINDOW_SECONDS
(`SharedJob`), and queues only the boots still missing. The policy, for
people, is docs/submitting.md ("Shared base boots").

Only instruction-clock boots are shared unless the lab says otherwise
(KPERF_BASE_SHARE_WALL_CLOCK): a wall-clock boot measured earlier carries
that moment's load, and set against head boots measured now it makes a
change of its own, so a wall-clock submission measures its own base boots,
alternating with its head's.

A boot is shared only when nothing tells it apart from one the submission
would measure itself:

- same build, machine class, benchmark, grid, parameters and clock (the
  clock the sharer's own boots there get: never across clocks);
- same boot parameters and THP mode (Job.boot_params, Job.thp): the kernel
  is the same, but booted another way it is another measurement;
- the class's vCPUs and NUMA nodes now (Job.vcpus, Job.numa_nodes): a boot
  of another VM shape is another machine's (the build, and with it the
  configuration profile, is the same by the first rule);
- not failed or cancelled;
- measured (or being measured) by a runner whose identity has not changed
  since it began the boot: `Runner.identity_changed` moves when the runner
  is registered again (new token), or its version, hostname, health or
  machine class change. A queued boot has no runner yet: whichever runner
  takes it measures it once for everyone.

Only submissions' boots are shared. A tracked branch's boots are claimed
after every submission's (kperf.core.lab.leases.claim), so a sharer would wait
for them, and they are analysed as a series of their own.

A shared boot that fails, is cancelled, or no longer has the sharer's clock
(an operator switched the machine class) is dropped by `repair` and replaced:
by another shareable boot, else by one of the sharer's own.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Case, F, IntegerField, Max, Q, QuerySet, Value, When
from django.utils import timezone

from kperf.core.models import Clock, Job, KernelBuild, MachineClass, Runner, SharedJob, Submission

log = logging.getLogger(__name__)

BASE = "base"


def window() -> timedelta | None:
    """How far back a finished base boot may be shared; None: sharing is off."""
    seconds = settings.KPERF_BASE_SHARE_WINDOW_SECONDS
    return timedelta(seconds=seconds) if seconds > 0 else None


def candidates(
    sub: Submission,
    build: KernelBuild,
    mclass: MachineClass,
    bench: str,
    grid: str,
    params: dict[str, Any],
    clock: str,
    since: Any,
) -> QuerySet[Job]:
    """Other submissions' boots of `build` that `sub` may use as base boots, best first."""
    # The runner has been what it is now since before it began the boot.
    same_runner = Q(runner__isnull=False, runner__identity_changed__lte=F("started"), runner__health=Runner.Health.GOOD)
    usable = (
        Q(status=Job.Status.QUEUED)
        | (Q(status=Job.Status.LEASED) & same_runner)
        | (Q(status=Job.Status.DONE, finished__gte=since) & same_runner)
    )
    return (
        Job.objects.filter(
            usable,
            submission__isnull=False,
            build=build,
            machine_class=mclass,
            benchmark=bench,
            grid=grid,
            params=params,
            clock=clock,
            boot_params=sub.boot_params,
            thp=sub.thp,
            vcpus=mclass.vcpus,
            numa_nodes=mclass.numa_nodes,
            boots=1,
        )
        .exclude(submission=sub)
        .exclude(sharers__submission=sub)
        # Measured boots first (nothing to wait for), the latest first (the
        # least drift from the sharer's head boots); then running ones; then
        # queued ones in the order runners claim them.
        .annotate(
            rank=Case(
                When(status=Job.Status.DONE, then=Value(0)),
                When(status=Job.Status.LEASED, then=Value(1)),
                default=Value(2),
                output_field=IntegerField(),
            )
        )
        .order_by("rank", F("finished").desc(nulls_last=True), "submission_id", "seq", "id")
    )


def share_base(
    sub: Submission,
    build: KernelBuild,
    mclass: MachineClass,
    bench: str,
    grid: str,
    params: dict[str, Any],
    boots: int,
) -> int:
    """Link up to `boots` shareable boots of `build` as base boots of `sub`; returns how many.

    The caller holds the submission's row lock. The linked jobs are locked
    too, so an owner that fails and cancels its queued jobs at the same
    time either sees the link (and keeps the job) or cancels first (and the
    job is not picked).
    """
    span = window()
    if span is None or boots <= 0:
        return 0
    clock = Job.clock_for(mclass, bench, sub)
    if clock == Clock.WALL and not settings.KPERF_BASE_SHARE_WALL_CLOCK:
        # A wall-clock boot carries its moment's load (settings); the
        # sharer's own base boots, alternating with its head's, do not.
        return 0
    found = candidates(sub, build, mclass, bench, grid, params, clock, timezone.now() - span)
    with transaction.atomic():
        jobs = list(found.select_for_update(of=("self",))[:boots])
        SharedJob.objects.bulk_create([SharedJob(job=j, submission=sub, side=BASE) for j in jobs])
    if jobs:
        log.info(
            "submission %s: %d base boot(s) of %s %s on %s shared (jobs %s)",
            sub.pk,
            len(jobs),
            bench,
            grid,
            mclass.name,
            ", ".join(str(j.pk) for j in jobs),
        )
    return len(jobs)


def links(sub: Submission) -> list[SharedJob]:
    return list(
        SharedJob.objects.filter(submission=sub)
        .select_related("job__build", "job__machine_class", "job__runner")
        .order_by("job__seq", "job_id")
    )


def repair(sub: Submission) -> int:
    """Replace shared boots `sub` can no longer use; returns how many were replaced.

    A shared boot that failed is a fact about its owner's attempt, not a
    verdict on the sharer: the sharer measures the boot again (sharing
    another boot if there is one). If the base kernel really does not boot,
    that boot fails too, as the sharer's own, and the sharer fails saying so.
    """
    replaced = 0
    for link in links(sub):
        job = link.job
        clock = Job.clock_for(job.machine_class, job.benchmark, sub)
        if job.status not in (Job.Status.FAILED, Job.Status.CANCELLED) and job.clock == clock:
            continue
        why = f"{job.status} ({job.failure_kind} failure)" if job.failure_kind else job.status
        if job.clock != clock:
            why = f"timed with the {job.clock} clock, not {clock}"
        link.delete()
        if not share_base(sub, job.build, job.machine_class, job.benchmark, job.grid, job.params, 1):
            Job.queue_one_boot(
                job.build,
                job.machine_class,
                job.benchmark,
                job.grid,
                job.params,
                (Job.objects.filter(submission=sub).aggregate(m=Max("seq"))["m"] or 0) + 1,
                submission=sub,
                side=link.side,
            )
        log.warning("submission %s: shared job %s is %s; a replacement base boot is queued", sub.pk, job.pk, why)
        replaced += 1
    return replaced


def measured_jobs(sub: Submission) -> list[Job]:
    """Every job whose boots `sub` compares: its own and the shared ones, after `repair`."""
    repair(sub)
    own = list(sub.jobs.select_related("build", "machine_class"))
    return own + [link.job for link in links(sub)]


def sharer_ids(job_ids: list[int]) -> list[int]:
    """The submissions that share any of these jobs."""
    return list(
        SharedJob.objects.filter(job_id__in=job_ids).values_list("submission_id", flat=True).distinct().order_by()
    )


def queue_boots(
    sub: Submission,
    base: KernelBuild,
    head: KernelBuild,
    mclass: MachineClass,
    bench: str,
    grid: str,
    params: dict[str, Any],
    boots: int,
) -> None:
    """Queue `boots` more one-boot jobs per side, alternating base and head.

    Base boots another submission measures (or measured) of the same build
    are shared instead (kperf.core.lab.sharing): only the missing ones are queued.
    """
    last = Job.objects.filter(submission=sub).aggregate(m=Max("seq"))["m"]
    seq = 0 if last is None else last + 1
    shared = share_base(sub, base, mclass, bench, grid, params, boots)
    for boot in range(boots):
        for side, build in (("base", base), ("head", head)):
            if side == "head" or boot >= shared:
                Job.queue_one_boot(build, mclass, bench, grid, params, seq, submission=sub, side=side)
            seq += 1
