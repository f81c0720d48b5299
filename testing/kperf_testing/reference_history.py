"""The branches' drift and between-build noise computed from the full history, the slow way.

kperf keeps these as sums updated with every result (kperf.core.results.drift_pools,
docs/history.md); the tests check those sums against this reference, which
reads every sample of every tracked branch again and cuts each series at its
stored change points.
"""

from __future__ import annotations

from collections import defaultdict

from kperf.core.models import BranchCommit, ChangePoint, TrackedBranch
from kperf.core.tracking.branches import Series, series
from kperf.stats.builds import BuildNoise, between_build_noise
from kperf.stats.changepoints import DriftEstimate, estimate_drift, series_summaries


def history_segments(
    mclass_id: int, bench: str, clock: str, known: dict[int, tuple[list[BranchCommit], Series]] | None = None
) -> dict[str, list[list[list[list[float]]]]]:
    """Per metric, every tracked branch's series of this benchmark on this
    machine class and clock, cut at the change points stored for it: runs of
    consecutive measured commits that share one level, each commit its boots.

    `known` holds series already read (branch id -> series()), to read each once.
    """
    segments: dict[str, list[list[list[list[float]]]]] = defaultdict(list)
    branches = TrackedBranch.objects.filter(
        commits__jobs__machine_class_id=mclass_id, commits__jobs__benchmark=bench, commits__jobs__clock=clock
    )
    for branch in branches.distinct():
        commits, metrics = (known or {}).get(branch.pk) or series(branch, mclass_id, bench, clock)[:2]
        cuts: dict[str, set[int]] = defaultdict(set)
        for metric, commit_id in ChangePoint.objects.filter(
            branch=branch, machine_class_id=mclass_id, benchmark=bench, clock=clock
        ).values_list("metric", "commit_id"):
            cuts[metric].add(commit_id)
        for metric, points in metrics.items():
            seg: list[list[list[float]]] = []
            for commit, boots in zip(commits, points, strict=True):
                if commit.pk in cuts[metric] and seg:
                    segments[metric].append(seg)
                    seg = []
                seg.append(boots)
            segments[metric].append(seg)
    return segments


Segments = dict[str, list[list[list[list[float]]]]]  # history_segments()


def learned_drift(
    mclass_id: int,
    bench: str,
    clock: str,
    known: dict[int, tuple[list[BranchCommit], Series]] | None = None,
    segments: Segments | None = None,
) -> dict[str, DriftEstimate]:
    """Per metric, how fast its level wanders on this machine class: learned
    from every tracked branch's series of this benchmark, cut at the change
    points stored for it, so a change already found is not taken for wander.
    `segments`: history_segments() already read."""
    if segments is None:
        segments = history_segments(mclass_id, bench, clock, known)
    out: dict[str, DriftEstimate] = {}
    for metric, metric_segments in segments.items():
        out[metric] = estimate_drift([series_summaries(seg)[0] for seg in metric_segments])
    return out


def learned_build_noise(
    mclass_id: int, bench: str, clock: str, segments: Segments | None = None
) -> dict[str, BuildNoise]:
    """Per metric, the between-build component on this machine class and
    clock: how far one build's level lies from its neighbours' where no
    change point separates them (kperf.stats.builds), from every tracked
    branch's history. Commits that measured nothing are left out.
    `segments`: history_segments() already read."""
    if segments is None:
        segments = history_segments(mclass_id, bench, clock)
    out: dict[str, BuildNoise] = {}
    for metric, metric_segments in segments.items():
        groups = [[boots for boots in seg if boots] for seg in metric_segments]
        out[metric] = between_build_noise([g for g in groups if g])
    return out
