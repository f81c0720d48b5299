"""Tracked branches: poll, build and measure new commits, find change points.

A tracked branch is followed along its first-parent history. Each poll
fetches the tree; when the branch moved, the new commits (at most
`max_commits` of them, evenly spaced, newest included) become
`BranchCommit`s whose kernels are built (shared with any submission of the
same sha) and measured with one-boot jobs. When a commit's jobs are in, the
series of every metric on that machine class is searched for change points
with `kperf.stats.changepoints` and the result replaces the stored one.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import Max, Sum
from django.utils import timezone

from kperf.core import access, benchmarks
from kperf.core.builds import gitops, profiles
from kperf.core.lifecycle import dispatch, owners
from kperf.core.lifecycle.task_names import Task
from kperf.core.mail import confirmations, recipients
from kperf.core.models import (
    BranchCommit,
    ChangePoint,
    CommitSummary,
    Job,
    KernelBuild,
    Sample,
    TrackedBranch,
    Tree,
)
from kperf.core.results import summaries
from kperf.core.submissions.checks import (
    SubmissionError,
    validate_measurement,
    validate_min_effect,
    validate_ref,
    validate_tree,
)
from kperf.core.tracking import bisection, change_points
from kperf.core.tracking.request import TrackRequest

log = logging.getLogger(__name__)

MAX_COMMITS_LIMIT = 500
MAX_BACKFILL = 200
SERIES_WINDOW = summaries.SERIES_WINDOW


class AlreadyTracked(Exception):
    """The branch is tracked by someone else and the acting user may not change it; the message says what to do."""

    def __init__(self, message: str, branch_id: int) -> None:
        super().__init__(message)
        self.branch_id = branch_id


def _taken(branch: TrackedBranch) -> AlreadyTracked:
    what = f"the branch {branch.branch!r} of {branch.tree.url}"
    if branch.owner.is_staff:
        return AlreadyTracked(
            f"{what} is already tracked by an admin, as one of the lab's reference series: read it at "
            f"/branches/{branch.pk} (GET /api/v1/branches/{branch.pk}); ask an admin to change its settings",
            branch.pk,
        )
    return AlreadyTracked(
        f"{what} is already tracked by another user, and only they or an admin may change it: ask its owner "
        "(an admin can tell you who) or an admin, e.g. to add your address to its notify list",
        branch.pk,
    )


def track(user: User, req: TrackRequest) -> TrackedBranch:
    """Start tracking a branch (or update the settings of one already tracked) and poll it now.

    `user` is who asks: a new branch becomes theirs; one already tracked is
    changed only by its owner or staff (AlreadyTracked otherwise), and keeps
    its owner when staff change it."""
    # The same checks as a submission: URL, ref syntax, benchmarks, grid, arches, profile.
    tree_url = validate_tree(req.tree)
    branch_name = validate_ref(req.branch, "branch")
    if branch_name.startswith("refs/"):
        # A poll reads refs/heads/<branch> alone: a full ref name would never
        # be found, and refs/kperf/ holds other submitters' series.
        raise SubmissionError(
            f"the branch {branch_name!r} is a full ref name: give the name of one of the tree's branches "
            "as `git branch` shows it (e.g. 'master', not 'refs/heads/master')",
            "branch",
        )
    measure = validate_measurement(list(req.benchmarks), req.grid, [], list(req.arches), req.profile)
    min_effect = validate_min_effect(req.min_effect_pct)
    try:
        profiles.check_branch_profile(measure.arches, measure.profile)
    except profiles.ProfileError as e:
        raise SubmissionError(str(e), "profile") from None
    if not 0 <= req.boots <= 100:
        raise SubmissionError("boots must be 0 (the grid's boots per side) to 100", "boots")
    if not 1 <= req.max_commits <= MAX_COMMITS_LIMIT:
        raise SubmissionError(f"max_commits must be 1 to {MAX_COMMITS_LIMIT}", "max_commits")
    if not 0 <= req.backfill <= MAX_BACKFILL:
        raise SubmissionError(f"backfill must be 0 to {MAX_BACKFILL} commits", "backfill")
    notify = list(dict.fromkeys(a.strip() for a in req.notify if a.strip()))
    if len(notify) > recipients.NOTIFY_MAX:
        raise SubmissionError(
            f"notify names {len(notify)} addresses; a tracked branch mails at most {recipients.NOTIFY_MAX} "
            "besides its owner: name a mailing list instead of its readers",
            "notify",
        )
    for address in notify:
        try:
            validate_email(address)
        except ValidationError:
            raise SubmissionError(f"{address!r} is not an e-mail address", "notify") from None
    # What the caller chose: a branch tracked again takes them (and is enabled), a new one also its owner.
    chosen = {
        "benchmarks": measure.benchmarks,
        "grid": measure.grids[0],
        "arches": measure.arches,
        "boots": req.boots,
        "max_commits": req.max_commits,
        "notify": notify,
        "bisect": req.bisect,
        "min_effect_pct": min_effect,
        "profile": measure.profile,
    }

    with transaction.atomic():
        tree, _ = Tree.objects.get_or_create(url=tree_url)
        branch, created = TrackedBranch.objects.update_or_create(
            tree=tree,
            branch=branch_name,
            defaults={**chosen, "enabled": True},
            create_defaults={**chosen, "owner": user},
        )
        # Checked after update_or_create, which holds the row's lock, so no one
        # can take the branch between the check and the write; raising here
        # rolls the update back.
        if not created and not access.may_change_branch(user, branch):
            raise _taken(branch)
        # Addresses kperf may not mail yet are asked to confirm, for the owner; until then
        # the branch's regressions are not mailed to them (kperf.core.mail.recipients).
        confirmations.ask_watchers(branch)
        branch_id, backfill = branch.pk, req.backfill if created else 0
        dispatch.after_commit(Task.POLL_BRANCH, branch_id, backfill)
    log.info("tracking %s %s (%s)", tree_url, branch_name, "new" if created else "updated")
    return branch


def poll_all() -> int:
    """Queue a poll of every enabled tracked branch (the beat task); returns how many."""
    ids = list(TrackedBranch.objects.filter(enabled=True).values_list("pk", flat=True))
    for branch_id in ids:
        dispatch.send(Task.POLL_BRANCH, branch_id)
    return len(ids)


def _spread(commits: list[tuple[str, str, int]], keep: int) -> list[int]:
    """Indices of `keep` evenly spaced commits, the newest always among them."""
    n = len(commits)
    if n <= keep:
        return list(range(n))
    step = n / keep
    return sorted({n - 1 - int(i * step) for i in range(keep)})


def poll_branch(branch_id: int, backfill: int = 0) -> list[BranchCommit]:
    """Fetch the tree; if the branch moved, queue builds for its new commits."""
    branch = TrackedBranch.objects.select_related("tree").get(pk=branch_id)
    tree = branch.tree
    mirror = tree.mirror_path
    try:
        gitops.update_mirror(tree.url, mirror, timeout=settings.KPERF_GIT_TIMEOUT)
        try:
            # The tree's published branch exactly, as anyone may read it: never a series kperf applied.
            new_head = gitops.resolve_ref(mirror, f"refs/heads/{branch.branch}", gitops.PUBLIC)
        except gitops.GitError:
            raise gitops.GitError(f"there is no branch {branch.branch!r} in {tree.url}") from None
        Tree.objects.filter(pk=tree.pk).update(last_fetched=timezone.now())
        if new_head == branch.head_sha:
            TrackedBranch.objects.filter(pk=branch_id).update(last_polled=timezone.now(), last_error="")
            return []
        known = {c.sha: c for c in branch.commits.all()}
        # A forced push: commits no longer in the branch's history leave the
        # series (their measurements stay), and the series continues from the
        # newest measured commit that is still there. A fast-forward (the
        # usual case) drops nothing, and needs no check per commit.
        fast_forward = bool(branch.head_sha) and gitops.is_ancestor(mirror, branch.head_sha, new_head)
        dropped = [
            sha
            for sha, c in known.items()
            if c.on_branch and not fast_forward and not gitops.is_ancestor(mirror, sha, new_head)
        ]
        still = [c for c in known.values() if c.on_branch and c.sha not in dropped]
        since = max(still, key=lambda c: c.position).sha if still else ""
        if since:
            chain = gitops.first_parent_commits(mirror, new_head, since=since)
        else:
            chain = gitops.first_parent_commits(mirror, new_head, limit=1 + max(0, backfill))
        # The first-parent log is a chain, so positions follow the list.
        base_position = gitops.count_first_parent(mirror, chain[0][0]) if chain else 0
        candidates = [(sha, subject, base_position + i) for i, (sha, subject) in enumerate(chain) if sha not in known]
    except gitops.GitError as e:
        TrackedBranch.objects.filter(pk=branch_id).update(last_polled=timezone.now(), last_error=str(e)[:2000])
        log.warning("tracked branch %s: %s", branch_id, e)
        return []

    chosen = _spread(candidates, branch.max_commits)
    with transaction.atomic():
        locked = TrackedBranch.objects.select_for_update().select_related("tree").get(pk=branch_id)
        if dropped:
            BranchCommit.objects.filter(branch=locked, sha__in=dropped).update(on_branch=False)
        created = bisection.add_commits(locked, [candidates[i] for i in chosen])
        locked.head_sha = new_head
        locked.last_polled = timezone.now()
        locked.last_error = ""
        locked.save(update_fields=["head_sha", "last_polled", "last_error"])
    log.info(
        "tracked branch %s moved to %s: %d new commits, %d measured, %d left the branch",
        branch_id,
        new_head[:12],
        len(candidates),
        len(created),
        len(dropped),
    )
    return created


def boots_for(branch: TrackedBranch, bench: str, clock: str) -> int:
    """The branch's own boots per commit, or the grid's on this clock (benchmarks.boots_per_side)."""
    grid_boots, _ = benchmarks.grid_for(bench, branch.grid)
    return branch.boots or benchmarks.boots_per_side(grid_boots, clock)


def reanalyse_branch(branch_id: int) -> None:
    """Search again every series of a branch that has change points."""
    branch = TrackedBranch.objects.select_related("tree", "owner").get(pk=branch_id)
    groups = set(branch.change_points.values_list("machine_class_id", "benchmark", "clock"))
    # Each series takes the branch's lock only to store its answer (kperf.core.tracking.change_points).
    for mclass_id, bench, clock in sorted(groups):
        analyse_series(branch, mclass_id, bench, clock)


def queue_commit_jobs(commit: BranchCommit, builds: list[KernelBuild]) -> None:
    """One-boot jobs for every build of a commit, on every machine class of its arch, per benchmark."""
    branch = commit.branch
    seq = (Job.objects.filter(branch_commit=commit).aggregate(m=Max("seq"))["m"] or 0) + 1
    for build in builds:
        # A commit's builds are its history on the classes of their profile (builds.profiles).
        for mclass in profiles.branch_classes(build.arch, branch.profile):
            if profiles.class_profile(mclass, branch.profile) != build.profile:
                continue
            for bench in branch.benchmarks:
                _, params = benchmarks.grid_for(bench, branch.grid, mclass.clock)
                for _ in range(boots_for(branch, bench, mclass.clock)):
                    Job.queue_one_boot(build, mclass, bench, branch.grid, params, seq, branch_commit=commit)
                    seq += 1


def analyse_branch_commit(commit_id: int) -> None:
    """Re-search the series this commit joined, then mark it done."""
    commit = BranchCommit.objects.select_related("branch").get(pk=commit_id)
    if commit.status != BranchCommit.Status.ANALYSING:
        return
    groups = set(Job.objects.filter(branch_commit=commit).values_list("machine_class_id", "benchmark", "clock"))
    # The statistics run with no lock held; each series locks the branch only to
    # check that it did not move meanwhile and to store its answer, so two
    # commits finishing together never interleave their replacements.
    for mclass_id, bench, clock in sorted(groups):
        analyse_series(commit.branch, mclass_id, bench, clock)
    with transaction.atomic():
        commit = BranchCommit.objects.select_for_update().get(pk=commit_id)
        if commit.status == BranchCommit.Status.ANALYSING:
            owners.finish(commit)


Series = dict[str, list[list[list[float]]]]  # metric -> per commit -> per boot -> iterations


def series(
    branch: TrackedBranch,
    mclass_id: int,
    bench: str,
    clock: str,
    *,
    since: int | None = None,
    until: int | None = None,
    limit: int = SERIES_WINDOW,
    max_samples: int | None = None,
) -> tuple[list[BranchCommit], Series, bool]:
    """The newest `limit` measured commits at positions since..until, in
    branch order, and per metric one entry per commit: its boots, each a list
    of iterations (empty where nothing ran); and whether older commits are
    left. One clock: a commit measured only with another clock is not in it.
    It reads raw samples, so callers bound it: `limit` commits, and with
    `max_samples` only as many of the newest as hold that many samples
    together (at least one), counted from the commits' summaries."""
    measured = branch.commits.filter(
        on_branch=True, status__in=[BranchCommit.Status.DONE, BranchCommit.Status.ANALYSING]
    ).filter(jobs__machine_class_id=mclass_id, jobs__benchmark=bench, jobs__clock=clock, jobs__status=Job.Status.DONE)
    if since is not None:
        measured = measured.filter(position__gte=since)
    if until is not None:
        measured = measured.filter(position__lte=until)
    newest = list(measured.distinct().order_by("-position")[: limit + 1])
    more = len(newest) > limit
    newest = newest[:limit]
    if max_samples is not None and newest:
        summaries.summarise(
            Job.objects.filter(branch_commit__in=newest, machine_class_id=mclass_id, benchmark=bench, clock=clock)
        )
        held = dict(
            CommitSummary.objects.filter(commit__in=newest, machine_class_id=mclass_id, benchmark=bench, clock=clock)
            .values("commit_id")
            .annotate(n=Sum("samples"))
            .values_list("commit_id", "n")
        )
        total, keep = 0, 0
        for c in newest:
            total += held.get(c.pk, 0)
            if keep and total > max_samples:
                break
            keep += 1
        more = more or keep < len(newest)
        newest = newest[:keep]
    commits = newest[::-1]
    where = {c.pk: i for i, c in enumerate(commits)}
    per_boot: dict[tuple[str, int, int], dict[int, float]] = defaultdict(dict)
    rows = (
        Sample.objects.filter(
            boot_record__job__branch_commit__in=commits,
            boot_record__job__machine_class_id=mclass_id,
            boot_record__job__benchmark=bench,
            boot_record__job__clock=clock,
            boot_record__job__status=Job.Status.DONE,
        )
        .values_list("metric", "boot_record__job__branch_commit_id", "boot_record_id", "iteration", "value")
        .order_by("boot_record__job__seq", "boot_record__boot", "iteration")
    )
    for metric, commit_id, boot_id, iteration, value in rows:
        per_boot[(metric, where[commit_id], boot_id)][iteration] = value
    out: Series = defaultdict(lambda: [[] for _ in commits])
    for (metric, idx, _), iters in per_boot.items():
        out[metric][idx].append([iters[i] for i in sorted(iters)])
    return commits, dict(out), more


def analyse_series(branch: TrackedBranch, mclass_id: int, bench: str, clock: str) -> list[ChangePoint]:
    """Find the change points of every metric of one benchmark on one machine
    class and clock, from the summaries, and store them in place of the previous answer."""
    return change_points.analyse_series(branch, mclass_id, bench, clock)


# --- A tracked commit as an owner of builds and jobs (kperf.core.lifecycle.owners) -----


def _owner_builds(commit: BranchCommit) -> list[tuple[str, KernelBuild]]:
    return [("kernel", b) for b in commit.builds.order_by("arch")]


def _owner_queue(commit: BranchCommit, builds: list[tuple[str, KernelBuild]]) -> None:
    queue_commit_jobs(commit, [b for _, b in builds])


def _owner_failed(commit: BranchCommit) -> None:
    # A bisection may have been waiting for this commit: look again, so it
    # picks another commit of the range or mails what it has.
    if commit.branch.change_points.exists():
        dispatch.after_commit(Task.REANALYSE_BRANCH, commit.branch_id)


def _owner_job_failed(commit: BranchCommit, job: Job) -> str:
    return (
        f"the kernel did not run {job.benchmark} on {job.machine_class.name} "
        f"(job {job.pk}, {job.failure_kind} failure): {job.failure_message}"
    )


def _owner_jobs(commit: BranchCommit) -> list[Job]:
    return list(commit.jobs.select_related("build", "machine_class"))


COMMIT = owners.OwnerKind(
    name="branch commit",
    model=BranchCommit,
    job_field="branch_commit",
    advance_task=Task.ADVANCE_BRANCH_COMMIT,
    analyse_task=Task.ANALYSE_BRANCH_COMMIT,
    builds=_owner_builds,
    queue_jobs=_owner_queue,
    failed=_owner_failed,
    job_failed=_owner_job_failed,
    analyse=analyse_branch_commit,
    jobs=_owner_jobs,
)
