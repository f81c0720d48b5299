"""Who may see and change what: the per-object rules, declared once.

The API, the web pages and the domain functions ask these; none of them
filters by owner on its own. The policy, for people, is docs/operations.md
("Who may see and change what"):

- staff users see and change everything;
- a submission is its owner's alone;
- a tracked branch is readable by its owner, and by everyone when its owner
  is staff (an admin's branches are the lab's reference series), and is
  changed only by its owner or staff;
- a build or a job is visible through a submission or branch that is;
  imported mmtests runs are lab-wide reference data;
- a base boot shared between submissions (kperf.core.lab.sharing) is visible
  to every sharer, as a boot of its own base kernel: its samples and
  console, never the submission that owns it.

Something a user may not see is answered as if it did not exist (404), so
ids do not reveal other people's work.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet

from kperf.core.models import BranchCommit, Job, KernelBuild, SharedJob, Submission, SubmissionBuild, TrackedBranch
from kperf.core.models.builds import IMPORTED_DIGEST


def is_staff(user: Any) -> bool:
    return bool(getattr(user, "is_authenticated", False) and user.is_active and user.is_staff)


def _signed_in(user: Any) -> bool:
    return bool(getattr(user, "is_authenticated", False) and user.is_active)


def visible_submissions(user: Any) -> QuerySet[Submission]:
    if is_staff(user):
        return Submission.objects.all()
    if not _signed_in(user):
        return Submission.objects.none()
    return Submission.objects.filter(owner=user)


def visible_branches(user: Any) -> QuerySet[TrackedBranch]:
    if is_staff(user):
        return TrackedBranch.objects.all()
    if not _signed_in(user):
        return TrackedBranch.objects.none()
    return TrackedBranch.objects.filter(Q(owner=user) | Q(owner__is_staff=True))


def may_change_branch(user: Any, branch: TrackedBranch) -> bool:
    """Pausing, polling or changing the settings of a branch: its owner or staff."""
    return is_staff(user) or (_signed_in(user) and branch.owner_id == user.pk)


def may_import(user: Any) -> bool:
    """Imported mmtests runs are lab-wide (every user's comparisons use them), so an admin adds them."""
    return is_staff(user)


def _imported() -> Q:
    # Every profile's imported kernels (models.builds.imported_digest); a
    # build kperf made has a hex digest, never this prefix.
    return Q(submission__isnull=True, branch_commit__isnull=True, build__config_digest__startswith=IMPORTED_DIGEST)


def visible_jobs(user: Any) -> QuerySet[Job]:
    """Jobs of visible submissions and tracked branches' commits, base boots
    shared with visible submissions, and imported mmtests runs."""
    if is_staff(user):
        return Job.objects.all()
    if not _signed_in(user):
        return Job.objects.none()
    # Exists, not a join: a job shared by several submissions is still one row.
    shared = SharedJob.objects.filter(job=OuterRef("pk"), submission__owner=user)
    return Job.objects.filter(
        Q(submission__owner=user)
        | Q(branch_commit__branch__in=visible_branches(user))
        | _imported()
        | Q(Exists(shared))
    )


def visible_builds(user: Any) -> QuerySet[KernelBuild]:
    """Builds used by a submission or a tracked branch's commit the user may see.

    A build is shared by everyone who asked for the same sha, arch and
    config, so it is visible through any of them."""
    if is_staff(user):
        return KernelBuild.objects.all()
    if not _signed_in(user):
        return KernelBuild.objects.none()
    by_submission = SubmissionBuild.objects.filter(build=OuterRef("pk"), submission__in=visible_submissions(user))
    by_branch = BranchCommit.objects.filter(builds=OuterRef("pk"), branch__in=visible_branches(user))
    return KernelBuild.objects.filter(Exists(by_submission) | Exists(by_branch))
