"""When a submission's verdict will come, from measured durations: the pure part.

The work still to do for a submission is its unfinished builds and the
jobs of each machine class up to its last one in claim order (the jobs
ahead of it included). Each takes the median of the recent durations of
its kind, and a class runs as many jobs at once as it has runners in
service, in claim order: a list schedule, the way kperf.core.lab.leases hands
jobs out. The answer is the time the last of the submission's builds and
jobs finishes, with a range from the 10th and 90th percentiles of the same
durations, widened by the boots further looks may add (docs/statistics.md,
"More boots when the answer is `inconclusive`"): a submission can never be
promised that its first look decides. A build or job already running takes
what is left of the recent durations longer than it has run so far; past
every one of them, as long again.

No Django here: kperf.core.lab.eta gathers the situation from the database,
bench/eta.py from a recorded history as it stood at each moment, and both
ask the same functions.
"""

from __future__ import annotations

import bisect
import heapq
import statistics
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

# How many recent durations of one kind are read: enough for a median and
# percentiles that one odd run does not move, few enough that a faster
# runner or a new compiler shows within a day of jobs.
RECENT = 20

# When nothing of a kind has been measured yet and the lab has no measure
# of its host's speed either (no `Prior`: kperf.core.lab.eta_cold). A boot of
# a `quick` grid on a TCG QEMU runner takes 30-60 s and a fixture-tree build
# 35-120 s (docs/performance.md, "Lab speed and submit to verdict"); a real
# tree's clean build takes longer, hence the generous build default. The
# answer says when it rests on these.
DEFAULT_JOB_S = 120.0
DEFAULT_BUILD_S = 600.0

# The quantile each end of the estimate reads (`Typical.low`, `mid`, `high`).
QUANTILES = {"low": 0.1, "mid": 0.5, "high": 0.9}

# A run longer than every recent one of its kind: how much is left, in units
# of how long it has run, at each quantile. Nothing measured says more than
# that it is still going; seen at a moment spread evenly over its run (the
# page is asked at any time), the part still to come is as long as the part
# gone at the median, and 1/9 to 9 times as long at the 10th and 90th
# percentiles (J. R. Gott, Nature 363, 1993). docs/eta.md, "Running work".
BEYOND_HISTORY = {"low": 1 / 9, "mid": 1.0, "high": 9.0}


@dataclass(frozen=True)
class Typical:
    """The 10th percentile, median and 90th percentile of a kind of work's duration, in seconds."""

    low: float
    mid: float
    high: float
    basis: str
    # The durations themselves, sorted (at least one): a running build or
    # job is judged by those longer than it has run so far (`remaining`).
    values: tuple[float, ...]

    def at(self, quantile: str) -> float:
        value: float = getattr(self, quantile)
        return value

    def about(self, basis: str) -> Typical:
        return Typical(self.low, self.mid, self.high, basis, self.values)


def _quantile(ordered: Sequence[float], p: float) -> float:
    """The p-quantile interpolated between the sorted values, as statistics.quantiles' "inclusive" method cuts them."""
    x = p * (len(ordered) - 1)
    j = min(int(x), len(ordered) - 2)
    if j < 0:
        return ordered[0]
    return ordered[j] + (x - j) * (ordered[j + 1] - ordered[j])


def _rank(ordered: Sequence[float], value: float) -> float:
    """Where `value` sits in the same interpolated distribution: the p with `_quantile(ordered, p) == value`."""
    i = bisect.bisect_right(ordered, value) - 1
    if i < 0:
        return 0.0
    if i >= len(ordered) - 1:
        return 1.0
    return (i + (value - ordered[i]) / (ordered[i + 1] - ordered[i])) / (len(ordered) - 1)


def remaining(t: Typical, q: str, elapsed: float | None) -> float:
    """What is left of a run `elapsed` seconds in, at quantile `q` ("low", "mid", "high") of `t`.

    The quantile of the durations that are longer than the elapsed time,
    from the same interpolated distribution as `typical`: a build twice its
    median in is one of the slow ones and has the slow ones' remainder to
    go. Past the longest of them the history no longer says anything:
    BEYOND_HISTORY. Until 2026-12-01 a run past the typical duration counted
    as about to end (remaining 0); on a lab running two to three times
    slower than its history that was early every time (docs/eta.md,
    "Running work").
    """
    gone = elapsed or 0.0
    if gone <= 0:
        return t.at(q)
    if gone < t.values[-1]:
        f = _rank(t.values, gone)
        return max(_quantile(t.values, f + QUANTILES[q] * (1 - f)) - gone, 0.0)
    return gone * BEYOND_HISTORY[q]


def typical(values: Sequence[float], what: str) -> Typical | None:
    """The 10th percentile, median and 90th percentile of `values` (None when
    there are none), with what they are the median of."""
    if not values:
        return None
    ordered = sorted(values)
    if len(ordered) == 1:
        low = mid = high = ordered[0]
    else:
        # The range from the quartiles held the real finish at 71-85% of the
        # moments of two real queued runs; from the 10th and 90th percentiles,
        # at 86-89%, with the same estimate (docs/eta.md, "The range").
        cuts = statistics.quantiles(ordered, n=10, method="inclusive")
        low, mid, high = cuts[0], statistics.median(ordered), cuts[-1]
    n = len(ordered)
    return Typical(low, mid, high, f"median of {n} recent {what}{'s' if n != 1 else ''}", tuple(ordered))


def _assumed(seconds: float, what: str) -> Typical:
    """A default where nothing was measured yet: as if one run of `seconds` had been."""
    return Typical(seconds, seconds, seconds, f"{seconds:.0f} s {what}: none measured yet", (seconds,))


@dataclass(frozen=True)
class Prior:
    """What a kind of work should take on this lab before any of it was
    measured, from the host's measured speed (kperf.core.lab.eta_cold): builds
    by kind ("clean", "incremental"), jobs by (machine class, benchmark,
    grid). A kind it lacks takes the fixed default."""

    builds: Mapping[str, Typical] = field(default_factory=dict)
    jobs: Mapping[tuple[str, str, str], Typical] = field(default_factory=dict)


class History:
    """The recent durations known at one moment; add them oldest first.

    Where nothing was measured, `prior` (the host's speed) stands in, and
    only then: a single measured duration of the kind, or of the class, wins.
    """

    def __init__(self, recent: int = RECENT, prior: Prior | None = None) -> None:
        self.recent = recent
        self.prior = prior or Prior()
        self._jobs: dict[tuple[str, str, str], deque[float]] = {}
        self._per_class: dict[str, deque[float]] = {}
        self._builds: deque[float] = deque(maxlen=recent)
        self._build_kinds: dict[str, deque[float]] = {}

    def add_job(self, machine_class: str, benchmark: str, grid: str, seconds: float) -> None:
        self._jobs.setdefault((machine_class, benchmark, grid), deque(maxlen=self.recent)).append(seconds)
        self._per_class.setdefault(machine_class, deque(maxlen=self.recent)).append(seconds)

    def add_build(self, seconds: float, kind: str = "") -> None:
        """A finished build; `kind` "clean" or "incremental" (from a warm object tree), "" if unknown."""
        self._builds.append(seconds)
        if kind:
            self._build_kinds.setdefault(kind, deque(maxlen=self.recent)).append(seconds)

    def job(self, machine_class: str, benchmark: str, grid: str) -> Typical:
        """The same benchmark and grid on the class; else any job of the class; else the default."""
        exact = typical(self._jobs.get((machine_class, benchmark, grid), ()), f"{benchmark} {grid} job")
        if exact is not None:
            return exact.about(f"{exact.basis} on {machine_class}")
        anyjob = typical(self._per_class.get(machine_class, ()), "job")
        if anyjob is not None:
            return anyjob.about(f"{anyjob.basis} on {machine_class}")
        # A class nobody measured on yet: the lab's other classes say more than a fixed guess.
        lab = typical([s for d in self._per_class.values() for s in d], "job")
        if lab is not None:
            return lab.about(f"{lab.basis} on other machine classes")
        prior = self.prior.jobs.get((machine_class, benchmark, grid))
        return prior if prior is not None else _assumed(DEFAULT_JOB_S, "a job")

    def build(self, kind: str = "", unmeasured: str = "clean") -> Typical:
        """Builds of the same kind (an incremental build takes a fraction of a clean
        one); else any build; else the host's prior for `kind` (for `unmeasured`
        when the kind is not known: a fresh lab's first builds are clean);
        else the default."""
        same = typical(self._build_kinds.get(kind, ()), f"{kind} build") if kind else None
        if same is not None:
            return same
        known = typical(self._builds, "build")
        if known is not None:
            return known
        prior = self.prior.builds.get(kind or unmeasured)
        return prior if prior is not None else _assumed(DEFAULT_BUILD_S, "a build")


@dataclass(frozen=True)
class Work:
    """One job on a machine class: someone else's ahead, or the submission's own (`own`)."""

    machine_class: str
    benchmark: str
    grid: str
    own: bool = False
    # Seconds since a runner took it; None while it is queued.
    elapsed_s: float | None = None
    # A submission's jobs are queued when its builds are done: until then
    # they are planned, and start no earlier than the builds finish (the
    # submission's own builds for its own jobs; the builds ahead for an
    # older submission's, which claim before the submission's own).
    after_builds: bool = False


@dataclass(frozen=True)
class Situation:
    """Everything the estimate reads, as it stands now."""

    # Runners in service (good health, heard from lately) per class.
    runners: Mapping[str, int]
    # The submission's unfinished builds: seconds since started, None while queued.
    builds: Sequence[float | None] = ()
    # Other builds running or queued before them (or, once the submission's
    # are done, those of older submissions still building).
    builds_ahead: Sequence[float | None] = ()
    build_workers: int = 1
    # The kind of each build in `builds` ("clean", "incremental" or "" when
    # it cannot be told), in the same order. The builds ahead take the
    # median of every recent build: given their kinds too, the busy lab of
    # bench/eta.py came out worse (docs/eta.md, "The estimate", Builds).
    build_kinds: Sequence[str] = ()
    # The kind each build in `builds_ahead` is expected to be, read only
    # while no build at all was measured (the host's prior has no "any
    # build" to give); "" or missing: clean.
    ahead_kinds: Sequence[str] = ()
    # Per class: the jobs running, then the queued ones in claim order up to
    # the submission's last (later ones cannot delay it).
    jobs: Sequence[Work] = ()
    # The jobs further looks may add if the verdict is still open.
    more: Sequence[Work] = ()


@dataclass(frozen=True)
class Estimate:
    seconds: float
    low: float
    high: float
    # Queued jobs of others before the submission's first, per class.
    jobs_ahead: dict[str, int]
    # Jobs further looks may add (counted in `high` only).
    more_jobs: int
    basis: str


@dataclass(frozen=True)
class Unknown:
    reason: str


@dataclass
class _Bases:
    seen: list[str] = field(default_factory=list)

    def add(self, basis: str) -> None:
        if basis not in self.seen:
            self.seen.append(basis)


def _builds_done(s: Situation, hist: History, q: str, bases: _Bases) -> tuple[float, float]:
    """When the builds ahead and the submission's own are done: workers take them first come, first served."""
    if not s.builds and not s.builds_ahead:
        return 0.0, 0.0

    def kind(kinds: Sequence[str], i: int) -> str:
        return kinds[i] if i < len(kinds) else ""

    workers = [0.0] * max(1, s.build_workers)
    # Running builds hold a worker now; queued ones follow, others' first.
    order = sorted(
        [(e, False, "", kind(s.ahead_kinds, i)) for i, e in enumerate(s.builds_ahead)]
        + [(e, True, kind(s.build_kinds, i), "") for i, e in enumerate(s.builds)],
        key=lambda b: b[0] is None,
    )
    ahead = done = 0.0
    for elapsed, own, what, unmeasured in order:
        t = hist.build(what, unmeasured or "clean")
        if own:
            bases.add(t.basis)
        start = heapq.heappop(workers)
        end = start + remaining(t, q, elapsed)
        heapq.heappush(workers, end)
        if own:
            done = max(done, end)
        else:
            ahead = max(ahead, end)
    return ahead, done


def _class_done(
    jobs: Sequence[Work],
    runners: int,
    hist: History,
    q: str,
    builds: tuple[float, float],
    bases: _Bases,
    after: float = 0.0,
) -> float:
    """When the class's last own job ends: each runner, when free, takes the first job in claim order it may run.

    A planned job may run once its builds are done: the submission's own
    (`after_builds`) once its builds are, others' once the builds ahead are.
    """
    free = [0.0] * runners
    done = 0.0
    pending: list[tuple[float, Work]] = []
    for w in jobs:
        if w.elapsed_s is not None:
            # Running: it holds a runner until it ends.
            end = heapq.heappop(free) + remaining(hist.job(w.machine_class, w.benchmark, w.grid), q, w.elapsed_s)
            heapq.heappush(free, end)
            done = max(done, end) if w.own else done
            continue
        release = (builds[1] if w.own else builds[0]) if w.after_builds else 0.0
        pending.append((max(release, after if w.own else 0.0), w))
    while pending:
        at = heapq.heappop(free)
        # The first in claim order that may run by then; else the first to become runnable.
        i = next((i for i, (r, _) in enumerate(pending) if r <= at), None)
        if i is None:
            i = min(range(len(pending)), key=lambda i: pending[i][0])
        release, w = pending.pop(i)
        t = hist.job(w.machine_class, w.benchmark, w.grid)
        if w.own:
            bases.add(t.basis)
        end = max(at, release) + t.at(q)
        heapq.heappush(free, end)
        if w.own:
            done = max(done, end)
    return done


def jobs_ahead(jobs: Iterable[Work]) -> dict[str, int]:
    """Per class: the jobs of others that claim before the submission's last own job.

    Those queued now, and those an older submission queues once its builds
    are done (they claim first). Counting only up to the submission's first
    job said "0 ahead" while dozens were, whenever that first job was a base
    boot shared from an older submission. Running jobs hold a runner, not a
    place in the queue: not counted.
    """
    out: dict[str, int] = {}
    others: dict[str, int] = {}
    for w in jobs:
        if w.elapsed_s is not None:
            continue
        if w.own:
            out[w.machine_class] = others.get(w.machine_class, 0)
        else:
            others[w.machine_class] = others.get(w.machine_class, 0) + 1
    return out


def _finish(s: Situation, hist: History, q: str, bases: _Bases, with_more: bool) -> float:
    builds = _builds_done(s, hist, q, bases)
    classes = sorted({w.machine_class for w in [*s.jobs, *s.more]})
    done = builds[1]
    for c in classes:
        jobs = [w for w in s.jobs if w.machine_class == c]
        if jobs:
            done = max(done, _class_done(jobs, s.runners.get(c, 0), hist, q, builds, bases))
    if with_more and s.more:
        # More boots are queued at the look, when every class has had its
        # jobs: they run after the submission's own, on the class's runners.
        for c in classes:
            extra = [w for w in s.more if w.machine_class == c]
            if extra:
                done = max(done, _class_done(extra, s.runners.get(c, 0), hist, q, builds, bases, after=done))
    return done


def estimate(s: Situation, hist: History) -> Estimate | Unknown:
    """Seconds until the verdict: median durations, and the range the percentiles and further looks give."""
    for c in sorted({w.machine_class for w in [*s.jobs, *s.more] if w.own}):
        if s.runners.get(c, 0) < 1:
            return Unknown(f"no runner of class {c} is in service to run its jobs")
    bases = _Bases()
    mid = _finish(s, hist, "mid", bases, with_more=False)
    low = _finish(s, hist, "low", _Bases(), with_more=False)
    high = _finish(s, hist, "high", _Bases(), with_more=True)
    return Estimate(
        seconds=mid,
        low=min(low, mid),
        high=max(high, mid),
        jobs_ahead=jobs_ahead(s.jobs),
        more_jobs=len(s.more),
        basis="; ".join(bases.seen) or "nothing left to run",
    )


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    if seconds < 60:
        return "under a minute"
    if minutes < 120:
        return f"~{minutes} min"
    return f"~{minutes // 60} h {minutes % 60:02d} min"


def sentence(est: Estimate, now: datetime) -> str:
    """ "verdict expected in ~12 min (by 14:05 UTC), 3 jobs ahead on qemu-x86_64"."""
    by = now + timedelta(seconds=est.seconds)
    text = f"verdict expected in {_duration(est.seconds)} (by {by:%H:%M} UTC)"
    if est.more_jobs and est.high > est.seconds:
        text += (
            f"; at least that: up to {_duration(est.high)} if a look is inconclusive"
            f" and kperf adds boots ({est.more_jobs} more jobs at most)"
        )
    ahead = [f"{n} job{'s' if n != 1 else ''} ahead on {c}" for c, n in sorted(est.jobs_ahead.items()) if n]
    return ", ".join([text, *ahead])
