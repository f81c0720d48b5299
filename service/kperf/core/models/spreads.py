"""How far one boot's summary spreads at seeded phases, measured by the lab for each machine shape."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from kperf.core.models.lab import Clock, MachineClass


class ShapeBootSpread(models.Model):
    """One metric's boot-to-boot spread on one machine shape, from the lab's own seeded base boots.

    A shape is what a boot's numbers depend on besides the kernel: the machine class (its hardware
    and architecture), the clock, the kernels' configuration profile, the vCPUs and NUMA nodes the
    VM had and the benchmark's grid. kperf.core.submissions.shape_spread measures it from the
    base boots of submissions (several boots of one kernel, each at a seeded phase) as they come
    in, and the analysis uses it as the boot noise of a metric that has none learned from history.
    """

    machine_class = models.ForeignKey(MachineClass, on_delete=models.CASCADE, related_name="boot_spreads")
    clock = models.CharField(max_length=16, choices=Clock.choices)
    profile = models.CharField(max_length=16)
    vcpus = models.PositiveSmallIntegerField()
    numa_nodes = models.PositiveSmallIntegerField()
    benchmark = models.CharField(max_length=64)
    grid = models.CharField(max_length=32)
    metric = models.CharField(max_length=128)
    # The pooled sd of one boot summary around its kernel's level (log scale for positive values:
    # a relative spread), and the degrees of freedom of that estimate (boots - kernels).
    sd = models.FloatField()
    dof = models.FloatField()
    boots = models.PositiveIntegerField()
    kernels = models.PositiveIntegerField()
    # The jobs (one boot each) it rests on: a submission whose own boots are among them does not
    # take them as a prior for themselves (kperf.core.submissions.shape_spread.spread_for).
    jobs = models.JSONField(default=list)
    measured = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["machine_class", "clock", "profile", "vcpus", "numa_nodes", "benchmark", "grid", "metric"],
                name="unique_boot_spread_per_shape_metric",
            )
        ]

    def __str__(self) -> str:
        return f"{self.metric} on {self.machine_class_id} ({self.profile}, {self.vcpus} vCPUs, {self.grid})"
