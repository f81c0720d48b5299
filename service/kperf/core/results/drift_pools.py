"""What every tracked branch's series adds to what is learned per machine class (docs/history.md).

Each branch's SeriesState rows hold the drift and between-build sums of its
series; SeriesPool holds them added up per machine class, benchmark, clock
and metric, kept in step as a branch's rows are replaced (the old row
subtracted, the new one added). The noise report and each analysis read
the pools (one row per metric) instead of every branch's rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
import psycopg
from django.db import connection, transaction
from django.db.models import Model, QuerySet
from django.utils import timezone

from kperf.core.models import Job, SeriesCatchUp, SeriesPool, SeriesState
from kperf.core.results import summaries
from kperf.stats import history as sh
from kperf.stats.builds import BuildNoise
from kperf.stats.changepoints import DRIFT_GRID, DriftEstimate

_GRID = len(DRIFT_GRID)
_BUILD = len(sh.BuildSums().as_list())
# A SeriesState's or SeriesPool's sums, in the order of this vector:
# states, nonpositive, drift_n, drift_used, drift_ssq, drift_logf, build_log, build_lin.
_WIDTH = 4 + 2 * _GRID + 2 * _BUILD
_SUMS = ["drift_n", "drift_used", "drift_ssq", "drift_logf", "build_log", "build_lin"]


def _vector(states: int, nonpositive: int, n: int, used: int, ssq: Any, logf: Any, log_: Any, lin: Any) -> np.ndarray:
    # An empty array: the branch measured the metric but had nothing to add.
    return np.concatenate(
        [
            [states, nonpositive, n, used],
            ssq or np.zeros(_GRID),
            logf or np.zeros(_GRID),
            log_ or np.zeros(_BUILD),
            lin or np.zeros(_BUILD),
        ]
    ).astype(float)


def _state_vector(row: tuple[Any, ...]) -> np.ndarray:
    """A SeriesState's sums (values_list("positive", *_SUMS)) as one pool's worth."""
    positive, n, used, ssq, logf, log_, lin = row
    return _vector(1, 0 if positive else 1, n, used, ssq, logf, log_, lin)


class ClassSums(NamedTuple):
    """Every branch's SeriesState of one metric added up."""

    drift: sh.DriftStats
    build_log: sh.BuildSums
    build_lin: sh.BuildSums
    positive: bool


def _class_sums(v: np.ndarray) -> ClassSums:
    at = 4
    ssq, logf = v[at : at + _GRID], v[at + _GRID : at + 2 * _GRID]
    at += 2 * _GRID
    log_, lin = v[at : at + _BUILD], v[at + _BUILD :]
    return ClassSums(
        sh.DriftStats(tuple(ssq.tolist()), tuple(logf.tolist()), round(v[2]), round(v[3])),
        sh.BuildSums.from_list([*log_[:5].tolist(), round(log_[5]), round(log_[6])]),
        sh.BuildSums.from_list([*lin[:5].tolist(), round(lin[5]), round(lin[6])]),
        round(v[1]) == 0,
    )


def _write_pools(mclass_id: int, bench: str, clock: str, pools: dict[str, np.ndarray]) -> None:
    """Store these pools of one class, benchmark and clock (rows with no state left go)."""
    key = {"machine_class_id": mclass_id, "benchmark": bench, "clock": clock}
    gone = [m for m, v in pools.items() if round(v[0]) <= 0]
    SeriesPool.objects.filter(**key, metric__in=gone).delete()
    rows = []
    for metric, v in pools.items():
        if metric in gone:
            continue
        s = _class_sums(v)
        rows.append(
            {
                **key,
                "metric": metric,
                "states": round(v[0]),
                "nonpositive": round(v[1]),
                **_sum_columns(s.drift, s.build_log, s.build_lin),
            }
        )
    _upsert(SeriesPool, ["machine_class_id", "clock", "benchmark", "metric"], rows, ["states", "nonpositive", *_SUMS])


def _sum_columns(drift: sh.DriftStats, build_log: sh.BuildSums, build_lin: sh.BuildSums) -> dict[str, Any]:
    """The _SUMS columns of a SeriesState or SeriesPool row."""
    return {
        "drift_n": drift.n,
        "drift_used": drift.used,
        "drift_ssq": drift.ssq,
        "drift_logf": drift.logf,
        "build_log": build_log.as_list(),
        "build_lin": build_lin.as_list(),
    }


def _float_array(values: Sequence[float]) -> str:
    # repr is the shortest text that reads back as the same float; one string
    # per array instead of psycopg quoting every element in Python.
    return "{" + ",".join(map(repr, values)) + "}"


def _upsert(model: type[Model], unique: list[str], rows: list[dict[str, Any]], update: list[str]) -> None:
    """INSERT ... ON CONFLICT (unique) DO UPDATE of `update`, arrays sent as one literal each.

    What bulk_create(update_conflicts=True) does, for rows whose float arrays
    (tuples or lists) made Django's and psycopg's per-element quoting a fifth
    of an analysis after a commit."""
    if not rows:
        return
    columns = list(rows[0])
    arrays = {c for c in columns if isinstance(rows[0][c], (list, tuple))}
    one = "(" + ", ".join("%s::float8[]" if c in arrays else "%s" for c in columns) + ")"
    params = [_float_array(r[c]) if c in arrays else r[c] for r in rows for c in columns]
    sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in update)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {model._meta.db_table} ({', '.join(columns)}) VALUES {', '.join([one] * len(rows))} "
            f"ON CONFLICT ({', '.join(unique)}) DO UPDATE SET {sets}",
            params,
        )


def _write_detectors(key: dict[str, Any], detectors: dict[str, bytes]) -> None:
    """Each metric's detector into its SeriesState row, as binary parameters.

    A branch's detectors are megabytes (each holds its window's summaries);
    Django's cursor would quote them into hex literals in Python, which cost
    more than the rest of an analysis. The column is stored uncompressed
    (migration 0030): float arrays do not compress, and trying cost the database
    as much again."""
    table = SeriesState._meta.db_table
    connection.ensure_connection()
    # Server-side binding (a plain psycopg cursor on Django's connection, in its
    # transaction): %b sends the bytes as they are.
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.executemany(
            f"UPDATE {table} SET detector = %b WHERE branch_id = %s AND machine_class_id = %s "
            "AND benchmark = %s AND clock = %s AND metric = %s",
            [
                (d, key["branch_id"], key["machine_class_id"], key["benchmark"], key["clock"], m)
                for m, d in sorted(detectors.items())
            ],
        )


def _pool_lock(mclass_id: int, bench: str, clock: str) -> None:
    summaries._lock("series pool", mclass_id, bench, clock)


def store_branch_sums(
    branch_id: int,
    mclass_id: int,
    bench: str,
    clock: str,
    sums: dict[str, summaries.BranchSums],
    commits: int,
    detectors: dict[str, bytes] | None = None,
) -> None:
    """Replace a branch's SeriesState rows, and move the class's pools by the
    difference; `detectors`: each metric's detector (else they are left as they are).
    The caller holds a transaction."""
    key = {"branch_id": branch_id, "machine_class_id": mclass_id, "benchmark": bench, "clock": clock}
    # Branches of one class store one at a time from here to their commit, so
    # none adds to a pool another has read and not yet written.
    _pool_lock(mclass_id, bench, clock)
    delta: dict[str, np.ndarray] = {}
    for metric, *row in SeriesState.objects.filter(**key).values_list("metric", "positive", *_SUMS):
        delta[metric] = -_state_vector(tuple(row))
    for metric, s in sums.items():
        new = _vector(
            1,
            0 if s.positive else 1,
            s.drift.n,
            s.drift.used,
            list(s.drift.ssq),
            list(s.drift.logf),
            s.build_log.as_list(),
            s.build_lin.as_list(),
        )
        delta[metric] = delta.get(metric, np.zeros(_WIDTH)) + new
    SeriesState.objects.filter(**key).exclude(metric__in=list(sums)).delete()
    now = timezone.now()
    _upsert(
        SeriesState,
        ["branch_id", "machine_class_id", "benchmark", "clock", "metric"],
        [
            {
                **key,
                "metric": m,
                "commits": commits,
                **_sum_columns(s.drift, s.build_log, s.build_lin),
                "positive": s.positive,
                "detector": b"",
                "updated": now,
            }
            for m, s in sorted(sums.items())
        ],
        ["commits", "positive", *_SUMS, "updated"],
    )
    if detectors is not None:
        _write_detectors(key, {m: detectors.get(m, b"") for m in sums})
    pools = _read_pools(mclass_id, clock, bench)
    _write_pools(
        mclass_id,
        bench,
        clock,
        {m: pools.get((bench, m), np.zeros(_WIDTH)) + d for m, d in delta.items()},
    )


def _read_pools(mclass_id: int, clock: str, bench: str | None = None) -> dict[tuple[str, str], np.ndarray]:
    qs = SeriesPool.objects.filter(machine_class_id=mclass_id, clock=clock)
    if bench is not None:
        qs = qs.filter(benchmark=bench)
    return {
        (b, m): _vector(*row) for b, m, *row in qs.values_list("benchmark", "metric", "states", "nonpositive", *_SUMS)
    }


def rebuild_pools(mclass_id: int, bench: str, clock: str) -> None:
    """Add one class's, benchmark's and clock's pools up again from the branches' rows."""
    with transaction.atomic():
        _pool_lock(mclass_id, bench, clock)
        pools: dict[str, np.ndarray] = {}
        rows = SeriesState.objects.filter(machine_class_id=mclass_id, benchmark=bench, clock=clock)
        for metric, *row in rows.order_by("metric", "branch_id").values_list("metric", "positive", *_SUMS):
            pools[metric] = pools.get(metric, np.zeros(_WIDTH)) + _state_vector(tuple(row))
        SeriesPool.objects.filter(machine_class_id=mclass_id, benchmark=bench, clock=clock).delete()
        _write_pools(mclass_id, bench, clock, pools)


def _heal(mclass_id: int, clock: str, bench: str | None) -> None:
    """Add up again the pools whose count of rows is not the branches' (rows that
    left without store_branch_sums: a branch deleted). One statement, one snapshot."""
    table, pool = SeriesState._meta.db_table, SeriesPool._meta.db_table
    where = "machine_class_id = %s AND clock = %s" + (" AND benchmark = %s" if bench is not None else "")
    params: list[int | str] = [mclass_id, clock, *([bench] if bench is not None else [])]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT coalesce(s.benchmark, p.benchmark) FROM "
            f"(SELECT benchmark, count(*) AS n FROM {table} WHERE {where} GROUP BY benchmark) s FULL JOIN "
            f"(SELECT benchmark, sum(states) AS n FROM {pool} WHERE {where} GROUP BY benchmark) p "
            f"ON p.benchmark = s.benchmark WHERE s.n IS DISTINCT FROM p.n",
            params * 2,
        )
        stale = [b for (b,) in cursor.fetchall()]
    for b in stale:
        rebuild_pools(mclass_id, b, clock)


def class_sums(
    mclass_id: int, clock: str, bench: str | None = None, exclude_branch: int | None = None
) -> dict[tuple[str, str], ClassSums]:
    """Per (benchmark, metric), the SeriesState rows of every branch (but
    `exclude_branch`'s) of a machine class and clock added up: the pools, less
    that branch's rows. The caller has run ensure_states."""
    _heal(mclass_id, clock, bench)
    pools = _read_pools(mclass_id, clock, bench)
    if exclude_branch is not None:
        rows = SeriesState.objects.filter(branch_id=exclude_branch, machine_class_id=mclass_id, clock=clock)
        if bench is not None:
            rows = rows.filter(benchmark=bench)
        for b, m, *row in rows.values_list("benchmark", "metric", "positive", *_SUMS):
            if (b, m) in pools:
                pools[(b, m)] = pools[(b, m)] - _state_vector(tuple(row))
    return {k: _class_sums(v) for k, v in sorted(pools.items()) if round(v[0]) > 0}


def drift_sums(
    mclass_id: int, bench: str, clock: str, exclude_branch: int | None = None, ensure: bool = True
) -> dict[str, sh.DriftStats]:
    """Per metric, the drift sums of every branch's series (but `exclude_branch`'s);
    ensure=False: the caller has just run ensure_states."""
    if ensure:
        ensure_states(mclass_id, bench, clock)
    return {m: s.drift for (_, m), s in class_sums(mclass_id, clock, bench, exclude_branch).items()}


def learned_drift(mclass_id: int, bench: str, clock: str, ensure: bool = True) -> dict[str, DriftEstimate]:
    """The drift of every branch's series pooled per metric, from the branches' sums (docs/history.md)."""
    return {m: sh.drift_from_stats(s) for m, s in drift_sums(mclass_id, bench, clock, ensure=ensure).items()}


def build_noise_of(sums: ClassSums) -> BuildNoise:
    """The between-build noise of one metric from its added-up rows."""
    # A row exists only for a metric its branch measured, so every metric here has values.
    return sh.build_noise_from_sums(sums.build_log if sums.positive else sums.build_lin, sums.positive)


def learned_build_noise(mclass_id: int, bench: str, clock: str, ensure: bool = True) -> dict[str, BuildNoise]:
    """The between-build noise of every metric, pooled from the branches' sums (docs/history.md)."""
    if ensure:
        ensure_states(mclass_id, bench, clock)
    return {m: build_noise_of(s) for (_, m), s in class_sums(mclass_id, clock, bench).items()}


def ensure_states(mclass_id: int, bench: str, clock: str) -> int:
    """Give every branch that measured this series a SeriesState (those whose
    commits reached the database without an analysis); returns how many were added."""
    summaries.summarise(
        Job.objects.filter(machine_class_id=mclass_id, benchmark=bench, clock=clock, branch_commit__isnull=False)
    )
    return _catch_up(SeriesCatchUp.objects.filter(machine_class_id=mclass_id, benchmark=bench, clock=clock))


def ensure_class_states(mclass_id: int, clock: str) -> list[str]:
    """ensure_states() for every benchmark of a machine class and clock (the
    caller has summarised its jobs); returns the benchmarks some branch measured there."""
    _catch_up(SeriesCatchUp.objects.filter(machine_class_id=mclass_id, clock=clock))
    return sorted(
        set(SeriesState.objects.filter(machine_class_id=mclass_id, clock=clock).values_list("benchmark", flat=True))
    )


def _catch_up(noted: QuerySet[SeriesCatchUp]) -> int:
    """States for the series summaries.summarise noted without one; the notes removed.
    Reads the notes (a handful, usually none), never the jobs."""
    rows = list(noted.values_list("pk", "branch_id", "machine_class_id", "benchmark", "clock"))
    if not rows:
        return 0
    have = set(
        SeriesState.objects.filter(branch_id__in={r[1] for r in rows}, machine_class_id__in={r[2] for r in rows})
        .values_list("branch_id", "machine_class_id", "benchmark", "clock")
        .distinct()
    )
    added = 0
    for _pk, branch_id, mclass_id, bench, clock in rows:
        if (branch_id, mclass_id, bench, clock) not in have:
            added += _add_states([(branch_id, bench)], mclass_id, clock)
    SeriesCatchUp.objects.filter(pk__in=[r[0] for r in rows]).delete()
    return added


def _add_states(missing: Iterable[tuple[int, str]], mclass_id: int, clock: str) -> int:
    added = 0
    for branch_id, bench in list(missing):
        ids = [c for c, _ in summaries.series_commits(branch_id, mclass_id, bench, clock, summaries.SERIES_WINDOW)]
        sums = summaries.branch_sums(
            ids,
            summaries.series_points(ids, mclass_id, bench, clock),
            summaries.cuts_of(branch_id, mclass_id, bench, clock),
        )
        with transaction.atomic():
            store_branch_sums(branch_id, mclass_id, bench, clock, sums, len(ids))
        added += 1
    return added
