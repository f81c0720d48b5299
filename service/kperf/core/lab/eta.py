"""When a submission's verdict will come: the situation read from the database.

kperf.core.lab.eta_model does the arithmetic on plain data; this module says
what is true now: the recent build and job durations (read from the status
history, kperf.core.models.StatusChange), the runners in
service per machine class, the builds still to run and the jobs ahead in
claim order (kperf.core.lab.claim_order, as kperf.core.lab.waiting counts them).
The page, the API (`eta`, `eta_reason`, `jobs_ahead`) and `kperf status`
show the same answer (docs/submitting.md, "When the verdict comes").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db.models import F, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone
from typing_extensions import TypedDict

from kperf.core import benchmarks
from kperf.core.lab import eta_cold, host_speed
from kperf.core.lab.claim_order import claim_key
from kperf.core.lab.eta_model import (
    RECENT,
    Estimate,
    History,
    Prior,
    Situation,
    Unknown,
    Work,
    estimate,
    sentence,
)
from kperf.core.lab.waiting import SILENT_AFTER
from kperf.core.models import Job, KernelBuild, MachineClass, Runner, StatusChange, Submission

# Recent finished jobs read at most: RECENT per kind of job for the few
# kinds a lab runs, in one query.
_JOB_ROWS = 50 * RECENT


def _timeline(kind: str, running: str) -> tuple[Subquery, Subquery]:
    """When the row last started to run and when it was done, from its status history.

    The history (StatusChange, written with every move) is the record of how
    long each status lasted; a job leased again after a lost runner, or a
    build taken again after a dead worker, ran from its last start. Rows that
    predate the history fall back to their own started/finished.
    """
    changes = StatusChange.objects.filter(kind=kind, object_id=OuterRef("pk"))
    return (
        Subquery(changes.filter(target=running).order_by("-at").values("at")[:1]),
        Subquery(changes.filter(target="done").order_by("-at").values("at")[:1]),
    )


def _seconds(ran_from: datetime | None, done_at: datetime | None, started: datetime, finished: datetime) -> float:
    if ran_from is not None and done_at is not None and done_at >= ran_from:
        return (done_at - ran_from).total_seconds()
    return (finished - started).total_seconds()


def history(classes: list[int], prior: Prior | None = None) -> History:
    """Recent durations of finished builds and of finished jobs on `classes`, oldest first;
    `prior` (the host's speed) for what none was measured of."""
    hist = History(prior=prior)
    job_ran, build_ran = _timeline("Job", Job.Status.LEASED), _timeline("KernelBuild", KernelBuild.Status.BUILDING)
    jobs = (
        Job.objects.filter(
            machine_class_id__in=classes,
            status=Job.Status.DONE,
            started__isnull=False,
            finished__isnull=False,
            # Calibration boots (pinned) are not what a submission waits for.
            pinned_runner__isnull=True,
        )
        .annotate(ran_from=job_ran[0], done_at=job_ran[1])
        .order_by("-finished")
        .values_list("machine_class__name", "benchmark", "grid", "ran_from", "done_at", "started", "finished")[
            :_JOB_ROWS
        ]
    )
    for mclass, bench, grid, ran_from, done_at, started, finished in reversed(list(jobs)):
        hist.add_job(mclass, bench, grid, _seconds(ran_from, done_at, started, finished))
    builds = (
        KernelBuild.objects.filter(status=KernelBuild.Status.DONE, started__isnull=False, finished__isnull=False)
        .annotate(ran_from=build_ran[0], done_at=build_ran[1])
        .order_by("-finished")
        # RECENT of each kind at least, as they come: clean and incremental builds mixed.
        .values_list("ran_from", "done_at", "started", "finished", "reused_sha")[: 4 * RECENT]
    )
    for ran_from, done_at, started, finished, reused in reversed(list(builds)):
        hist.add_build(_seconds(ran_from, done_at, started, finished), "incremental" if reused else "clean")
    return hist


def _kind(tree_id: int, arch: str, scope: str | None = None) -> str:
    """What a build still to run will likely be: incremental where the lab has
    built this tree for this arch before (a warm object tree to start from, in
    the build's scope or the lab's), clean where it never has."""
    done = KernelBuild.objects.filter(tree_id=tree_id, arch=arch, status=KernelBuild.Status.DONE)
    if scope is not None:
        done = done.filter(scope__in={scope, "lab"})
    return "incremental" if done.exists() else "clean"


def _runners(classes: list[int], now: datetime) -> dict[int, int]:
    """Runners in service per class: good health, heard from lately (as kperf.core.lab.waiting judges)."""
    counts = dict.fromkeys(classes, 0)
    for mclass_id in Runner.objects.filter(
        machine_class_id__in=classes, health=Runner.Health.GOOD, last_heartbeat__gte=now - SILENT_AFTER
    ).values_list("machine_class_id", flat=True):
        counts[mclass_id] += 1
    return counts


def _elapsed(started: datetime | None, now: datetime) -> float | None:
    return max((now - started).total_seconds(), 0.0) if started else None


class _Builds(NamedTuple):
    mine: list[float | None]  # the submission's unfinished builds: seconds running, None while queued
    mine_kinds: list[str]
    ahead: list[float | None]  # others' builds before them
    workers: int
    # The kinds of the builds ahead, read only before any build was measured
    # (eta_model.Situation.ahead_kinds); empty once one was.
    ahead_kinds: list[str]


def _own_kinds(rows: list[tuple[int, int, str, str | None]]) -> list[str]:
    """The kinds of a submission's builds (id, tree, arch, scope): the first of a
    tree and arch as the lab's past says (`_kind`), the later ones incremental:
    they start from the object tree the first leaves warm (a head after its
    base), which on a fresh lab made a `quick` submission's first estimate
    count two clean builds where it ran one."""
    return [
        "incremental" if any(o[1:3] == (tree, arch) and o[0] < pk for o in rows) else _kind(tree, arch, scope)
        for pk, tree, arch, scope in rows
    ]


def _builds(sub: Submission, now: datetime) -> _Builds:
    """The submission's unfinished builds, the builds ahead of them, their kinds, and how many build at once."""
    if sub.status == Submission.Status.QUEUED:
        # Refs not resolved yet: a base and a head per arch, some perhaps already built.
        own_rows: list[tuple[int, datetime | None, datetime, int, str, str]] = []
        mine: list[float | None] = [None] * (2 * len(sub.arches))
        # Base and head of an arch: the head builds after the base, in its warm tree.
        mine_kinds = [kind for arch in sub.arches for kind in (_kind(sub.tree_id, arch), "incremental")]
        oldest = sub.created
    elif sub.status == Submission.Status.BUILDING:
        own_rows = list(
            KernelBuild.objects.filter(
                submission_builds__submission=sub,
                status__in=(KernelBuild.Status.QUEUED, KernelBuild.Status.BUILDING),
            )
            .distinct()
            .values_list("id", "started", "created", "tree_id", "arch", "scope")
        )
        mine = [_elapsed(started, now) for _, started, *_rest in own_rows]
        mine_kinds = _own_kinds([(pk, tree, arch, scope) for pk, _s, _c, tree, arch, scope in own_rows])
        oldest = min((created for _, _s, created, *_rest in own_rows), default=now)
    else:
        # Its builds are done; those running or queued now still matter to
        # it when an older submission waits for them (kperf.core.lab.eta_model.Work).
        own_rows, mine, mine_kinds, oldest = [], [], [], now
    busy = KernelBuild.objects.filter(status=KernelBuild.Status.BUILDING, lease_expires__gt=now)
    waiting = KernelBuild.objects.filter(status=KernelBuild.Status.QUEUED, created__lt=oldest)
    own_ids = {row[0] for row in own_rows}
    rows = [
        row
        for row in (busy | waiting).order_by("pk").values_list("id", "status", "started", "tree_id", "arch", "scope")
        if row[0] not in own_ids
    ]
    ahead = [
        _elapsed(started, now) if status == KernelBuild.Status.BUILDING else None for _, status, started, *_r in rows
    ]
    # Their kinds matter only to the host's prior, before any build is measured.
    measured = KernelBuild.objects.filter(status=KernelBuild.Status.DONE).exists()
    ahead_kinds = [] if measured else _own_kinds([(pk, tree, arch, scope) for pk, _s, _t, tree, arch, scope in rows])
    # As many build workers as there are builds running now, at least one.
    return _Builds(mine, mine_kinds, ahead, max(1, busy.count()), ahead_kinds)


def _planned(sub: Submission, classes: dict[int, MachineClass], own: bool = True) -> list[Work]:
    """The first look's jobs before they are queued: every class of each arch, each benchmark and grid, both sides."""
    out = []
    for mclass in sorted(classes.values(), key=lambda m: m.name):
        if mclass.arch not in sub.arches:
            continue
        for bench, grid in benchmarks.submission_runs(sub):
            grid_boots, _ = benchmarks.grid_for(bench, grid)
            boots = benchmarks.boots_per_side(grid_boots, mclass.clock)
            out += [Work(mclass.name, bench, grid, own=own, after_builds=True)] * (2 * boots)
    return out


def _queues(sub: Submission, own_ids: set[int], classes: dict[int, MachineClass], now: datetime) -> list[Work]:
    """Per class: the running jobs, then the queued ones in claim order up to the submission's last."""
    planned = sub.status in (Submission.Status.QUEUED, Submission.Status.BUILDING)
    rows = (
        Job.objects.filter(machine_class_id__in=classes, status__in=(Job.Status.QUEUED, Job.Status.LEASED))
        # Only calibrations and older submissions (and its own jobs) can be ahead.
        .filter(Q(pinned_runner__isnull=False) | Q(submission_id__lte=sub.pk) | Q(id__in=own_ids))
        # A running job's time so far from its last lease, as its kind's
        # durations are read (`history`): `started` stays at the first lease
        # when a lost runner's job is leased again, and what a running job
        # has left is judged by how long it has run (eta_model.remaining).
        .annotate(ran_from=Coalesce(_timeline("Job", Job.Status.LEASED)[0], F("started")))
        .values_list(
            "id",
            "status",
            "ran_from",
            "machine_class_id",
            "benchmark",
            "grid",
            "pinned_runner_id",
            "submission_id",
            "branch_commit_id",
            "seq",
        )
    )
    running: list[Work] = []
    queued: list[tuple[tuple[Any, ...], Work]] = []
    for pk, status, started, mclass_id, bench, grid, pinned, sub_id, commit, seq in rows:
        own = pk in own_ids
        name = classes[mclass_id].name
        if status == Job.Status.LEASED:
            # Running now: it holds a runner until it ends.
            running.append(Work(name, bench, grid, own=own, elapsed_s=_elapsed(started, now) or 0.0))
            continue
        # A shared base boot another submission queued runs at its owner's place in the order.
        queued.append((claim_key(pinned, sub_id, commit, seq, pk), Work(name, bench, grid, own=own)))
    # Older submissions still building queue their jobs when their builds
    # are done, and those claim before this one's queued jobs.
    building = Submission.objects.filter(
        status__in=(Submission.Status.QUEUED, Submission.Status.BUILDING), pk__lt=sub.pk
    ).order_by("pk")
    for older in [*building, *([sub] if planned else [])]:
        queued += [
            (claim_key(None, older.pk, None, i, 0), w)
            for i, w in enumerate(_planned(older, classes, own=older.pk == sub.pk))
        ]
    queued.sort(key=lambda kw: kw[0])
    ordered = [w for _, w in queued]
    out = list(running)
    for name in sorted({c.name for c in classes.values()}):
        mine = [w for w in ordered if w.machine_class == name]
        last = max((i for i, w in enumerate(mine) if w.own), default=-1)
        out += mine[: last + 1]
    return out


def _more(sub: Submission, own: Sequence[Mapping[str, Any]], classes: dict[int, MachineClass]) -> list[Work]:
    """Jobs further looks may still add: up to the boot budget per side, per class, benchmark and grid."""
    out = []
    for mclass in sorted(classes.values(), key=lambda m: m.name):
        if mclass.arch not in sub.arches:
            continue
        for bench, grid in benchmarks.submission_runs(sub):
            mine = [
                j for j in own if j["machine_class"] == mclass.name and j["benchmark"] == bench and j["grid"] == grid
            ]
            # The clock its jobs were queued with; before that, the class's (as schedule_jobs does).
            clock = next((j["clock"] for j in mine), mclass.clock)
            plan = benchmarks.look_plan(bench, grid, clock)
            budget = plan.looks[-1]
            have = {
                side: sum(j["boots"] for j in mine if j["side"] == side and j["status"] != Job.Status.CANCELLED)
                for side in ("base", "head")
            }
            if sub.status in (Submission.Status.QUEUED, Submission.Status.BUILDING):
                have = dict.fromkeys(have, plan.looks[0])
            extra = sum(max(budget - n, 0) for n in have.values())
            out += [Work(mclass.name, bench, grid, own=True)] * extra
    return out


def _prior(sub: Submission, classes: dict[int, MachineClass], s: Situation) -> Prior | None:
    """What the host's measured speed says the submission's kinds of work take (kperf.core.lab.host_speed)."""
    # A submission without a profile of its own builds each class's: the slowest of them.
    profiles = [sub.profile] if sub.profile else [m.profile for m in classes.values()]
    profile = max(profiles, key=lambda p: eta_cold.CLEAN_BUILD_S.get(p, 0.0), default="tiny")
    work = {(w.benchmark, w.grid) for w in [*s.jobs, *s.more]}
    return host_speed.prior(profile, sub.arches, classes.values(), work)


class EtaEstimate(TypedDict):
    seconds: int
    at: str
    low: int
    high: int
    more_jobs: int
    basis: str
    # One sentence for the page and `kperf status`.
    line: str


class Eta(TypedDict):
    """When the verdict will come: an estimate, or None and the reason there is none."""

    eta: EtaEstimate | None
    eta_reason: str | None
    # Queued jobs of others before the submission's first, per machine class.
    jobs_ahead: dict[str, int]


def for_submission(sub: Submission, jobs: Sequence[Mapping[str, Any]]) -> Eta:
    """`eta` (or None and `eta_reason`) and `jobs_ahead` per class for the API, the page and the CLI.

    `jobs` are the presenter's job rows of the submission, shared base boots included.
    """
    if sub.is_final:
        return {"eta": None, "eta_reason": f"the submission is {sub.status}", "jobs_ahead": {}}
    now = timezone.now()
    classes = {m.pk: m for m in MachineClass.objects.filter(arch__in=sub.arches)}
    if not classes:
        return {"eta": None, "eta_reason": "no machine class runs its architectures", "jobs_ahead": {}}
    runners = _runners(list(classes), now)
    builds = _builds(sub, now)
    situation = Situation(
        runners={classes[c].name: n for c, n in runners.items()},
        builds=builds.mine,
        builds_ahead=builds.ahead,
        build_workers=builds.workers,
        build_kinds=builds.mine_kinds,
        ahead_kinds=builds.ahead_kinds,
        jobs=_queues(sub, {j["id"] for j in jobs}, classes, now),
        more=_more(sub, jobs, classes),
    )
    est = estimate(situation, history(list(classes), _prior(sub, classes, situation)))
    if isinstance(est, Unknown):
        return {"eta": None, "eta_reason": est.reason, "jobs_ahead": {}}
    return {"eta": as_dict(est, now), "eta_reason": None, "jobs_ahead": est.jobs_ahead}


def as_dict(est: Estimate, now: datetime) -> EtaEstimate:
    return {
        "seconds": round(est.seconds),
        "at": (now + timedelta(seconds=est.seconds)).isoformat(),
        "low": round(est.low),
        "high": round(est.high),
        "more_jobs": est.more_jobs,
        "basis": est.basis,
        "line": sentence(est, now),
    }
