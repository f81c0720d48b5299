"""How far one boot's summary spreads at seeded phases, measured where no history is.

Under the instruction clock each boot starts its commands at a seeded phase of
the kernel's periodic work (docs/statistics.md, "A phase per boot"), and for most
metrics the boots of one build still agree to the digit. A few do not: with one
iteration a boot, the page allocator's `alloc-odr0-8` on the `mm` profile reads
414 or 421 cycles depending on the phase, about half the boots each. Two boots a
side that happen to agree within each side and differ between them then show
no boot spread at all, and a 1.7% difference between two builds of unrelated
changes reads as exact.

A lab with history learns each metric's boot noise from it (kperf.stats.noise).
Without history the spread is what bench/build_noise.py measured on the same
architecture and profile, booted at seeded phases: per metric, the pooled sd of
one boot summary around its kernel's level, with the degrees of freedom of
that estimate. The A/B test takes it as MetricInput.noise, the prior it
moderates the boots' own variance with (abtest, Smyth's empirical-Bayes t), and
drops it, as any prior, when the boots at hand are much noisier than it says.
Metrics whose boots repeated exactly in the record get none: a prior of 0 adds
nothing to boots that agree and is dropped by boots that do not.

The project's table (boot_spread.json beside this module) is made from the
records in bench/records by bench/boot_spread.py; a test checks that it still
is what those records give.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kperf.stats.abtest import Boots, NoisePrior
from kperf.stats.builds import between_build_noise

TABLE = Path(__file__).with_name("boot_spread.json")
# What the method line names as the table's origin.
PROJECT_SOURCE = "phase bench (bench/build_noise.py --seeded)"
# bench/build_noise.py's names for the kernels that run the base's benchmark code: the base, its
# padded builds (perturb-NN), its fault-path builds (perturb-fault-NN: the page allocator's module
# runs none of what they change) and its settle phases.
SAME_CODE = ("base",)
SAME_CODE_PREFIXES = ("perturb-", "phase-")
# Spreads below this (a relative sd of 1e-9: the last bits of a log) are boots that repeat.
_ZERO = 1e-9

Table = dict[str, dict[str, dict[str, NoisePrior]]]  # shape_key() -> benchmark -> metric -> prior


def shape_key(arch: str, profile: str, vcpus: int = 1) -> str:
    """A measured shape's key in the project's tables: "arch/profile" for one vCPU (0, the runner's
    default, is one), "arch/profile/Nvcpus" for more: on two vCPUs the page allocator's per-CPU lists
    are half as long and its boots spread more (docs/benchmarks.md), so one vCPU's figures say
    nothing of two."""
    return f"{arch}/{profile}" if vcpus <= 1 else f"{arch}/{profile}/{vcpus}vcpus"


def spread_of_runs(runs: Mapping[str, Mapping[str, Boots]]) -> dict[str, NoisePrior]:
    """Per metric, the pooled within-kernel spread of boot summaries across `runs` (kernel ->
    metric -> boots of iterations), where it is not 0. Kernels with fewer than two boots of a
    metric add nothing to its estimate."""
    metrics = sorted({m for per in runs.values() for m in per})
    out: dict[str, NoisePrior] = {}
    for metric in metrics:
        group = [per[metric] for per in runs.values() if metric in per]
        noise = between_build_noise([group])
        if noise.boot_dof > 0 and math.isfinite(noise.boot_sd) and noise.boot_sd > _ZERO:
            out[metric] = NoisePrior(noise.boot_sd, noise.boot_dof)
    return out


@dataclass(frozen=True)
class Spread:
    """One metric's measured boot spread: the pooled sd of a boot summary around its kernel's level
    (log scale for positive values), its degrees of freedom (boots - kernels, over the kernels with
    at least two boots), and how many boots and kernels those are. sd 0: the boots repeated."""

    sd: float
    dof: float
    boots: int
    kernels: int

    def prior(self) -> NoisePrior | None:
        """The boot-noise prior for the A/B test; None where the boots repeated (a prior of 0 adds
        nothing to boots that agree and is dropped by boots that do not) or nothing was measured."""
        if self.dof <= 0 or not math.isfinite(self.sd) or self.sd <= _ZERO:
            return None
        return NoisePrior(self.sd, self.dof)


def measured_spread(runs: Mapping[str, Mapping[str, Boots]]) -> dict[str, Spread]:
    """Per metric, the spread of boot summaries around their kernel's level over `runs` (kernel ->
    metric -> boots of iterations), zero spreads included: a lab measuring its own shapes must know
    a metric was measured and repeated, not only where it moved. Metrics no kernel has two boots
    of are left out."""
    metrics = sorted({m for per in runs.values() for m in per})
    out: dict[str, Spread] = {}
    for metric in metrics:
        group = [per[metric] for per in runs.values() if metric in per]
        noise = between_build_noise([group])
        if noise.boot_dof <= 0 or not math.isfinite(noise.boot_sd):
            continue
        sizes = [len([b for b in boots if b]) for boots in group]
        several = [n for n in sizes if n >= 2]
        sd = noise.boot_sd if noise.boot_sd > _ZERO else 0.0
        out[metric] = Spread(sd, noise.boot_dof, sum(several), len(several))
    return out


def spread_of_record(record: object, name: str) -> dict[str, dict[str, NoisePrior]]:
    """Per benchmark and metric, the boot spread of a `bench/build_noise.py --json` record made with
    --seeded (its runs: kernel -> metric -> boots). ValueError says what is missing."""
    results = record.get("results") if isinstance(record, dict) else None
    if not isinstance(results, dict) or not results:
        raise ValueError(f"{name}: not a bench/build_noise.py --json record (no 'results' by benchmark)")
    header = record.get("header", "") if isinstance(record, dict) else ""
    if "seeded phase" not in str(header):
        raise ValueError(f"{name}: its boots were not each at a seeded phase (bench/build_noise.py --seeded)")
    out: dict[str, dict[str, NoisePrior]] = {}
    for bench, result in results.items():
        runs = result.get("runs") if isinstance(result, dict) else None
        # The kernels that run the base's code (the base, its padded builds or settle phases), not
        # the fixtures a record also boots: those change what the benchmark runs.
        same = {
            k: v
            for k, v in (runs.items() if isinstance(runs, dict) else ())
            if k in SAME_CODE or str(k).startswith(SAME_CODE_PREFIXES)
        }
        if len(same) < 2:
            raise ValueError(f"{name}: benchmark {bench!r} has no runs of at least two kernels of the base's code")
        try:
            out[str(bench)] = spread_of_runs(same)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{name}: benchmark {bench!r} has runs that are not boots of numbers ({error})") from None
    return out


def table_of(records: Mapping[str, Sequence[tuple[str, object]]]) -> Table:
    """The project's table: per shape_key(), the spreads of its records (name, record) merged;
    a benchmark measured in two records of one key takes the later one's."""
    table: Table = {}
    for key, named in records.items():
        for name, record in named:
            table.setdefault(key, {}).update(spread_of_record(record, name))
    return table


def to_json(table: Table) -> str:
    """The table as stored (this module's, or kperf.stats.build_spread's): sd and dof per metric,
    rounded to what matters."""
    plain = {
        key: {
            bench: {m: {"sd": float(f"{p.sd:.4g}"), "dof": p.dof} for m, p in sorted(per.items())}
            for bench, per in sorted(benches.items())
        }
        for key, benches in sorted(table.items())
    }
    return json.dumps(plain, indent=1, sort_keys=True) + "\n"


def read_table(path: Path) -> Table:
    """A table as to_json() stored it (this module's, or kperf.stats.build_spread's)."""
    raw = json.loads(path.read_text())
    return {
        key: {
            bench: {m: NoisePrior(float(v["sd"]), float(v["dof"])) for m, v in per.items()}
            for bench, per in benches.items()
        }
        for key, benches in raw.items()
    }


@functools.cache
def _project_table() -> Table:
    return read_table(TABLE)


def project_spread(arch: str, profile: str, benchmark: str, vcpus: int = 1) -> dict[str, NoisePrior]:
    """The project's measured boot spread per metric for a benchmark on an architecture, profile
    and vCPU count; empty where the bench has not measured that combination."""
    return dict(_project_table().get(shape_key(arch, profile, vcpus), {}).get(benchmark, {}))


def measured_shape(arch: str, profile: str, benchmark: str, vcpus: int = 1) -> bool:
    """Whether the project's phase bench measured this benchmark on this architecture, profile and
    vCPU count (its metrics missing from project_spread then repeated exactly)."""
    return benchmark in _project_table().get(shape_key(arch, profile, vcpus), {})
