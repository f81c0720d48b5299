"""A submission's life: store it (checked as it was asked: kperf.core.submissions.request), resolve refs,
build, queue jobs, analyse.

Functions here take ids or model instances, change state inside
transactions, and leave the queueing of follow-up Celery tasks to
`transaction.on_commit`, so a worker never sees a row that is not there yet.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from kperf.core import benchmarks, triage
from kperf.core.builds import apply_series, artifacts, gitops, patch_series, profiles, queue
from kperf.core.lab import sharing
from kperf.core.lifecycle import dispatch, owners
from kperf.core.lifecycle.task_names import Task
from kperf.core.mail import alerts, recipients, replies
from kperf.core.models import (
    Job,
    KernelBuild,
    MachineClass,
    PatchSeries,
    Submission,
    SubmissionBuild,
    Tree,
)
from kperf.core.submissions import analysis, looks, shape_spread
from kperf.core.submissions.request import SubmissionRequest

log = logging.getLogger(__name__)


def create_submission(owner: User, req: SubmissionRequest) -> Submission:
    """Store a request (checked when it was made: kperf.core.submissions.request) and queue its preparation."""
    stored: dict[str, Any] = {}
    try:
        with transaction.atomic():
            sub = _create(owner, req, stored)
    except BaseException:
        # The mbox is stored last in the transaction: only a failed commit
        # (or a row update) gets here with it stored, and no row will name it.
        if stored:
            artifacts.discard(stored)
        raise
    log.info("submission %s: %s %s vs %s queued", sub.pk, req.tree, req.head_ref, req.base)
    return sub


def _create(owner: User, clean: SubmissionRequest, stored: dict[str, Any]) -> Submission:
    """The rows of a validated request (caller's transaction); `stored` gets the stored mbox's meta."""
    # Whom the result may be mailed to, counted under the owner's lock held to the commit
    # (recipients.RecipientError: nothing is stored).
    recipients.check_submission(owner, clean.mail_to)
    tree, _ = Tree.objects.get_or_create(url=clean.tree)
    sub = Submission.objects.create(
        owner=owner,
        tree=tree,
        kind=Submission.Kind.SERIES if clean.series else Submission.Kind.BRANCH,
        mail_to=clean.mail_to,
        head_ref=clean.head_ref,
        base_ref=clean.base,
        benchmarks=clean.benchmarks,
        grids=clean.grids,
        arches=clean.arches,
        min_effect_pct=clean.min_effect_pct,
        boot_params=clean.boot_params,
        thp=clean.thp,
        profile=clean.profile,
    )
    dispatch.after_commit(Task.PREPARE_SUBMISSION, sub.pk)
    if clean.series is not None and clean.mbox is not None:
        _store_series(sub, clean.series, clean.mbox, stored)
    return sub


def _store_series(sub: Submission, parsed: patch_series.Series, mbox: bytes, stored: dict[str, Any]) -> None:
    """Keep what was read from the mbox, then the mbox as it came (sha256 checked, its meta in `stored`).

    The row first: one PostgreSQL refuses leaves no mbox stored that no row
    names. ArtifactUnavailable when the storage cannot take it: the
    transaction rolls back and nothing of the submission is left.
    """
    ps = PatchSeries.objects.create(
        submission=sub,
        subject=parsed.subject[:300],
        author=parsed.author,
        message_id=parsed.message_id,
        has_cover=parsed.has_cover,
        patch_count=len(parsed.patches),
        patches=[p.as_dict() for p in parsed.patches],
    )
    stored.update(artifacts.put_bytes(f"series/{sub.pk}/patch_series.mbox", mbox))
    PatchSeries.objects.filter(pk=ps.pk).update(mbox=stored)


def prepare_submission(sub_id: int) -> None:
    """Fetch the tree, resolve both refs and attach (possibly shared) builds."""
    sub = Submission.objects.select_related("tree").filter(pk=sub_id).first()
    if sub is None or sub.status != Submission.Status.QUEUED:
        return
    tree = sub.tree
    try:
        gitops.update_mirror(tree.url, tree.mirror_path, timeout=settings.KPERF_GIT_TIMEOUT)
        # The mirror also holds every submitter's applied series: the owner reads only their own.
        reader = apply_series.reader(sub.owner_id, tree.pk)
        base_sha = _resolve(tree, sub.base_ref, "base", reader)
        head_sha = "" if sub.kind == Submission.Kind.SERIES else _resolve(tree, sub.head_ref, "branch", reader)
    except gitops.GitError as e:
        with transaction.atomic():
            locked = Submission.objects.select_for_update().get(pk=sub_id)
            # A fetch's own message says what the submitter may know (gitops.TreeUnreachable).
            message = str(e) if isinstance(e, gitops.FetchError) else f"could not fetch {tree.url}: {e}"
            owners.fail(SUBMISSION, locked, message)
        return
    Tree.objects.filter(pk=tree.pk).update(last_fetched=timezone.now())
    if sub.kind == Submission.Kind.SERIES:
        sub.base_sha = base_sha
        head_sha = _apply_series(sub)
        if not head_sha:
            return

    with transaction.atomic():
        locked = Submission.objects.select_for_update().get(pk=sub_id)
        if locked.status != Submission.Status.QUEUED:
            return
        locked.base_sha, locked.head_sha = base_sha, head_sha
        for arch in locked.arches:
            # One pair of builds per profile the submission's classes measure (builds.profiles).
            for profile in profiles.needed(arch, locked.profile):
                for side, sha in ((SubmissionBuild.Side.BASE, base_sha), (SubmissionBuild.Side.HEAD, head_sha)):
                    build = profiles.need_build(tree, sha, arch, profile, queue.scope_for(locked.owner))
                    SubmissionBuild.objects.get_or_create(submission=locked, build=build, side=side)
        owners.start(SUBMISSION, locked, base_sha=base_sha, head_sha=head_sha)


def _apply_series(sub: Submission) -> str:
    """The head sha of a series applied on base_sha; "" once it failed, or when it is tried again later.

    A patch that does not apply fails the submission at once: applying it
    again would give the same. Anything else (a full disk, git or the
    storage failing, the time limit) is the infrastructure's: it is tried
    again with backoff, and after KPERF_SERIES_APPLY_ATTEMPTS workers began
    it (a killed one counts) the submission fails saying whose fault it was.
    """
    attempt = _count_apply_attempt(sub.pk)
    if attempt is None:
        return ""
    limit = settings.KPERF_SERIES_APPLY_ATTEMPTS
    base = f"{sub.base_ref} ({sub.base_sha[:12]})"
    advice = "this is kperf's infrastructure, not the series: submit it again later, and tell the operator"
    if attempt > limit:
        _fail_series(
            sub.pk,
            f"the series could not be applied on {base}: {limit} workers began and none finished "
            f"(killed, or out of time); {advice}",
            None,
        )
        return ""
    try:
        return apply_series.apply(sub)
    except apply_series.SeriesApplyError as e:
        _fail_series(sub.pk, str(e), e.number)
    except patch_series.SeriesError as e:
        _fail_series(sub.pk, f"could not apply the series on {sub.base_ref}: {e}", None)
    except Exception as e:  # git, the storage, the disk, the soft time limit
        what = f"{type(e).__name__}: {e}"
        if attempt >= limit:
            _fail_series(sub.pk, f"could not apply the series on {base} in {attempt} attempts ({what}); {advice}", None)
            return ""
        # Before the sweeper's deadline, so it does not send another meanwhile.
        delay = min(settings.KPERF_REDRIVE_AFTER_SECONDS, 60 * 2 ** (attempt - 1))
        log.warning("submission %s: applying the series failed (%s); try %d in %d s", sub.pk, what, attempt + 1, delay)
        Submission.objects.filter(pk=sub.pk, status=Submission.Status.QUEUED).update(updated=timezone.now())
        dispatch.send(Task.PREPARE_SUBMISSION, sub.pk, countdown=delay)
    return ""


def _count_apply_attempt(sub_id: int) -> int | None:
    """This worker's attempt at applying the series (1 for the first); None when it is no longer queued.

    Committed before the work starts, so a worker that is killed counts too.
    """
    with transaction.atomic():
        locked = Submission.objects.select_for_update().filter(pk=sub_id).first()
        if locked is None or locked.status != Submission.Status.QUEUED:
            return None
        PatchSeries.objects.filter(submission=locked).update(apply_attempts=F("apply_attempts") + 1)
        # `updated` too: the sweeper gives a series being applied the task's whole time limit.
        Submission.objects.filter(pk=sub_id).update(updated=timezone.now())
        return PatchSeries.objects.get(submission=locked).apply_attempts


def _fail_series(sub_id: int, message: str, failed_patch: int | None) -> None:
    with transaction.atomic():
        locked = Submission.objects.select_for_update().get(pk=sub_id)
        if locked.status == Submission.Status.QUEUED:
            PatchSeries.objects.filter(submission=locked).update(failed_patch=failed_patch)
            owners.fail(SUBMISSION, locked, message)


def _resolve(tree: Tree, ref: str, what: str, reader: gitops.Reader) -> str:
    try:
        return gitops.resolve_ref(tree.mirror_path, ref, reader)
    except gitops.AmbiguousSha as e:
        raise gitops.GitError(f"the {what} {ref!r}: {e}") from None
    except gitops.GitError:
        # One answer whether the name is missing or someone else's series: no way to learn which exist.
        raise gitops.GitError(
            f"the {what} {ref!r} is not a branch, tag or commit in {tree.url} (give one of its branches or tags, "
            "a commit they reach, or a commit of a patch series of yours)"
        ) from None


def schedule_jobs(sub: Submission, links: list[SubmissionBuild]) -> None:
    """Queue one-boot jobs, base and head alternating, per machine class, benchmark and grid."""
    bases = [sb.build for sb in links if sb.side == SubmissionBuild.Side.BASE]
    heads = [sb.build for sb in links if sb.side == SubmissionBuild.Side.HEAD]
    for arch in sub.arches:
        for mclass in MachineClass.objects.filter(arch=arch).order_by("name"):
            profile = profiles.class_profile(mclass, sub.profile)
            base, head = profiles.pick(bases, arch, profile), profiles.pick(heads, arch, profile)
            if base is None or head is None:
                continue
            for bench, grid in benchmarks.submission_runs(sub):
                grid_boots, params = benchmarks.grid_for(bench, grid, Job.clock_for(mclass, bench, sub))
                boots = benchmarks.boots_per_side(grid_boots, mclass.clock)
                sharing.queue_boots(sub, base, head, mclass, bench, grid, params, boots)
                # A shape the lab has not measured yet: extra base boots measure its boot spread.
                shape_spread.queue_extra_base_boots(sub, base, mclass, bench, grid, params)


# --- A submission as an owner of builds and jobs (kperf.core.lifecycle.owners) ---------


def _owner_builds(sub: Submission) -> list[tuple[str, KernelBuild]]:
    links = sub.submission_builds.select_related("build").order_by("side", "build__arch")
    return [(f"{sb.side} kernel", sb.build) for sb in links]


def _owner_queue(sub: Submission, builds: list[tuple[str, KernelBuild]]) -> None:
    schedule_jobs(sub, list(SubmissionBuild.objects.filter(submission=sub).select_related("build")))


def _owner_failed(sub: Submission) -> None:
    # The submitter hears of a failure as of a verdict (kperf.core.mail.alerts).
    alerts.submission_finished(sub)


def _owner_finished(sub: Submission) -> None:
    alert = alerts.submission_finished(sub)
    # The alert's Reply-To carries a token for this triage (triage by mail, docs/triage.md).
    replies.issue(alert, triage.open_for_submission(sub))


_JOB_WHAT = {"boot": "did not boot", "benchmark": "ran but the benchmark failed", "infra": "could not be run"}


def _owner_job_failed(sub: Submission, job: Job) -> str:
    # A build's warnings (a benchmark module that did not compile, options a
    # fragment lacks) can be why a kernel did not boot or a benchmark failed;
    # they are no part of the runner's own fault, and glued onto one they
    # read as its cause (issue 41).
    kernels_fault = job.failure_kind != Job.FailureKind.INFRA
    said = f"; its build said: {'; '.join(job.build.warnings)}" if job.build.warnings and kernels_fault else ""
    return (
        f"the {job.side} kernel ({job.build.sha[:12]}) {_JOB_WHAT.get(job.failure_kind, 'failed')} "
        f"on {job.machine_class.name} (job {job.pk}, {job.failure_kind} failure): {job.failure_message}{said}"
    )


SUBMISSION = owners.OwnerKind(
    name="submission",
    model=Submission,
    job_field="submission",
    advance_task=Task.ADVANCE_SUBMISSION,
    analyse_task=Task.ANALYSE_SUBMISSION,
    builds=_owner_builds,
    queue_jobs=_owner_queue,
    failed=_owner_failed,
    job_failed=_owner_job_failed,
    analyse=analysis.analyse_submission,
    # Its own jobs and the base boots it shares (kperf.core.lab.sharing).
    jobs=sharing.measured_jobs,
    interim=looks.interim_looks,
    look_task=Task.LOOK_SUBMISSION,
    finished=_owner_finished,
)
