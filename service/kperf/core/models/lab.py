"""Machines and the work they do: machine classes, runners, jobs."""

from __future__ import annotations

import secrets
from typing import Any, ClassVar

from django.conf import settings
from django.db import models
from django.utils import timezone

from kperf.core.models.accounts import hash_token
from kperf.core.models.builds import KernelBuild
from kperf.core.models.lifecycle import final_statuses
from kperf.core.models.submissions import BOOT_PARAMS_MAX_LENGTH, Submission, Thp
from kperf.core.models.tracking import BranchCommit


class Clock(models.TextChoices):
    """What timed a benchmark. Two clocks give two different metrics: never compared.

    instructions: QEMU's instruction clock (TCG with -icount): guest time
    advances 1 ns per executed instruction, so a rate is operations per 10^9
    instructions, whatever the host is doing. wall: real time (KVM, bare
    metal, or TCG without icount).
    """

    INSTRUCTIONS = "instructions", "instruction clock"
    WALL = "wall", "wall clock"


def unit_on(unit: str, clock: str) -> str:
    """A metric's unit as its clock measured it, for people: runners declare rates per
    second, and under the instruction clock a second is 10^9 executed guest instructions."""
    if clock != Clock.INSTRUCTIONS:
        return unit
    if unit.endswith("/cpu-s"):
        return unit.removesuffix("/cpu-s") + " per 10^9 CPU instr."
    if unit.endswith("/s"):
        return unit.removesuffix("/s") + " per 10^9 instr."
    return unit


class MachineClass(models.Model):
    """A label for identical hardware; comparisons never mix classes."""

    name = models.CharField(max_length=64, unique=True)
    arch = models.CharField(max_length=16)
    description = models.TextField(blank=True, default="")
    # The clock its jobs are timed with from now on; each job keeps the one
    # it was queued with, so changing this never mixes clocks in a series.
    clock = models.CharField(max_length=16, choices=Clock.choices, default=Clock.INSTRUCTIONS)
    # Calibration (docs/calibration.md): every runner of the class measures
    # this kernel with this short benchmark set on a schedule; no reference
    # build, no calibration (and no automatic quarantine by drift).
    reference_build = models.ForeignKey(
        KernelBuild, on_delete=models.SET_NULL, null=True, blank=True, related_name="reference_for"
    )
    calibration_benchmark = models.CharField(max_length=64, default="spawn")
    calibration_grid = models.CharField(max_length=32, default="quick")
    calibration_boots = models.PositiveIntegerField(default=2)
    # The kernels this class measures (docs/kernels.md): the configuration
    # profile a submission or tracked branch gets here unless it chose one,
    # the vCPUs and NUMA nodes a QEMU runner boots (0: the runner's own
    # default, one vCPU on the instruction clock and no NUMA nodes declared).
    # The class's history holds only jobs with all three.
    profile = models.CharField(max_length=16, default="tiny")
    vcpus = models.PositiveSmallIntegerField(default=0)
    numa_nodes = models.PositiveSmallIntegerField(default=0)

    class Meta:
        # Django only adds an "s": "machine classs".
        verbose_name_plural = "machine classes"

    def __str__(self) -> str:
        return self.name

    def set_clock(self, clock: str) -> int:
        """Time this class's jobs with `clock` from now on; returns how many queued jobs moved to it.

        A queued job whose submission (or branch commit) has no finished boot
        of that benchmark on this class yet moves to the new clock, so work
        never waits for a runner the class no longer has. Jobs whose owner
        already measured some boots keep their clock: one comparison never
        spans two clocks, and they wait for a runner that gives it.
        """
        self.clock = clock
        self.save(update_fields=["clock"])
        done = Job.objects.filter(machine_class=self, status=Job.Status.DONE)
        queued = Job.objects.filter(machine_class=self, status=Job.Status.QUEUED).exclude(clock=clock)
        measured = set(done.values_list("submission_id", "branch_commit_id", "benchmark"))
        movable = [j.pk for j in queued if (j.submission_id, j.branch_commit_id, j.benchmark) not in measured]
        return Job.objects.filter(pk__in=movable).update(clock=clock)


class Runner(models.Model):
    TOKEN_PREFIX = "kprun_"

    class Health(models.TextChoices):
        GOOD = "good"
        QUARANTINED = "quarantined"

    name = models.CharField(max_length=64, unique=True)
    machine_class = models.ForeignKey(MachineClass, on_delete=models.PROTECT, related_name="runners")
    token_hash = models.CharField(max_length=64, unique=True)
    health = models.CharField(max_length=16, choices=Health.choices, default=Health.GOOD)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    version = models.CharField(max_length=32, blank=True, default="")
    hostname = models.CharField(max_length=255, blank=True, default="")
    capabilities = models.JSONField(default=dict, blank=True)
    # A runner on the machine that also builds kernels (the local QEMU runner
    # of `make up`) would measure the compiler, not the kernel: it gets no
    # job while a build is running.
    yields_to_builds = models.BooleanField(default=False)
    created = models.DateTimeField(auto_now_add=True)
    # When the runner last changed: registered or re-registered (a new
    # token), or a save with another version, hostname, health or machine
    # class. Boots it measured before then are not shared with submissions
    # that measure their head on it now (kperf.core.lab.sharing).
    identity_changed = models.DateTimeField(default=timezone.now)
    # Why the runner is quarantined and since when (health_since: when the
    # current health began). Changed only through kperf.core.lab.runner_health,
    # which also writes the history (RunnerEvent).
    health_reason = models.TextField(blank=True, default="")
    health_since = models.DateTimeField(null=True, blank=True)
    # Its calibrations (kperf.core.lab.calibration): the last one and its result,
    # the last one judged good, and where the series it is judged against
    # begins (an admin's release with relearn moves it).
    last_calibration = models.DateTimeField(null=True, blank=True)
    last_calibration_result = models.CharField(max_length=16, blank=True, default="")
    last_good_calibration = models.DateTimeField(null=True, blank=True)
    calibration_baseline_since = models.DateTimeField(null=True, blank=True)

    # What a runner is, for sharing measurements: any change starts a new identity.
    IDENTITY = ("token_hash", "version", "hostname", "health", "machine_class_id")
    # The identity as loaded from the database (None: a new runner).
    _loaded_identity: dict[str, object] | None = None

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Saves; a change of identity moves `identity_changed`, whoever made it
        (registration, heartbeat, admin), so no path can forget to."""
        loaded = self._loaded_identity
        now = self._identity()
        if loaded is not None and any(now.get(name, value) != value for name, value in loaded.items()):
            self.identity_changed = timezone.now()
            if kwargs.get("update_fields") is not None:
                kwargs["update_fields"] = [*kwargs["update_fields"], "identity_changed"]
        super().save(*args, **kwargs)
        self._loaded_identity = self._identity()

    @classmethod
    def from_db(cls, db: str | None, field_names: Any, values: Any) -> Runner:
        runner = super().from_db(db, field_names, values)
        runner._loaded_identity = runner._identity()
        return runner

    def _identity(self) -> dict[str, object]:
        # A field left out of the query (.only()) is not compared.
        return {name: self.__dict__[name] for name in self.IDENTITY if name in self.__dict__}

    @property
    def arch(self) -> str:
        return self.machine_class.arch

    def clocks(self) -> list[str]:
        """The clocks this runner said it gives; a runner from before clocks gives the wall clock only."""
        clocks = self.capabilities.get("clocks") if isinstance(self.capabilities, dict) else None
        if not isinstance(clocks, list):
            return [Clock.WALL]
        return [c for c in clocks if c in Clock.values]

    @classmethod
    def register(cls, name: str, machine_class: MachineClass) -> tuple[Runner, str]:
        """Create a runner, or give an existing one a new token; returns the token once."""
        plain = cls.TOKEN_PREFIX + secrets.token_urlsafe(32)
        runner, _ = cls.objects.update_or_create(
            name=name, defaults={"machine_class": machine_class, "token_hash": hash_token(plain)}
        )
        return runner, plain


class Job(models.Model):
    """One benchmark run on one build: `boots` boots of `params.iterations` each."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        LEASED = "leased"  # claimed; the runner is preparing, booting or running
        DONE = "done"
        FAILED = "failed"
        CANCELLED = "cancelled"

    class FailureKind(models.TextChoices):
        INFRA = "infra"
        BOOT = "boot"
        BENCHMARK = "benchmark"

    # Every status and the only ways out of it (kperf.core.lifecycle.states).
    TRANSITIONS: ClassVar[dict[str, frozenset[str]]] = {
        Status.QUEUED: frozenset({Status.LEASED, Status.CANCELLED}),
        # Results stored; failed for good; or back to the queue (infra fault
        # before the last attempt, or the lease ran out).
        Status.LEASED: frozenset({Status.DONE, Status.FAILED, Status.QUEUED}),
        Status.DONE: frozenset(),
        Status.FAILED: frozenset(),
        Status.CANCELLED: frozenset(),
    }
    FINAL = final_statuses(TRANSITIONS)

    submission = models.ForeignKey(Submission, on_delete=models.CASCADE, related_name="jobs", null=True, blank=True)
    # A job measures either one side of a submission or one commit of a
    # tracked branch (or, imported from mmtests, neither).
    branch_commit = models.ForeignKey(
        BranchCommit, on_delete=models.CASCADE, related_name="jobs", null=True, blank=True
    )
    build = models.ForeignKey(KernelBuild, on_delete=models.PROTECT, related_name="jobs")
    side = models.CharField(max_length=4, blank=True, default="")
    benchmark = models.CharField(max_length=64)
    grid = models.CharField(max_length=32)
    params = models.JSONField(default=dict)
    # What the boot was measured with besides the kernel: command line words
    # the runner appends last and the THP mode init sets ('' for both: the
    # runner's command line and the kernel's default). Copied from the
    # submission when queued; boots that differ here are never shared
    # (kperf.core.lab.sharing) or pooled into the class's history (kperf.core.results.summaries).
    boot_params = models.CharField(max_length=BOOT_PARAMS_MAX_LENGTH, blank=True, default="")
    thp = models.CharField(max_length=8, choices=Thp.choices, blank=True, default="")
    # The machine class's vCPUs and NUMA nodes when queued: a runner boots
    # this shape, and a class whose shape changed never pools the old boots
    # with the new.
    vcpus = models.PositiveSmallIntegerField(default=0)
    numa_nodes = models.PositiveSmallIntegerField(default=0)
    boots = models.PositiveIntegerField(default=1)
    machine_class = models.ForeignKey(MachineClass, on_delete=models.PROTECT, related_name="jobs")
    # Fixed when queued: only a runner that gives this clock claims the job,
    # and its samples are compared only with samples of the same clock.
    clock = models.CharField(max_length=16, choices=Clock.choices, default=Clock.WALL)
    # Claim order within the queue: jobs are queued base/head alternately so
    # drift between boots lands on both sides.
    seq = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    attempt = models.PositiveIntegerField(default=1)
    max_attempts = models.PositiveIntegerField(default=3)
    runner = models.ForeignKey(Runner, on_delete=models.SET_NULL, null=True, blank=True, related_name="jobs")
    lease_expires = models.DateTimeField(null=True, blank=True)
    phase = models.CharField(max_length=32, blank=True, default="")
    progress = models.CharField(max_length=200, blank=True, default="")
    failure_kind = models.CharField(max_length=16, choices=FailureKind.choices, blank=True, default="")
    failure_message = models.TextField(blank=True, default="")
    # A calibration job: only this runner may claim it (kperf.core.lab.calibration).
    pinned_runner = models.ForeignKey(
        Runner, on_delete=models.CASCADE, null=True, blank=True, related_name="pinned_jobs"
    )
    # Set when the runner that measured this job was quarantined and the job
    # finished after its last good calibration: the numbers may be off.
    suspect_note = models.CharField(max_length=500, blank=True, default="")
    console_log = models.TextField(blank=True, default="")
    # {"key", "sha256", "size"} once `kperf-manage archive` moved the console
    # log to the artifact storage (console_log is then empty); read it
    # through kperf.core.builds.archive.console_log.
    console_log_archive = models.JSONField(default=dict, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    # Set once a finished job has been through kperf.core.results.summaries.summarise:
    # its samples are in the summaries, or it was seen to be no part of the
    # class's history (a calibration, other boot parameters). A finished job
    # without it, however it reached the database, is caught up on the next read.
    summarised = models.BooleanField(default=False)

    class Meta:
        indexes = [
            # Serves the claim query: queued jobs of one machine class in order.
            models.Index(fields=["machine_class", "status", "seq"], name="job_claim_idx"),
            # Serves lease expiry: leased jobs whose lease ran out.
            models.Index(fields=["status", "lease_expires"], name="job_lease_idx"),
            # Serves the catch-up before every read of history: only the finished
            # jobs not yet summarised are in it, so its size is what arrived since
            # the last read, not the number of jobs ever run.
            models.Index(
                fields=["machine_class", "clock"],
                condition=models.Q(status="done", summarised=False),
                name="job_unsummarised",
            ),
        ]
        constraints = [
            # Whom a job's boots are for: one side of a submission, one commit
            # of a tracked branch, or one runner's calibration (pinned_runner)
            # — never two of them. Only a job imported from mmtests has none.
            models.CheckConstraint(
                condition=~(
                    (models.Q(submission__isnull=False) & models.Q(branch_commit__isnull=False))
                    | (
                        models.Q(pinned_runner__isnull=False)
                        & (models.Q(submission__isnull=False) | models.Q(branch_commit__isnull=False))
                    )
                ),
                name="job_has_one_owner_at_most",
            )
        ]

    def __str__(self) -> str:
        return f"job {self.pk} {self.benchmark} {self.side} on {self.build}"

    @property
    def is_final(self) -> bool:
        return self.status in self.FINAL

    @classmethod
    def clock_for(cls, machine_class: MachineClass, benchmark: str, submission: Submission | None) -> str:
        """The clock a new boot of `benchmark` on `machine_class` gets: the
        class's, or for a submission the one its first boots there had."""
        earlier = None
        if submission is not None:
            earlier = (
                cls.objects.filter(submission=submission, machine_class=machine_class, benchmark=benchmark)
                .order_by("id")
                .values_list("clock", flat=True)
                .first()
            )
        return str(earlier or machine_class.clock)

    @classmethod
    def queue_one_boot(
        cls,
        build: KernelBuild,
        machine_class: MachineClass,
        benchmark: str,
        grid: str,
        params: dict[str, object],
        seq: int,
        **owner: object,
    ) -> Job:
        """Queue one boot of `build`; `owner` is submission= and side=, or branch_commit=.

        The clock is the machine class's, except that more boots for a
        submission keep the clock its first boots had, so one comparison
        never spans two clocks even if an operator switched the class.
        """
        submission = owner.get("submission")
        sub = submission if isinstance(submission, Submission) else None
        return cls.objects.create(
            build=build,
            machine_class=machine_class,
            clock=cls.clock_for(machine_class, benchmark, sub),
            benchmark=benchmark,
            grid=grid,
            params=params,
            # Every boot of a submission, base or head, its own or a
            # replacement, is measured as the submission asked.
            boot_params=sub.boot_params if sub is not None else "",
            thp=sub.thp if sub is not None else "",
            vcpus=machine_class.vcpus,
            numa_nodes=machine_class.numa_nodes,
            boots=1,
            seq=seq,
            max_attempts=settings.KPERF_JOB_MAX_ATTEMPTS,
            **owner,
        )
