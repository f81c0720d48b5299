"""A host's measured speed, for the first estimates on a fresh lab (docs/eta.md, "A fresh lab")."""

from __future__ import annotations

from django.db import models


class HostSpeed(models.Model):
    """One run of the speed probe (kperf.core.lab.eta_cold.probe) on a host.

    The ETA reads the newest until the lab has measured real builds and
    jobs; older rows stay as the host's history (a VM moved to slower
    hardware shows here).
    """

    hostname = models.CharField(max_length=255)
    # CPU seconds of the probe's loop, the fastest of its repeats.
    probe_seconds = models.FloatField()
    # The probe is Python: its time depends on the interpreter too.
    python = models.CharField(max_length=32, blank=True, default="")
    # Bytes found in KPERF_CCACHE_DIR when measured (counted up to a cap):
    # a lab whose ccache already holds these sources' objects builds its
    # first base in a fifth of the time.
    ccache_bytes = models.BigIntegerField(default=0)
    measured = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        verbose_name_plural = "host speeds"

    def __str__(self) -> str:
        return f"{self.hostname}: probe {self.probe_seconds:.3f} s"
