"""Spawn runs imported before the import read extra VMAs: migration 0020 moves them to their own series."""

from __future__ import annotations

import importlib
import io
from typing import Any

import pytest
from django.apps import apps
from django.core.management import call_command

from kperf.core.models import Job, MetricDef, NoisePool, RunSummary, Sample
from kperf.core.results import mmtests_import, summaries

pytestmark = pytest.mark.django_db

SHA = "e" * 40
migration = importlib.import_module("kperf.core.migrations.0020_imported_spawn_extra_vmas")


def old_import(run: str, values: list[float]) -> Job:
    """What the import stored before it read the extra VMAs: every spawn sample as spawn-vmas-0."""
    samples = [{"metric": "spawn-vmas-0", "iteration": i, "value": v} for i, v in enumerate(values)]
    body = {
        "kernel_sha": SHA,
        "machine_class": "qemu-x86_64",
        "run_name": run,
        "benchmarks": {"spawn": {"samples": samples}},
    }
    (job_id,) = mmtests_import.import_mmtests(body).jobs
    return Job.objects.get(pk=job_id)


def metrics_of(job: Job) -> set[str]:
    return set(Sample.objects.filter(boot_record__job=job).values_list("metric", flat=True))


def pools() -> dict[tuple[str, int], tuple[int, int, float]]:
    return {
        (p.metric, p.boots): (p.runs, p.iterations, p.ssw_lin)
        for p in NoisePool.objects.filter(benchmark="spawn", grid="mmtests-import")
    }


def test_exported_runs_of_extra_vmas_move_to_their_series_and_the_summaries_follow(qemu_class: Any) -> None:
    none = old_import("spawn-vmas-0", [5000.0, 5100.0, 4950.0])
    many = old_import("spawn-vmas-1000", [600.0, 590.0, 612.0])
    lab = old_import("lab-base-1", [5050.0, 5020.0, 4990.0])  # mmtests' own: UnixBench's spawn, no extra VMAs
    summaries.summarise(Job.objects.all())
    merged = RunSummary.objects.get(sha=SHA, metric="spawn-vmas-0")
    assert merged.boots == 3  # the 1000-VMA boot inside the 0-VMA series

    migration.rename_imported_spawn_samples(apps, None)
    assert metrics_of(many) == {"spawn-vmas-1000"}
    assert metrics_of(none) == metrics_of(lab) == {"spawn-vmas-0"}
    assert sorted(Sample.objects.filter(metric="spawn-vmas-1000").values_list("value", flat=True)) == [
        590.0,
        600.0,
        612.0,
    ]
    definition = MetricDef.objects.get(name="spawn-vmas-1000")
    assert (definition.benchmark, definition.unit, definition.higher_is_better) == ("spawn", "forks/s", True)
    many.refresh_from_db()
    assert many.params["run"] == "spawn-vmas-1000" and "from the run's name" in many.params["renamed"]
    none.refresh_from_db()
    assert "renamed" not in none.params
    # Only the moved job is caught up again, on the next read.
    assert set(Job.objects.filter(summarised=True).values_list("pk", flat=True)) == {none.pk, lab.pk}

    assert summaries.summarise(Job.objects.all()) == 1
    runs = {r.metric: r.boots for r in RunSummary.objects.filter(sha=SHA)}
    assert runs == {"spawn-vmas-0": 2, "spawn-vmas-1000": 1}
    # The noise pools the catch-up leaves are those a rebuild from the samples gives.
    caught_up = pools()
    call_command("rebuild_history", stdout=io.StringIO())
    rebuilt = pools()
    assert caught_up.keys() == rebuilt.keys() == {("spawn-vmas-0", 2), ("spawn-vmas-1000", 1)}
    for key, (n, iterations, ssw) in rebuilt.items():
        assert caught_up[key][:2] == (n, iterations) and caught_up[key][2] == pytest.approx(ssw)

    # Run again (a re-applied migration): nothing left to move.
    migration.rename_imported_spawn_samples(apps, None)
    assert metrics_of(many) == {"spawn-vmas-1000"} and summaries.summarise(Job.objects.all()) == 0
