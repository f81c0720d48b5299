"""The JSON shapes the API answers with, for what the presenters and the routes build themselves.

Each is a TypedDict: mypy checks the code that builds it, ninja validates the
answer against it and the OpenAPI document shows it. What a domain module
builds is declared beside it (kperf.core.triage.TriageOut,
kperf.core.lab.runner_health.RunnerState, ...) and used from here.

ninja drops keys a shape does not declare, so every key an answer has is
declared here; stored free-form JSON (tables, samples, parameters) stays
dict[str, Any].
"""

from __future__ import annotations

from typing import Any

from typing_extensions import TypedDict

from kperf.core.builds.configs import OptionDifference
from kperf.core.lab.eta import EtaEstimate
from kperf.core.lab.runner_health import RunnerEventRow, RunnerState
from kperf.core.mail.confirmations import AddressInfo
from kperf.core.results.noise_report import NoiseRow
from kperf.core.results.outcome import MetricVerdict
from kperf.core.results.per_op import MixedCommand, PerOpRow
from kperf.core.results.sweeps import Sweep

# --- Submissions (kperf.core.web.presenters) ---------------------------------


class PatchSeriesSummary(TypedDict):
    """What was read from a patch series' mbox."""

    subject: str
    author: str
    # The result mail's In-Reply-To: the cover letter's, else the first patch's thread.
    message_id: str
    has_cover: bool
    patch_count: int
    patches: list[dict[str, Any]]
    mbox_sha256: str | None
    failed_patch: int | None


class SubmissionSummary(TypedDict):
    id: int
    tree: str
    branch: str
    head_sha: str | None
    base: str
    base_sha: str | None
    benchmarks: list[str]
    # Its first grid (the one before several could be asked for), and every grid it asked for:
    # each benchmark ran those of them it has (docs/submitting.md).
    grid: str
    grids: list[str]
    arches: list[str]
    min_effect_pct: float | None
    # What every boot was measured with: command line words added last, THP mode ('': kernel default).
    boot_params: str
    thp: str
    # The configuration profile both kernels were built with ('': each machine class's own; docs/kernels.md).
    profile: str
    status: str
    # Whether the status can still change (Submission.FINAL): what clients wait for.
    final: bool
    error: str
    reruns: list[dict[str, Any]]
    owner: str
    created: str | None
    finished: str | None
    kind: str
    # For a patch series ("branch" is then its label): what was read from the mbox.
    series: PatchSeriesSummary | None
    mail_to: list[str]


class ArtifactRef(TypedDict):
    sha256: str
    size: int


class BuildRow(TypedDict):
    id: int
    side: str
    sha: str
    arch: str
    config_digest: str
    # The configuration profile it was built with (tiny, mm, distro; docs/kernels.md).
    profile: str
    # What the kernel lacks though it built: a benchmark module that did not
    # compile against it, fragment options the release does not have.
    warnings: list[str]
    status: str
    phase: str
    progress: str
    error: str
    log_tail: str  # a failed build's only
    duration_s: float | None
    # How it was made: from which commit's object tree ("" = clean), how
    # much it recompiled, and the incremental error a clean build overruled.
    reused_sha: str
    compiled_files: int
    incremental_error: str
    artifacts: dict[str, ArtifactRef]


class JobRow(TypedDict):
    id: int
    side: str
    benchmark: str
    grid: str
    machine_class: str
    clock: str
    build_id: int
    boots: int
    status: str
    attempt: int
    runner: str | None
    phase: str
    progress: str
    failure_kind: str
    failure_message: str
    queued: str | None
    started: str | None
    finished: str | None
    duration_s: float | None
    # Measured on a runner after its last good calibration, before it was
    # quarantined (docs/calibration.md); None for a job nothing is known against.
    suspect: str | None


class SubmissionJob(JobRow):
    # A base boot measured for another submission of the same base kernel (kperf.core.lab.sharing).
    shared: bool
    # Why it is still queued (kperf.core.lab.waiting); None when it is not waiting.
    waiting_for: str | None


class SideProgress(TypedDict):
    boots_done: int
    boots_total: int
    boots_shared: int


class SubmissionProgress(TypedDict):
    """Boots done per side (shared ones included): what 'boot n of K' means for a submission."""

    base: SideProgress
    head: SideProgress


class CounterRow(TypedDict):
    """A counter's mean per boot on each side; change_pct is None when it moved only in head."""

    counter: str
    base_per_boot: float
    head_per_boot: float
    change_pct: float | None


class ComparisonMetric(MetricVerdict):
    # Each side's level as the verdict sees it (kperf.core.web.presenters.verdict_estimate).
    base_estimate: float | None
    head_estimate: float | None
    samples: dict[str, Any]  # {"base": boots, "head": boots}, each boot its iterations
    summary: list[dict[str, Any]]  # compare-mmtests.pl's rows (kperf.stats.summary.SummaryRow)


class Comparison(TypedDict):
    machine_class: str
    benchmark: str
    # The benchmark's grid: a submission of several grids has a comparison per grid.
    grid: str
    # Every number below was timed with this clock (models.Clock).
    clock: str
    clock_label: str
    # What was measured there: both kernels' configuration profile, and the
    # vCPUs and NUMA nodes a QEMU runner booted (0: its default, one vCPU on
    # the instruction clock, no NUMA nodes declared).
    profile: str
    vcpus: int
    numa_nodes: int
    # Metrics that differ by a trailing number, as sweeps in that number's order (kperf.core.results.sweeps).
    sweeps: list[Sweep]
    method: str
    alpha: float
    look: int
    looks: int
    final: bool
    # Base boots measured once for several submissions of this base kernel.
    shared_base_boots: int
    table: str
    metrics: list[ComparisonMetric]
    # /proc/vmstat deltas per boot beside the verdicts, never judged (docs/benchmarks.md).
    counters: list[CounterRow]
    counter_boots: dict[str, int]
    # Instructions and cycles per boot where the machines could count them; not judged either.
    perf_counters: list[CounterRow]
    perf_boots: dict[str, int]
    # The same per operation of each command, where its output counted them (kperf.core.results.per_op).
    perf_per_op: list[PerOpRow]
    perf_per_op_boots: dict[str, int]
    perf_per_op_mixed: list[MixedCommand]


class ComparisonDetail(Comparison):
    # Boots of the comparison that ran with different machine tuning (kperf.core.lab.tuning).
    tuning_differences: list[dict[str, Any]]
    # The notes of the suspect boots it used (docs/calibration.md).
    suspect: list[str]


class SubmissionDetail(SubmissionSummary):
    queue_position: int | None
    # When the verdict will come, and the jobs ahead per machine class (kperf.core.lab.eta).
    eta: EtaEstimate | None
    eta_reason: str | None
    jobs_ahead: dict[str, int]
    # What the submission waits for when nothing of it is running (kperf.core.lab.waiting).
    waiting_for: str | None
    # The mail's subject line and its notes on added boots, word for word (kperf.core.results.outcome).
    verdict: str
    rerun_notes: list[str]
    builds: list[BuildRow]
    jobs: list[SubmissionJob]
    progress: SubmissionProgress
    comparisons: list[ComparisonDetail]
    # Per arch with both kernels built: the .config options whose values differ
    # between base and head (kperf.core.builds.configs); [] when they agree.
    config_differences: dict[str, list[OptionDifference]]


class MmtestsTree(TypedDict):
    """One side's raw output as mmtests result directories, for mmtests' own extractors."""

    submission: int
    side: str
    benchmark: str
    runs: list[str]
    boots: int
    skipped: list[str]
    files: dict[str, str]  # relative path -> text


# --- Tracked branches --------------------------------------------------------


class BranchSummary(TypedDict):
    id: int
    tree: str
    branch: str
    benchmarks: list[str]
    grid: str
    arches: list[str]
    # Its commits' configuration profile ('': each machine class's own).
    profile: str
    min_effect_pct: float | None
    boots: int
    max_commits: int
    notify: list[str]
    bisect: bool
    enabled: bool
    head_sha: str | None
    last_polled: str | None
    last_error: str
    owner: str
    created: str | None


class ChangePointOut(TypedDict):
    id: int
    # A regression's triage state (kperf.core.triage); improvements have none.
    triage: str | None
    machine_class: str
    benchmark: str
    clock: str
    metric: str
    sha: str
    subject: str
    previous_sha: str | None
    # Unmeasured commits between `previous_sha` and `sha`: 0 means the
    # change is pinned to one commit, more means bisect that range.
    untested_between: int
    detected_at_sha: str
    direction: str
    change_pct: float
    p_value: float
    statistic: float
    first_seen: str | None


class BranchCommitRow(TypedDict):
    sha: str
    position: int
    subject: str
    # Unmeasured first-parent commits between this commit and the measured one before it.
    untested_before: int
    on_branch: bool
    status: str
    error: str
    boots_done: int
    boots_total: int
    created: str | None
    finished: str | None


class BranchDetail(BranchSummary):
    commits: list[BranchCommitRow]
    change_points: list[ChangePointOut]


class PollQueued(TypedDict):
    # False when the broker did not take it: the periodic poll comes anyway.
    queued: bool
    branch: int


class SeriesCommit(TypedDict):
    sha: str
    position: int
    subject: str


class BranchSeries(TypedDict):
    """Per measured commit, in branch order: every boot's iterations of every metric, and the change points."""

    branch: int
    machine_class: str
    benchmark: str
    clock: str
    commits: list[SeriesCommit]
    metrics: dict[str, list[list[list[float]]]]  # metric -> per commit -> per boot -> iterations
    next_until: int | None  # the position to ask for next (until=) when older commits are left
    change_points: list[ChangePointOut]


class MetricPoint(TypedDict):
    sha: str
    position: int
    subject: str
    boots: int
    # The commit's level as the change-point search sees it: the mean of its
    # boots' trimmed means (of logs: a geometric mean where every value is positive).
    value: float
    # The spread of its boots: relative (on the log scale) or in the metric's unit.
    boot_sd: float | None


class MetricSeries(TypedDict):
    """One metric's per-commit points from the summaries (docs/history.md), and its change points."""

    branch: int
    machine_class: str
    benchmark: str
    clock: str
    metric: str
    unit: str
    higher_is_better: bool | None
    log_scale: bool
    points: list[MetricPoint]
    # Older points: ask again with until=next_until.
    next_until: int | None
    change_points: list[ChangePointOut]


# --- Results, the lab, accounts -----------------------------------------------


class NoiseReport(TypedDict):
    machine_class: str
    clock: str
    metrics: list[NoiseRow]


class MmtestsImported(TypedDict):
    jobs: list[int]
    samples: int


class RunnerSeriesRow(TypedDict):
    created: str
    result: str
    job: int | None
    values: list[float | None]  # in the order of RunnerSeries.metrics
    reason: str


class RunnerSeries(TypedDict):
    """A runner's calibration series: one row per calibration, oldest first, one value per metric."""

    metrics: list[str]
    rows: list[RunnerSeriesRow]


class RunnerChecks(RunnerState):
    events: list[RunnerEventRow]
    series: RunnerSeries


class RunnerChanged(RunnerState):
    # False when there was nothing to change (already quarantined, or not quarantined).
    changed: bool


class HealthOut(TypedDict):
    status: str


class TokenOut(TypedDict):
    token: str
    username: str


class AddressRequested(AddressInfo):
    # Whether a confirmation link was mailed now.
    mailed: bool


class AddressRemoved(TypedDict):
    address: str
    removed: bool
