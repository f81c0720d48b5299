"""A fresh lab's first ETA from the host's measured speed (kperf.core.lab.eta_cold; docs/eta.md, "A fresh lab").

Before anything was measured, a build was 600 s and a job 120 s whatever the
host. Now the probe `kperf-up` runs (measure_host_speed) scales the reference
host's durations; measured builds and jobs still win as soon as they exist.
"""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from kperf.core import benchmarks
from kperf.core.lab import eta_cold, host_speed
from kperf.core.models import HostSpeed, Job, KernelBuild, MachineClass, Runner, Submission, Tree
from kperf_runner import benchmarks as registry

from tests.conftest import Api

CLASS = "qemu-x86_64"
REF = eta_cold.REFERENCE_PROBE_S


def fresh_submission(alice: Any, tmp_path: Path) -> Submission:
    """A spawn `quick` submission just made on a lab that has built and run nothing (refs not resolved yet)."""
    return Submission.objects.create(
        owner=alice,
        tree=Tree.objects.create(url=str(tmp_path / "tree")),
        head_ref="feature",
        base_ref="master",
        benchmarks=["spawn"],
        arches=["x86_64"],
    )


def alive(runner: Runner) -> None:
    runner.last_heartbeat = timezone.now()
    runner.save(update_fields=["last_heartbeat"])


def host(probe_s: float, ccache_bytes: int = 0) -> None:
    HostSpeed.objects.create(hostname="lab", probe_seconds=probe_s, python="3.11.7", ccache_bytes=ccache_bytes)


def expected_mid(factor: float, mclass: MachineClass, clean_factor: float = 1.0) -> float:
    """A clean base, its head incremental in the base's tree, then the first look's boots on one runner."""
    _, params = benchmarks.grid_for("spawn", "quick", mclass.clock)
    guest = registry.get_benchmark("spawn").guest_seconds(params)
    assert guest is not None
    job = (eta_cold.JOB_OVERHEAD_S + guest * eta_cold.HOST_S_PER_GUEST_S) * factor
    boots = benchmarks.boots_per_side(benchmarks.grid_for("spawn", "quick")[0], mclass.clock)
    builds = (eta_cold.CLEAN_BUILD_S["tiny"] * clean_factor + eta_cold.INCREMENTAL_BUILD_S["tiny"]) * factor
    return float(builds + 2 * boots * job)


@pytest.mark.django_db
def test_a_faster_host_gives_a_fresh_lab_sooner_first_estimates_than_a_slower_one(
    alice: Any, alice_api: Api, qemu_class: MachineClass, runner_api: Any, tmp_path: Path
) -> None:
    runner, _ = runner_api
    alive(runner)
    sub = fresh_submission(alice, tmp_path)

    # Never measured: the fixed defaults, and the answer says so.
    unmeasured = alice_api.get(f"/submissions/{sub.pk}").json()["eta"]
    assert "600 s a build: none measured yet" in unmeasured["basis"]

    host(REF / 2)
    fast = alice_api.get(f"/submissions/{sub.pk}").json()["eta"]
    host(REF * 2)  # measured again later (a slower VM): the newest counts
    slow = alice_api.get(f"/submissions/{sub.pk}").json()["eta"]

    assert fast["seconds"] == round(expected_mid(0.5, qemu_class)), fast
    assert slow["seconds"] == round(expected_mid(2.0, qemu_class)), slow
    assert fast["seconds"] * 3 < slow["seconds"] < unmeasured["seconds"]
    assert "clean tiny build: none measured yet, this host's probe" in slow["basis"]
    assert "incremental tiny build" in slow["basis"] and "spawn quick job" in slow["basis"]
    assert "2.00 x the reference host's time" in slow["basis"]


@pytest.mark.django_db
def test_the_first_estimate_states_its_range_and_a_warm_ccache_shortens_the_clean_build(
    alice: Any, alice_api: Api, qemu_class: MachineClass, runner_api: Any, tmp_path: Path
) -> None:
    runner, _ = runner_api
    alive(runner)
    sub = fresh_submission(alice, tmp_path)
    host(REF)
    d = alice_api.get(f"/submissions/{sub.pk}").json()["eta"]
    mid = expected_mid(1.0, qemu_class)
    assert d["seconds"] == round(mid)
    # Every kind of work at LOW and HIGH times its prior; `high` also holds the
    # boots a second look may add (as many again, KPERF_BOOT_BUDGET_FACTOR 2).
    assert d["low"] == round(mid * eta_cold.LOW)
    builds = (eta_cold.CLEAN_BUILD_S["tiny"] + eta_cold.INCREMENTAL_BUILD_S["tiny"]) * eta_cold.HIGH
    assert d["high"] == round(builds + (mid - builds / eta_cold.HIGH) * 2 * eta_cold.HIGH), d
    assert d["more_jobs"] > 0 and "if a look is inconclusive" in d["line"]

    host(REF, ccache_bytes=host_speed.CCACHE_WARM_BYTES)
    warm = alice_api.get(f"/submissions/{sub.pk}").json()["eta"]
    assert warm["seconds"] == round(expected_mid(1.0, qemu_class, eta_cold.CCACHE_WARM_FACTOR))
    assert "ccache warm" in warm["basis"]


@pytest.mark.django_db
def test_measured_builds_and_jobs_override_the_hosts_speed(
    alice: Any, alice_api: Api, qemu_class: MachineClass, runner_api: Any, tmp_path: Path
) -> None:
    runner, _ = runner_api
    alive(runner)
    sub = fresh_submission(alice, tmp_path)
    end = timezone.now() - timedelta(hours=1)
    other = Tree.objects.create(url=str(tmp_path / "other"))
    build = KernelBuild.objects.create(
        tree=other,
        sha="a" * 40,
        arch="x86_64",
        config_digest="d" * 64,
        status=KernelBuild.Status.DONE,
        started=end - timedelta(seconds=90),
        finished=end,
    )
    for _ in range(3):
        Job.objects.create(
            build=build,
            benchmark="spawn",
            grid="quick",
            machine_class=qemu_class,
            status=Job.Status.DONE,
            started=end - timedelta(seconds=30),
            finished=end,
        )
    boots = benchmarks.boots_per_side(benchmarks.grid_for("spawn", "quick")[0], qemu_class.clock)
    answers = []
    for probe_s in (REF / 2, REF * 2):
        host(probe_s)
        answers.append(alice_api.get(f"/submissions/{sub.pk}").json()["eta"])
    # Two builds of the one measured (90 s), 2K boots of 30 s: the probe changes nothing.
    assert answers[0]["seconds"] == answers[1]["seconds"] == 2 * 90 + 2 * boots * 30
    assert "none measured yet" not in answers[1]["basis"]
    assert "median of 1 recent build" in answers[1]["basis"]


@pytest.mark.django_db
def test_measure_host_speed_keeps_the_probe_and_sees_a_ccache_that_holds_objects(settings: Any, tmp_path: Path) -> None:
    settings.KPERF_CCACHE_DIR = str(tmp_path / "ccache")
    out = io.StringIO()
    call_command("measure_host_speed", stdout=out)
    cold = HostSpeed.objects.get()
    assert cold.probe_seconds > 0 and cold.ccache_bytes == 0
    assert "x the reference host's time" in out.getvalue() and "ccache warm" not in out.getvalue()

    (tmp_path / "ccache" / "a" / "b").mkdir(parents=True)
    (tmp_path / "ccache" / "a" / "b" / "obj").write_bytes(b"\0" * host_speed.CCACHE_WARM_BYTES)
    call_command("measure_host_speed", stdout=out)
    speed = host_speed.latest()
    assert speed is not None and speed.ccache_warm
    assert "ccache warm" in out.getvalue()


def test_the_probe_measures_cpu_time_in_proportion_to_its_work() -> None:
    short, long = eta_cold.probe(loops=100_000, repeats=3), eta_cold.probe(loops=400_000, repeats=3)
    assert 2.5 < long / short < 6, (short, long)
