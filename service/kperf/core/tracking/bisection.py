"""Which commits of a tracked branch get measured beyond its polled heads: the middle of a change point's range.

Polling adds the commits a branch's head moved through (kperf.core.tracking.branches);
a change point whose range holds unmeasured commits is bisected here, one
commit at a time, until the change sits on one commit (kperf.core.tracking.change_points
asks after every analysis).
"""

from __future__ import annotations

import logging

from kperf.core.builds import gitops, profiles, queue
from kperf.core.lifecycle import dispatch
from kperf.core.lifecycle.task_names import Task
from kperf.core.models import BranchCommit, ChangePoint, TrackedBranch

log = logging.getLogger(__name__)


def add_commits(branch: TrackedBranch, wanted: list[tuple[str, str, int]]) -> list[BranchCommit]:
    """Create (sha, subject, position) commits of a locked branch, attach their
    (possibly shared) builds, and queue what they need once the caller commits."""
    created: list[BranchCommit] = []
    for sha, subject, position in wanted:
        commit, new = BranchCommit.objects.get_or_create(
            branch=branch, sha=sha, defaults={"position": position, "subject": subject[:300]}
        )
        if not new:
            continue
        for arch in branch.arches:
            for profile in profiles.needed(arch, branch.profile):
                commit.builds.add(profiles.need_build(branch.tree, sha, arch, profile, queue.scope_for(branch.owner)))
        dispatch.after_commit(Task.ADVANCE_BRANCH_COMMIT, commit.pk)
        created.append(commit)
    return created


def bisect_gap(branch: TrackedBranch, cp: ChangePoint) -> bool:
    """Measure the middle unmeasured commit of a change point's range.

    True while bisection is under way (a commit of the range is queued or
    being measured), False when there is nothing left to measure: the change
    sits on one commit, or the commits left in the range could not be
    measured (they failed to build or boot) or git could not list them.
    """
    if cp.previous is None or cp.untested_between == 0:
        return False
    lo, hi = cp.previous.position, cp.commit.position
    inside = branch.commits.filter(position__gt=lo, position__lt=hi)
    if inside.filter(on_branch=True).exclude(status__in=BranchCommit.FINAL).exists():
        return True
    known = set(inside.values_list("sha", flat=True))
    try:
        between = gitops.first_parent_commits(branch.tree.mirror_path, cp.commit.sha, since=cp.previous.sha)[:-1]
    except gitops.GitError as e:
        log.warning("branch %s: cannot list %s..%s to bisect: %s", branch.pk, cp.previous.sha, cp.commit.sha, e)
        return False
    free = [(sha, subject, lo + 1 + i) for i, (sha, subject) in enumerate(between) if sha not in known]
    if not free:
        return False
    middle = free[len(free) // 2]
    add_commits(branch, [middle])
    log.info("branch %s: bisecting %s..%s at %s", branch.pk, cp.previous.sha[:12], cp.commit.sha[:12], middle[0][:12])
    return True
