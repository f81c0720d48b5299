"""The between-build part per metric, for the shapes where a change elsewhere in the kernel moves it.

On one vCPU under the instruction clock the page allocator's module reads the
same with any unrelated change: padding the code moved none of its 120 metrics
(kperf.stats.builds, MEASURED_BUILD_SD), and the memcg fixture, which makes every
page fault a few dozen instructions longer, left them where the base had them at
the same phase seed. On two vCPUs it does not: the same fixture read the
order-4 rows about 1% lower at most seeds, and an order-2 row jumped by 1% at
one seed in six (docs/benchmarks.md, "The page allocator on one vCPU and on
two"). Two CPUs interleave the boot's faults with each other's per-CPU list
refills and drains, so a kernel whose faults cost a little more leaves the
allocator's lists in another state when the module runs. That is a part of
every difference between two builds on that shape, and one figure per
benchmark (the largest of its metrics) would make every page-allocator metric
undecidable for the sake of its order-0 rows, whose boots spread by 10%.

Spawn, aim9 and pft move on two vCPUs even with padding, code no one runs
(spawn-vmas-0 0.23% between builds where one vCPU's moved 0.003%), so their
parts there come from a padded record of the shape.

So the project measures it per metric on the shapes where it is not 0:
bench/build_noise.py --perturb fault-path builds the base K times with 4, 8,
... instructions' worth more work per page fault (a patch to the fault path
that the allocator's module never runs), boots each at seeded phases, and
estimates each metric's between-build sd (kperf.stats.builds.between_build_noise).
A metric's part is the largest estimate in its group, the metric's name
without its last "-N" (`alloc-odr2` for `alloc-odr2-1` ... `alloc-odr2-128`):
the batch sizes of one order share the state that moves, and K builds estimate
one metric too roughly to trust a group member that happened to read low. Never
below MEASURED_BUILD_FLOOR, with the K builds' degrees of freedom.

A change in timing (fault-path, fault-pause, cache-pause) moves the allocator
in steps, not in a bell: which of a few states its lists start in. Since its
module runs alone (kmodload -s) the builds of the three kinds spread the
order-2 rows by 0.04-0.2% (sd), while the memcg fixture moved them by 0.95%,
4.5 times the largest sd and past any of the 24 builds; a part from the sd
flagged those rows in the realistic tier. For those kinds the part is the
largest departure of any build from the base in the group, a bound the
fixture stays within in the interval (TIMING_KINDS). Padding's part stays
the sd: it moves spawn, aim9 and pft by layout, in a spread.

The table (build_spread.json beside this module) is made from the records in
bench/records by bench/boot_spread.py; a test checks it is what they give.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from kperf.stats.abtest import NoisePrior
from kperf.stats.boot_spread import read_table, shape_key
from kperf.stats.builds import MEASURED_BUILD_FLOOR, between_build_rows

TABLE = Path(__file__).with_name("build_spread.json")
# What the method line names as the table's origin.
PROJECT_SOURCE = (
    "perturbed-build bench on this shape (bench/build_noise.py --perturb padding, fault-path, fault-pause, cache-pause)"
)
# The records' kinds of change (bench/build_noise.py --perturb): code no one runs; more work, or more
# pauses, per page fault; more pauses per page put in the page cache (the last three measured for
# the page allocator only, whose module runs none of it).
KINDS = ("padding", "fault-path", "fault-pause", "cache-pause")
# The kinds that change timing: their part is the group's largest departure from the base, not its sd.
TIMING_KINDS = ("fault-path", "fault-pause", "cache-pause")

Table = dict[str, dict[str, dict[str, NoisePrior]]]  # shape_key() -> benchmark -> metric -> prior

_POINT = re.compile(r"-\d+$")


def metric_group(metric: str) -> str:
    """The metric's name without its sweep point: `alloc-odr2-16` -> `alloc-odr2`."""
    return _POINT.sub("", metric)


def build_spread_of_record(record: object, name: str) -> dict[str, dict[str, NoisePrior]]:
    """Per benchmark and metric, the between-build part of a `bench/build_noise.py --perturb ...
    --json` record: the largest between-build sd of the metric's group (for a change in timing, the
    largest departure of a build from the base: TIMING_KINDS), at least MEASURED_BUILD_FLOOR, with
    the builds' degrees of freedom. ValueError says what is wrong."""
    if not isinstance(record, dict) or record.get("perturb") not in KINDS or record.get("kind") != "builds":
        raise ValueError(
            f"{name}: not a record of perturbed builds that names its perturbation (bench/build_noise.py "
            "--perturb padding, fault-path, fault-pause or cache-pause, from 2026-12-07 on)"
        )
    results = record.get("results")
    if not isinstance(results, dict) or not results:
        raise ValueError(f"{name}: no 'results' by benchmark")
    out: dict[str, dict[str, NoisePrior]] = {}
    for bench, result in results.items():
        column = "largest_pct" if record["perturb"] in TIMING_KINDS else "between_build_pct"
        sds, dof = between_build_rows(result, name, str(bench), column)
        groups: dict[str, float] = {}
        for metric, sd in sds.items():
            groups[metric_group(metric)] = max(groups.get(metric_group(metric), 0.0), sd)
        out[str(bench)] = {m: NoisePrior(max(groups[metric_group(m)], MEASURED_BUILD_FLOOR), dof) for m in sorted(sds)}
    return out


def table_of(records: dict[str, list[tuple[str, object]]]) -> Table:
    """The project's table: per shape_key(), its records' parts merged, each metric taking the
    larger part where two records measured it (each kind of change is one a patch can make)."""
    table: Table = {}
    for key, named in records.items():
        for name, record in named:
            for bench, per in build_spread_of_record(record, name).items():
                have = table.setdefault(key, {}).setdefault(bench, {})
                for metric, prior in per.items():
                    if metric not in have or prior.sd > have[metric].sd:
                        have[metric] = prior
    return table


@functools.cache
def _project_table() -> Table:
    return read_table(TABLE)


def _vcpus_of(key: str) -> int:
    return int(key.rsplit("/", 1)[1].removesuffix("vcpus")) if key.count("/") == 2 else 1


def _chosen_key(arch: str, profile: str, vcpus: int, benchmark: str) -> str | None:
    """The table's shape whose figures apply: this one where it was measured; for several vCPUs
    not measured, the measured shape of the same architecture and profile with the nearest count
    of several vCPUs, else the nearest of any; None where none applies."""
    table = _project_table()
    key = shape_key(arch, profile, vcpus)
    if benchmark in table.get(key, {}) or vcpus <= 1:
        return key if benchmark in table.get(key, {}) else None
    several = [k for k in table if _vcpus_of(k) > 1 and benchmark in table[k]]
    same = [k for k in several if k.startswith(f"{arch}/{profile}/")]
    pool = same or several
    return min(pool, key=lambda k: (abs(_vcpus_of(k) - vcpus), k)) if pool else None


def shape_build_priors(arch: str, profile: str, vcpus: int, benchmark: str) -> dict[str, NoisePrior]:
    """The measured between-build part per metric for a benchmark on this shape; empty where the
    project measured none for it (the benchmark's one figure, kperf.stats.builds, applies there).

    A shape with several vCPUs that was not measured itself takes the figures of the nearest
    measured shape with several (_chosen_key): the interleaving that moves the allocator is there
    with any second CPU, and a figure from another shape is nearer than one vCPU's 0."""
    key = _chosen_key(arch, profile, vcpus, benchmark)
    return dict(_project_table()[key][benchmark]) if key else {}


def parts_for(arch: str, profile: str, vcpus: int, benchmark: str, metrics: list[str]) -> dict[str, NoisePrior]:
    """shape_build_priors() for `metrics` by their groups: a point of a grid the records did not boot
    (spawn's `full` grid's `spawn-vmas-200`) takes its group's part (`spawn-vmas`); a metric whose
    group was not measured has none here."""
    groups = {metric_group(m): p for m, p in shape_build_priors(arch, profile, vcpus, benchmark).items()}
    return {m: groups[metric_group(m)] for m in metrics if metric_group(m) in groups}


def source_for(arch: str, profile: str, vcpus: int, benchmark: str) -> str:
    """The method line's words for where shape_build_priors() took its figures ("" where nowhere)."""
    key = _chosen_key(arch, profile, vcpus, benchmark)
    if key is None:
        return ""
    a, p, _ = key.split("/")
    where = f"{PROJECT_SOURCE} on {a} `{p}` with {_vcpus_of(key)} vCPUs"
    return where if key == shape_key(arch, profile, vcpus) else f"{where}, the nearest shape it measured"
