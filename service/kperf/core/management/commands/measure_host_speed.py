"""Measure this host's speed for the first estimates on a fresh lab (docs/eta.md, "A fresh lab")."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from kperf.core.lab import eta_cold, host_speed


class Command(BaseCommand):
    help = (
        "Run the speed probe (a second or two of one core) and keep its result: until the lab has measured "
        "builds and jobs, the ETA scales the reference host's durations by it. kperf-up runs it at every start; "
        "elsewhere, run it on the host that builds and boots."
    )

    def handle(self, *args: Any, **opts: Any) -> None:
        row = host_speed.measure()
        speed = eta_cold.HostSpeed(row.probe_seconds, row.ccache_bytes >= host_speed.CCACHE_WARM_BYTES)
        self.stdout.write(f"{row.hostname}: {speed.about()}{', ccache warm' if speed.ccache_warm else ''}")
