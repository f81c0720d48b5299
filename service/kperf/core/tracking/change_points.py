"""Change points of a tracked branch's series, from the summaries (docs/history.md).

One analysis reads each commit's point of every metric (CommitSummary), the
drift learned from every other branch (SeriesPool less its own SeriesState
rows, kperf.core.results.drift_pools), and its own detectors
as the previous analysis left them. A commit appended at the end of the
series costs one step of each metric's detector; a commit that lands inside
the series (bisection, a backfill), a change of the learned drift or a
detector fed twice the window replays the newest SERIES_WINDOW commits. The
statistics run with no lock held; the branch's row is locked only to check
that the series did not move meanwhile and to write the answer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
from django.conf import settings
from django.db import transaction

from kperf.core import benchmarks, triage
from kperf.core.mail import alerts, replies
from kperf.core.models import Alert, BranchCommit, ChangePoint, Job, MetricDef, SeriesState, TrackedBranch
from kperf.core.results import drift_pools, summaries
from kperf.core.tracking import bisection
from kperf.stats import history as sh
from kperf.stats.changepoints import DEFAULT_WINDOW, OnlineDetector, drift_window, threshold_for_drift
from kperf.stats.changepoints import ChangePoint as Found

log = logging.getLogger(__name__)

# Tries to compute outside the lock before computing under it: the series moves
# under an analysis only when two of the branch's commits finish together.
ATTEMPTS = 3

# How far the threshold (and window) the learned drift asks for may be from a kept
# detector's before the detector is replayed: 1% of a threshold moves an alarm by a
# small fraction of one commit's noise, and a window of 110 commits or 109 scans alike.
THRESHOLD_TOLERANCE = 0.01


@dataclass
class Answer:
    ids: list[int]
    found: dict[str, list[Found]] = field(default_factory=dict)
    detectors: dict[str, bytes] = field(default_factory=dict)
    sums: dict[str, summaries.BranchSums] = field(default_factory=dict)
    # The commits each metric's detector was fed (they may start before the window).
    fed: dict[str, list[int]] = field(default_factory=dict)
    replayed: int = 0


def _detector(
    stored: bytes, ids: list[int], values: list[float], log_scale: bool, drift: float
) -> tuple[OnlineDetector, list[int], bool]:
    """The metric's detector fed every finite point of the series: the stored
    one continued when the series only grew at its end, else a new one."""
    window = drift_window(drift, DEFAULT_WINDOW)
    if stored:
        det, fed, was_log = sh.detector_from_bytes(stored)
        # The learned drift moves a little with every commit of every branch; the
        # detector is replayed only when that moves its threshold or its window
        # by more than THRESHOLD_TOLERANCE (the window by at least one commit),
        # not for every last digit.
        threshold = threshold_for_drift(max(0.0, drift))
        same_scale = (
            was_log == log_scale
            and abs(det.window - window) <= max(1, int(THRESHOLD_TOLERANCE * window))
            and abs(det.threshold - threshold) <= THRESHOLD_TOLERANCE * threshold
        )
        if same_scale and fed and ids and len(fed) < 2 * summaries.SERIES_WINDOW:
            try:
                start = fed.index(ids[0])
            except ValueError:
                start = -1
            overlap = len(fed) - start
            if start >= 0 and fed[start:] == ids[:overlap]:
                for c, v in zip(ids[overlap:], values[overlap:], strict=True):
                    det.append(v)
                    fed.append(c)
                return det, fed, False
    det = OnlineDetector(threshold=threshold_for_drift(drift), drift=drift)
    for v in values:
        det.append(v)
    return det, list(ids), True


def compute(branch: TrackedBranch, mclass_id: int, bench: str, clock: str, defs: dict[str, MetricDef]) -> Answer:
    """Everything an analysis decides, read from the summaries, with no lock held."""
    # Catch up what reached the database without the results hook (imports, tests).
    summaries.summarise(
        Job.objects.filter(branch_commit__branch_id=branch.pk, machine_class_id=mclass_id, benchmark=bench, clock=clock)
    )
    rows = summaries.series_commits(branch.pk, mclass_id, bench, clock, summaries.SERIES_WINDOW)
    ids = [c for c, _ in rows]
    answer = Answer(ids)
    points = summaries.series_points(ids, mclass_id, bench, clock)
    cuts = summaries.cuts_of(branch.pk, mclass_id, bench, clock)
    drift: dict[str, float] = {}
    own_sums: dict[str, summaries.BranchSums] | None = None
    if settings.KPERF_LEARNED_DRIFT:
        # Every other branch as its last analysis left it, this one as it stands now
        # (with the change points stored so far), as drift_pools.drift_sums pools them.
        pooled = drift_pools.drift_sums(mclass_id, bench, clock, exclude_branch=branch.pk)
        own_sums = summaries.branch_sums(ids, points, cuts)
        for metric, own in own_sums.items():
            total = pooled[metric] + own.drift if metric in pooled else own.drift
            drift[metric] = sh.drift_from_stats(total).rate
        for metric, other in pooled.items():
            drift.setdefault(metric, sh.drift_from_stats(other).rate)
    stored = dict(
        SeriesState.objects.filter(
            branch_id=branch.pk, machine_class_id=mclass_id, benchmark=bench, clock=clock
        ).values_list("metric", "detector")
    )
    for name, pts in sorted(points.items()):
        if name not in defs:
            continue
        present = pts.present
        log_scale = bool(pts.positive[present].all())
        values = pts.mean_log if log_scale else pts.mean_lin
        kept = np.flatnonzero(present & np.isfinite(values))
        det, fed, replayed = _detector(
            bytes(stored.get(name) or b""),
            [ids[i] for i in kept],
            values[kept].tolist(),
            log_scale,
            drift.get(name, 0.0),
        )
        answer.replayed += replayed
        answer.found[name] = sh.finish_change_points(
            det,
            fed,
            log_scale,
            defs[name].higher_is_better,
            benchmarks.min_effect_pct(name, clock, branch.min_effect_pct, defs[name].benchmark),
        )
        answer.fed[name] = fed
        answer.detectors[name] = sh.detector_to_bytes(det, fed, log_scale)
    # What this branch will add to the class's learned drift and between-build
    # noise: its series cut at the change points found now (those older than
    # the window, which stay, cut nothing inside it).
    new_cuts = {name: {cp.index for cp in found} for name, found in answer.found.items()}
    window = set(ids)
    # Usually no change point came or went: those metrics' sums are the ones just computed.
    moved = {
        m
        for m in points
        if own_sums is None or m not in own_sums or new_cuts.get(m, set()) & window != cuts.get(m, set()) & window
    }
    answer.sums = {m: s for m, s in (own_sums or {}).items() if m not in moved}
    answer.sums.update(summaries.branch_sums(ids, {m: points[m] for m in moved}, new_cuts))
    return answer


def analyse_series(branch: TrackedBranch, mclass_id: int, bench: str, clock: str) -> list[ChangePoint]:
    """Find the change points of every metric of one benchmark on one machine
    class and clock, and store them in place of the previous answer."""
    defs = {m.name: m for m in MetricDef.objects.all()}
    for attempt in range(ATTEMPTS):
        answer = compute(branch, mclass_id, bench, clock, defs)
        with transaction.atomic():
            TrackedBranch.objects.select_for_update().get(pk=branch.pk)
            now = summaries.series_commits(branch.pk, mclass_id, bench, clock, summaries.SERIES_WINDOW)
            # A commit that joined meanwhile has its own analysis coming: after the
            # last attempt, store this answer and leave the rest to that one.
            if [c for c, _ in now] != answer.ids and attempt + 1 < ATTEMPTS:
                continue
            return _store(branch, mclass_id, bench, clock, answer)
    return []


def _store(branch: TrackedBranch, mclass_id: int, bench: str, clock: str, answer: Answer) -> list[ChangePoint]:
    """Write an analysis' answer (the caller holds the branch's lock)."""
    wanted = {c for found in answer.found.values() for cp in found for c in (cp.index, cp.detected_at)}
    for name, found in answer.found.items():
        fed = answer.fed[name]
        for cp in found:
            i = fed.index(cp.index)
            if i > 0:
                wanted.add(fed[i - 1])
    position = {c: i for i, c in enumerate(answer.ids)}
    commits = BranchCommit.objects.in_bulk(list(wanted | set(answer.ids[:1])))
    kept: list[ChangePoint] = []
    for name, found in sorted(answer.found.items()):
        fed = answer.fed[name]
        for cp in found:
            # The commit before, in the series (which holds commits that did not measure this metric).
            at = position.get(cp.index)
            if at is not None:
                previous = answer.ids[at - 1] if at > 0 else None
            else:
                i = fed.index(cp.index)
                previous = fed[i - 1] if i > 0 else None
            if previous is not None and previous not in commits:
                commits.update(BranchCommit.objects.in_bulk([previous]))
            row, _ = ChangePoint.objects.update_or_create(
                branch=branch,
                machine_class_id=mclass_id,
                clock=clock,
                metric=name,
                commit=commits[cp.index],
                defaults={
                    "benchmark": bench,
                    "previous": commits[previous] if previous is not None else None,
                    "detected_at": commits[cp.detected_at],
                    "direction": cp.direction,
                    "change_pct": cp.change_pct,
                    "p_value": cp.p_value,
                    "statistic": cp.statistic,
                },
            )
            kept.append(row)
    mailed: dict[int, Alert | None] = {}
    for row in kept:
        # A change inside a range of unmeasured commits is bisected first and
        # mailed once it sits on one commit (or cannot be narrowed further),
        # so watchers get one mail naming the culprit, not one per step.
        if not (branch.bisect and bisection.bisect_gap(branch, row)):
            mailed[row.pk] = alerts.change_point_found(row)
    # Change points older than the window were decided on commits no longer
    # re-read, and stay as they are.
    first = commits.get(answer.ids[0]) if answer.ids else None
    ChangePoint.objects.filter(
        branch=branch,
        machine_class_id=mclass_id,
        benchmark=bench,
        clock=clock,
        commit__position__gte=first.position if first is not None else 0,
    ).exclude(pk__in=[c.pk for c in kept]).delete()
    # After the stale rows went: a change point that moved takes over the triage its old row left.
    for row in kept:
        # The alert's Reply-To carries a token for this triage (triage by mail, docs/triage.md).
        replies.issue(mailed.get(row.pk), triage.open_for_change_point(row))
    drift_pools.store_branch_sums(branch.pk, mclass_id, bench, clock, answer.sums, len(answer.ids), answer.detectors)
    if kept:
        log.info("branch %s, %s on class %s: %d change points", branch.pk, bench, mclass_id, len(kept))
    return kept
