"""Recompute the history summaries from the raw samples."""

from __future__ import annotations

import logging
import time
from typing import Any

from django.core.management.base import BaseCommand

from kperf.core.results import summaries
from kperf.core.tracking import rebuild


class Command(BaseCommand):
    help = (
        "Recompute every history summary (kernels' runs, tracked commits' points, branches' drift and "
        "between-build sums) from the raw samples: after upgrading a deployment that has history, "
        "or to check them. The change-point detectors start again from the series on the next analysis."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        # The rebuild's progress lines are INFO records of the modules that do it.
        for module in (rebuild.__name__, summaries.__name__):
            logging.getLogger(module).setLevel(logging.INFO)
        started = time.monotonic()
        counts = rebuild.rebuild(summaries.SERIES_WINDOW, progress=True)
        self.stdout.write(
            f"summarised {counts['kernels']} kernel runs, {counts['commits']} tracked commits and "
            f"{counts['series']} branch series in {time.monotonic() - started:.1f} s"
        )
