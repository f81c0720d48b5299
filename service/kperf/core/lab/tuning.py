"""The machine tuning every boot records, and the comparisons whose boots differ in it.

Runners prepare the machine the way benchmark labs do (the test kernel's
init, runners/kperf_runner/csrc/init_tuning.h) and record each setting in
the boot's environment. Boots measured under different settings (another
cpufreq governor, turbo on for some, another THP mode) differ for reasons
that are not the kernel change; a comparison whose boots, between base and
head or within one side, ran with different settings says so, naming the
setting and its values (docs/benchmarks.md, "Tuning and what is recorded").
"""

from __future__ import annotations

from typing import Any

from django.db.models import Exists, F, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce

from kperf.core.models import BootRecord, SharedJob, Submission

# Environment key -> how the page names it.
TUNING_FACTS = {
    "cpufreq_governor": "cpufreq governor",
    "boost": "turbo/boost",
    "thp": "transparent hugepages",
    "swap": "swap device",
    "swap_total_kb": "swap (kB)",
    "numa_nodes": "NUMA nodes",
    "aslr": "ASLR (randomize_va_space)",
    "isolated_cpus": "isolated CPUs",
    "clocksource": "clock source",
    "drop_caches": "drop caches",
    "settle_ms": "settle after drop caches (ms)",
    "phase_span_us": "seeded phase before each command (µs, 0: none)",
}
# What a boot that did not record a fact (an older runner, an imported run) shows.
NOT_RECORDED = "not recorded"

# (machine class name, benchmark, grid, clock): one comparison.
ComparisonKey = tuple[str, str, str, str]


def _value(environment: Any, fact: str) -> str:
    value = environment.get(fact) if isinstance(environment, dict) else None
    return NOT_RECORDED if value is None or value == "" else str(value)


def _describe(label: str, values: dict[str, dict[str, int]]) -> str:
    """'cpufreq governor differs: base performance (3 boots); head performance (1 boot), powersave (2 boots)'."""
    sides = []
    for side in ("base", "head"):
        counts = values.get(side, {})
        if counts:
            listed = ", ".join(f"{v} ({n} boot{'' if n == 1 else 's'})" for v, n in sorted(counts.items()))
            sides.append(f"{side} {listed}")
    return f"{label} differs: {'; '.join(sides)}"


def differences(sub: Submission) -> dict[ComparisonKey, list[dict[str, Any]]]:
    """Per comparison, every tuning fact whose boots did not all record the same value.

    One query for the whole submission; shared base boots count on the side
    they are shared for, as everywhere else. A comparison whose boots
    recorded none of the facts (imported runs) has nothing to differ in.
    """
    link = SharedJob.objects.filter(job=OuterRef("job_id"), submission=sub)
    rows = (
        BootRecord.objects.filter(Q(job__submission=sub) | Exists(link))
        .annotate(side=Coalesce(Subquery(link.values("side")[:1]), F("job__side")))
        .values_list("job__machine_class__name", "job__benchmark", "job__grid", "job__clock", "side", "environment")
    )
    # key -> fact -> side -> value -> boots
    seen: dict[ComparisonKey, dict[str, dict[str, dict[str, int]]]] = {}
    for mclass, benchmark, grid, clock, side, environment in rows:
        facts = seen.setdefault((mclass, benchmark, grid, clock), {})
        for fact in TUNING_FACTS:
            per_side = facts.setdefault(fact, {}).setdefault(side, {})
            value = _value(environment, fact)
            per_side[value] = per_side.get(value, 0) + 1
    out: dict[ComparisonKey, list[dict[str, Any]]] = {}
    for key, facts in seen.items():
        found = []
        for fact, label in TUNING_FACTS.items():
            values = facts.get(fact, {})
            distinct = {v for counts in values.values() for v in counts}
            if len(distinct) < 2:
                continue
            found.append(
                {
                    "fact": fact,
                    "label": label,
                    # side -> value -> how many boots recorded it
                    "values": {side: dict(sorted(counts.items())) for side, counts in sorted(values.items())},
                    "message": _describe(label, values),
                }
            )
        out[key] = found
    return out
