"""The ETA learns how long jobs and builds take from the status history (kperf.core.lab.eta.history).

A job's duration is from its last lease to its done, as the StatusChange rows
record them, so a job leased again after a runner was lost counts its last run
only; work that predates the history falls back to its row's started/finished.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.utils import timezone

from kperf.core.lab import eta
from kperf.core.lifecycle import states
from kperf.core.models import Job, KernelBuild, MachineClass, StatusChange, Submission, Tree
from kperf_testing.lab import built

CLASS = "qemu-x86_64"


def _at(obj: Any, target: str, when: datetime) -> None:
    """Date the newest change of `obj` into `target`: the history's clock, set as if it had happened then."""
    row = StatusChange.objects.filter(kind=type(obj).__name__, object_id=obj.pk, target=target).latest("pk")
    StatusChange.objects.filter(pk=row.pk).update(at=when)


def _job(build: KernelBuild, mclass: MachineClass) -> Job:
    return Job.objects.create(build=build, benchmark="spawn", grid="quick", machine_class=mclass)


def test_job_durations_are_read_from_the_last_lease_to_done(db: Any, tmp_path: Path) -> None:
    mclass = MachineClass.objects.create(name=CLASS, arch="x86_64")
    build = built(Tree.objects.create(url=str(tmp_path / "tree")), "a" * 40, tmp_path)
    t0 = timezone.now() - timedelta(hours=2)

    # Leased, its runner lost (back to the queue), leased again 10 min later: 30 s of its last run count.
    requeued = _job(build, mclass)
    states.move(requeued, Job.Status.LEASED, started=t0)
    _at(requeued, Job.Status.LEASED, t0)
    states.move(requeued, Job.Status.QUEUED)
    states.move(requeued, Job.Status.LEASED, started=t0)  # a row whose started was not moved on
    _at(requeued, Job.Status.LEASED, t0 + timedelta(minutes=10))
    states.move(requeued, Job.Status.DONE, finished=t0 + timedelta(minutes=10, seconds=30))
    _at(requeued, Job.Status.DONE, t0 + timedelta(minutes=10, seconds=30))

    # A job finished before the history was kept: no rows, its own started/finished (40 s).
    old = Job.objects.create(
        build=build,
        benchmark="spawn",
        grid="quick",
        machine_class=mclass,
        status=Job.Status.DONE,
        started=t0,
        finished=t0 + timedelta(seconds=40),
    )
    StatusChange.objects.filter(kind="Job", object_id=old.pk).delete()

    typical = eta.history([mclass.pk]).job(CLASS, "spawn", "quick")
    # Two durations, 30 s and 40 s (median 35 s): the row's own started/finished
    # would have made the first 630 s (median 335 s).
    assert typical.mid == 35.0, typical


def test_build_durations_are_read_from_the_last_start_to_done(db: Any, tmp_path: Path) -> None:
    tree = Tree.objects.create(url=str(tmp_path / "tree"))
    t0 = timezone.now() - timedelta(hours=1)
    build = KernelBuild.objects.create(tree=tree, sha="c" * 40, arch="x86_64", config_digest="d" * 64)
    states.move(build, KernelBuild.Status.BUILDING, started=t0)
    _at(build, KernelBuild.Status.BUILDING, t0 + timedelta(minutes=5))
    states.move(build, KernelBuild.Status.DONE, finished=t0 + timedelta(minutes=9))
    _at(build, KernelBuild.Status.DONE, t0 + timedelta(minutes=9))

    typical = eta.history([]).build()
    assert typical.low == typical.high == 240.0, typical


def test_a_build_is_expected_incremental_where_the_lab_built_its_tree_before(db: Any, tmp_path: Path) -> None:
    """Finished builds are learned per kind (a warm object tree reused or not);
    one still to run is expected incremental once the tree was built for its arch."""
    tree = Tree.objects.create(url=str(tmp_path / "tree"))
    t0 = timezone.now() - timedelta(hours=1)
    first = KernelBuild.objects.create(tree=tree, sha="a" * 40, arch="x86_64", config_digest="d" * 64)
    assert eta._kind(tree.pk, "x86_64") == "clean"
    states.move(first, KernelBuild.Status.BUILDING, started=t0)
    _at(first, KernelBuild.Status.BUILDING, t0)
    states.move(first, KernelBuild.Status.DONE, finished=t0 + timedelta(minutes=10))
    _at(first, KernelBuild.Status.DONE, t0 + timedelta(minutes=10))
    second = KernelBuild.objects.create(
        tree=tree, sha="b" * 40, arch="x86_64", config_digest="d" * 64, reused_sha="a" * 40
    )
    states.move(second, KernelBuild.Status.BUILDING, started=t0 + timedelta(minutes=20))
    _at(second, KernelBuild.Status.BUILDING, t0 + timedelta(minutes=20))
    states.move(second, KernelBuild.Status.DONE, finished=t0 + timedelta(minutes=21))
    _at(second, KernelBuild.Status.DONE, t0 + timedelta(minutes=21))
    hist = eta.history([])
    assert hist.build("clean").mid == 600.0 and hist.build("incremental").mid == 60.0
    assert eta._kind(tree.pk, "x86_64") == "incremental"
    assert eta._kind(tree.pk, "arm64") == "clean"
    # Another submitter's scope is not reused; the lab's is.
    assert eta._kind(tree.pk, "x86_64", "user-7") == "incremental"
    KernelBuild.objects.filter(tree=tree).update(scope="user-3")
    assert eta._kind(tree.pk, "x86_64", "user-7") == "clean"


def test_a_running_job_has_run_since_its_last_lease(db: Any, alice: Any, tmp_path: Path) -> None:
    """What a running job has left is judged by how long it has run
    (kperf.core.lab.eta_model.remaining), counted as its kind's durations are:
    from its last lease. Its row's `started` stays at the first."""
    mclass = MachineClass.objects.create(name=CLASS, arch="x86_64")
    tree = Tree.objects.create(url=str(tmp_path / "tree"))
    sub = Submission.objects.create(
        owner=alice,
        tree=tree,
        head_ref="f",
        base_ref="master",
        benchmarks=["spawn"],
        arches=["x86_64"],
        status=Submission.Status.TESTING,
    )
    job = _job(built(tree, "a" * 40, tmp_path), mclass)
    now = timezone.now()
    states.move(job, Job.Status.LEASED, started=now - timedelta(hours=1))
    _at(job, Job.Status.LEASED, now - timedelta(hours=1))
    states.move(job, Job.Status.QUEUED)
    states.move(job, Job.Status.LEASED)  # the lease does not move `started` on
    _at(job, Job.Status.LEASED, now - timedelta(seconds=30))

    (running,) = eta._queues(sub, {job.pk}, {mclass.pk: mclass}, now)
    assert running.elapsed_s == 30.0 and running.own
