"""The noise model of a machine class from the pooled kernels' runs (docs/history.md).

What the noise report and a submission's learned prior need of every
kernel measured on a class: the NoisePool rows added up, less the kernels
left out, plus the runs given, and the few runs that may be outliers,
fetched through an index. Its cost is the number of metrics, not of kernels.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from django.db import connection, transaction

from kperf.core.models import Job, NoisePool, RunSummary
from kperf.core.results import summaries
from kperf.stats import noise
from kperf.stats.noise import NoiseModel, RunPool, RunStats


def noise_models(
    mclass_id: int,
    clock: str,
    benchmark: str | None = None,
    grid: str | None = None,
    exclude_shas: Collection[str] = (),
    extra: Mapping[str, Sequence[RunStats]] | None = None,
) -> dict[str, tuple[RunPool, NoiseModel]]:
    """Per metric, the runs pooled and the noise model of every kernel measured
    on a machine class and clock (one run per kernel, benchmark and grid; only
    `benchmark` and `grid` if given), leaving out `exclude_shas` and adding
    `extra` runs: noise.components_from_runs of those runs, read from NoisePool
    and the few runs that may be outliers, so its cost does not grow with history."""
    key: dict[str, object] = {"machine_class_id": mclass_id, "clock": clock}
    if benchmark is not None:
        key["benchmark"] = benchmark
    if grid is not None:
        key["grid"] = grid
    summaries.summarise(Job.objects.filter(status=Job.Status.DONE, **key))
    pools: dict[str, dict[int, RunPool]] = defaultdict(lambda: defaultdict(RunPool))
    for metric, boots, *sums in NoisePool.objects.filter(**key).values_list("metric", "boots", *summaries.POOL_SUMS):
        pools[metric][boots] += RunPool(*sums)
    skip = sorted(set(exclude_shas))
    if skip:
        for r in RunSummary.objects.filter(sha__in=skip, **key):
            pools[r.metric][r.boots] -= RunPool.of(summaries.run_from_row(r))
    extras: dict[str, list[RunStats]] = {m: list(runs) for m, runs in (extra or {}).items()}
    for metric, runs in extras.items():
        for run in runs:
            pools[metric][run.boots] += RunPool.of(run)
    totals = {m: sum(by_boots.values(), RunPool()) for m, by_boots in pools.items()}
    totals = {m: t for m, t in totals.items() if t.runs > 0}
    floors = [
        (m, k, floor, t.log_scale)
        for m, t in totals.items()
        for k in pools[m]
        if (floor := noise.outlier_floor(t, k)) is not None
    ]
    candidates: dict[str, list[RunStats]] = defaultdict(list)
    for metric, run in _outlier_candidates(key, floors, skip):
        candidates[metric].append(run)
    out: dict[str, tuple[RunPool, NoiseModel]] = {}
    for metric, total in sorted(totals.items()):
        out[metric] = (total, noise.components_from_pool(total, candidates[metric] + extras.get(metric, [])))
    return out


def _outlier_candidates(
    key: dict[str, object], floors: list[tuple[str, int, float, bool]], skip: list[str]
) -> list[tuple[str, RunStats]]:
    """The runs above their metric's outlier floor (on the log or linear scale), through the ssb indexes."""
    if not floors:
        return []
    table = RunSummary._meta.db_table
    where = " AND ".join(f"r.{k} = %s" for k in key)
    params: list[Any] = []
    parts = []
    for on_log in (True, False):
        chosen = [f for f in floors if f[3] == on_log]
        if not chosen:
            continue
        column = "ssb_log" if on_log else "ssb_lin"
        # LATERAL ... OFFSET 0: one range scan of the index per metric and number of
        # boots, which the planner may not flatten into a join reading every run of the class.
        parts.append(
            f"SELECT r.metric, r.boots, r.iterations, r.positive, r.ssb_log, r.ssw_log, r.dfw_log, "
            f"r.ssb_lin, r.ssw_lin, r.dfw_lin "
            f"FROM unnest(%s::text[], %s::int[], %s::float8[]) AS t(metric, boots, floor) "
            f"CROSS JOIN LATERAL (SELECT * FROM {table} r WHERE {where} AND r.metric = t.metric "
            f"AND r.boots = t.boots AND r.{column} >= t.floor AND NOT (r.sha = ANY(%s)) OFFSET 0) r"
        )
        params += [[f[0] for f in chosen], [f[1] for f in chosen], [f[2] for f in chosen], *key.values(), skip]
    with transaction.atomic(), connection.cursor() as cursor:
        # The planner's estimate of a range scan per metric is pessimistic enough to
        # compile the query (milliseconds) for what reads a handful of index entries.
        cursor.execute("SET LOCAL jit = off")
        cursor.execute(" UNION ALL ".join(parts), params)
        rows = cursor.fetchall()
    return [
        (
            metric,
            RunStats(
                boots=boots,
                iterations=iterations,
                positive=positive,
                ssb_log=ssb_log if ssb_log is not None else float("nan"),
                ssw_log=ssw_log if ssw_log is not None else float("nan"),
                dfw_log=dfw_log,
                ssb_lin=ssb_lin,
                ssw_lin=ssw_lin,
                dfw_lin=dfw_lin,
            ),
        )
        for metric, boots, iterations, positive, ssb_log, ssw_log, dfw_log, ssb_lin, ssw_lin, dfw_lin in rows
    ]
