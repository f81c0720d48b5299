"""The API for results across submissions: the benchmarks, kernels compared, noise learned, mmtests runs imported."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema, Status

from kperf.core import access, benchmarks
from kperf.core.results import mmtests_import, noise_report
from kperf.core.submissions import analysis
from kperf.core.web.api.auth import USER_AUTH, user_of
from kperf.core.web.api.errors import ApiError, responses
from kperf.core.web.shapes import MmtestsImported, NoiseReport

router = Router()


@router.get(
    "/benchmarks", auth=USER_AUTH, tags=["benchmarks"], response=responses(200, list[benchmarks.BenchmarkInfo], 401)
)
def list_benchmarks(request: HttpRequest) -> list[benchmarks.BenchmarkInfo]:
    return benchmarks.describe()


class MmtestsImportIn(Schema):
    kernel_sha: str
    machine_class: str
    run_name: str = ""
    environment: dict[str, Any] = {}
    benchmarks: dict[str, dict[str, Any]]
    # How the run was measured, from kperf's export (kperf.mmtests.KperfRun);
    # none of them for a plain mmtests run (the wall clock).
    clock: str | None = None
    arch: str | None = None
    profile: str | None = None
    vcpus: int | None = None
    numa_nodes: int | None = None


@router.post(
    "/imports/mmtests",
    auth=USER_AUTH,
    tags=["imports"],
    response=responses(201, MmtestsImported, 400, 401, 403, 413, 415, 422),
)
def import_mmtests(request: HttpRequest, payload: MmtestsImportIn) -> Status[MmtestsImported]:
    """Staff only: imported runs are lab-wide reference data that every user's comparisons read."""
    if not access.may_import(user_of(request)):
        raise ApiError(
            403,
            "forbidden",
            "an admin imports the lab's mmtests runs: they are reference data every user's comparisons read; "
            "ask an admin to import yours, or submit the kernels to have kperf measure them",
        )
    try:
        result = mmtests_import.import_mmtests(payload.model_dump())
    except mmtests_import.KernelImportError as e:
        raise ApiError(400, "invalid-import", str(e)) from None
    return Status(201, {"jobs": result.jobs, "samples": result.samples})


@router.get(
    "/compare",
    auth=USER_AUTH,
    tags=["results"],
    response=responses(200, analysis.KernelComparison, 400, 401, 404, 422),
)
def compare_kernels(
    request: HttpRequest, machine_class: str, benchmark: str, base: str, head: str, clock: str | None = None
) -> analysis.KernelComparison:
    """Every finished boot of two kernels (by sha) on one machine class and clock, compared."""
    if not benchmark or benchmark not in mmtests_import.METRIC_RULES:
        raise ApiError(
            400, "invalid-compare", f"unknown benchmark {benchmark!r}: choose from {', '.join(benchmarks.known())}"
        )
    try:
        # Only boots the caller may see: their submissions, readable tracked branches, imported runs.
        visible = access.visible_jobs(user_of(request))
        result = analysis.compare_kernels(machine_class, benchmark, base, head, clock, jobs=visible)
    except noise_report.UnknownClock as e:
        raise ApiError(400, "invalid-compare", str(e)) from None
    if not result["metrics"]:
        raise ApiError(
            404,
            "no-data",
            f"no {benchmark} results for both {base[:12]} and {head[:12]} on {machine_class} "
            f"with the {result['clock']} clock: submit them, import mmtests runs (plain ones are wall clock) "
            "or choose another clock",
        )
    return result


@router.get("/noise", auth=USER_AUTH, tags=["results"], response=responses(200, NoiseReport, 400, 401, 422))
def noise(
    request: HttpRequest, machine_class: str, boots: int = 4, iterations: int = 3, clock: str | None = None
) -> NoiseReport:
    """Per-metric between-build, between-boot and within-boot noise learned
    from history on one clock (default: the machine class's), and the
    smallest change K boots x N iterations per side detect (80% power)."""
    if not 2 <= boots <= 1000 or not 1 <= iterations <= 10000:
        raise ApiError(400, "invalid-noise", "boots must be 2..1000 and iterations 1..10000")
    try:
        clock = noise_report.requested_clock(machine_class, clock)
    except noise_report.UnknownClock as e:
        raise ApiError(400, "invalid-noise", str(e)) from None
    return {
        "machine_class": machine_class,
        "clock": clock,
        "metrics": noise_report.noise_report(machine_class, boots, iterations, clock),
    }
