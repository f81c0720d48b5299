"""kperf's domain model, one module per resource."""

from kperf.core.models.accounts import ApiToken
from kperf.core.models.alerts import Alert
from kperf.core.models.builds import BuildMachine, KernelBuild
from kperf.core.models.calibration import RunnerEvent
from kperf.core.models.history import (
    CommitSummary,
    NoisePool,
    RunSummary,
    SeriesCatchUp,
    SeriesPool,
    SeriesState,
)
from kperf.core.models.host_speed import HostSpeed
from kperf.core.models.lab import Clock, Job, MachineClass, Runner
from kperf.core.models.mail import InboundMail, ReplyToken, UnreadableMail
from kperf.core.models.recipients import RecipientAddress
from kperf.core.models.results import BootRecord, Comparison, MetricComparison, MetricDef, Sample
from kperf.core.models.series import PatchSeries
from kperf.core.models.sharing import SharedJob
from kperf.core.models.spreads import ShapeBootSpread
from kperf.core.models.status_changes import StatusChange
from kperf.core.models.submissions import Submission, SubmissionBuild
from kperf.core.models.tracking import BranchCommit, ChangePoint, TrackedBranch
from kperf.core.models.trees import Tree
from kperf.core.models.triage import Triage, TriageEvent

__all__ = [
    "Alert",
    "ApiToken",
    "BootRecord",
    "BranchCommit",
    "BuildMachine",
    "ChangePoint",
    "Clock",
    "CommitSummary",
    "Comparison",
    "HostSpeed",
    "InboundMail",
    "Job",
    "KernelBuild",
    "MachineClass",
    "MetricComparison",
    "MetricDef",
    "NoisePool",
    "PatchSeries",
    "RecipientAddress",
    "ReplyToken",
    "RunSummary",
    "Runner",
    "RunnerEvent",
    "Sample",
    "SeriesCatchUp",
    "SeriesPool",
    "SeriesState",
    "ShapeBootSpread",
    "SharedJob",
    "StatusChange",
    "Submission",
    "SubmissionBuild",
    "TrackedBranch",
    "Tree",
    "Triage",
    "TriageEvent",
    "UnreadableMail",
]
