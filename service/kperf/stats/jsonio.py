"""The JSON formats of `kperf compare --json` and `kperf changepoints --json`.

Both read a document {"metrics": {name: {...}}} and write one keyed the same
way, so anyone can evaluate the detector on their own data with no server.
Input errors raise FormatError with the metric and field at fault.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kperf.stats import boot_spread, build_spread
from kperf.stats.abtest import CLOCKS, MetricInput, MetricResult, NoisePrior, compare_metrics, min_effect_for_clock
from kperf.stats.builds import measured_build_prior
from kperf.stats.changepoints import DEFAULT_THRESHOLD, drift_window, series_change_points
from kperf.stats.summary import summary_rows


class FormatError(ValueError):
    pass


def _metrics(doc: Any) -> Mapping[str, Any]:
    if not isinstance(doc, dict) or not isinstance(doc.get("metrics"), dict):
        raise FormatError('expected a JSON object {"metrics": {"<name>": {...}}}')
    metrics: Mapping[str, Any] = doc["metrics"]
    return metrics


def _boots(name: str, field: str, value: Any) -> list[list[float]]:
    if not isinstance(value, list):
        raise FormatError(
            f"metric {name!r}: {field!r} must be a list (one list of iterations per boot, or a flat list)"
        )
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return [[float(v) for v in value]] if value else []
    boots: list[list[float]] = []
    for i, boot in enumerate(value):
        if not isinstance(boot, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in boot):
            raise FormatError(f"metric {name!r}: {field}[{i}] must be a list of numbers (one boot's iterations)")
        boots.append([float(v) for v in boot])
    return boots


def _number(name: str, spec: Mapping[str, Any], key: str, default: float) -> float:
    value = spec.get(key, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise FormatError(f"metric {name!r}: {key!r} must be a number")
    return float(value)


def _prior(name: str, spec: Mapping[str, Any], key: str) -> NoisePrior | None:
    """An optional {"sd": ..., "dof": ...} object: sd >= 0 on the compared scale, dof > 0."""
    if spec.get(key) is None:
        return None
    n = spec[key]
    if not isinstance(n, dict):
        raise FormatError(f"metric {name!r}: {key!r} must be an object {{'sd': ..., 'dof': ...}}")
    sd, dof = n.get("sd"), n.get("dof")
    if not isinstance(sd, (int, float)) or isinstance(sd, bool) or not 0.0 <= sd < math.inf:
        raise FormatError(f"metric {name!r}: {key}.sd must be a number >= 0 (log scale for positive values)")
    if not isinstance(dof, (int, float)) or isinstance(dof, bool) or not dof > 0.0:
        raise FormatError(f"metric {name!r}: {key}.dof must be a number > 0 (the degrees of freedom of sd)")
    return NoisePrior(float(sd), float(dof))


def _clock(name: str, spec: Mapping[str, Any], default: str | None) -> str | None:
    clock = spec.get("clock", default)
    if clock is not None and clock not in CLOCKS:
        raise FormatError(f"metric {name!r}: 'clock' must be one of {', '.join(CLOCKS)}")
    return clock if isinstance(clock, str) else None


@dataclass(frozen=True)
class Shape:
    """What the samples of a compare document were measured on (its top-level "shape"): which
    priors the project measured apply to them."""

    benchmark: str = ""
    arch: str = ""
    profile: str = ""
    vcpus: int = 0
    numa_nodes: int = 0
    grid: str = ""

    def bench_measured(self) -> bool:
        """Whether the project's phase bench measured this shape: its architecture, profile,
        benchmark and vCPUs (0: the runner's default, one), the quick grid and no NUMA nodes."""
        return (
            self.grid == PHASE_BENCH_GRID
            and self.numa_nodes == 0
            and boot_spread.measured_shape(self.arch, self.profile, self.benchmark, self.vcpus)
        )


# The grid bench/build_noise.py boots (as kperf.core.submissions.priors.BENCH_GRID).
PHASE_BENCH_GRID = "quick"
SHAPE_TEXT = ("benchmark", "arch", "profile", "grid")
SHAPE_COUNTS = ("vcpus", "numa_nodes")
# What a metric's interval rests on when no boot spread is known for its shape (instruction clock).
BOOTS_ALONE = (
    'interval from boots alone: no boot spread known for this shape (give the metric a "noise", '
    'or a "shape" the phase bench measured: docs/statistics.md, "Each shape\'s own boot spread")'
)


def parse_shape(doc: Any, benchmark: str | None = None) -> Shape:
    """The document's optional top-level "shape" object; `benchmark` (kperf compare --benchmark)
    overrides its benchmark."""
    top = doc if isinstance(doc, dict) else {}
    raw = top.get("shape", {})
    if not isinstance(raw, dict):
        raise FormatError(
            '\'shape\' must be an object: {"benchmark": ..., "arch": ..., "profile": ..., '
            '"vcpus": ..., "numa_nodes": ..., "grid": ...}'
        )
    unknown = sorted(set(raw) - set(SHAPE_TEXT) - set(SHAPE_COUNTS))
    if unknown:
        raise FormatError(f"shape: unknown field(s) {', '.join(unknown)}: use {', '.join(SHAPE_TEXT + SHAPE_COUNTS)}")
    for key in SHAPE_TEXT:
        if not isinstance(raw.get(key, ""), str):
            raise FormatError(f"shape.{key} must be a string")
    for key in SHAPE_COUNTS:
        value = raw.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise FormatError(f"shape.{key} must be a whole number >= 0")
    text = {key: str(raw.get(key, "")) for key in SHAPE_TEXT}
    if benchmark:
        text["benchmark"] = benchmark
    return Shape(vcpus=int(raw.get("vcpus", 0)), numa_nodes=int(raw.get("numa_nodes", 0)), **text)


def parse_compare(doc: Any, benchmark: str | None = None) -> tuple[dict[str, MetricInput], float]:
    """MetricInputs and alpha from a compare document.

    Per metric: higher_is_better (required), base, head, and optionally
    min_effect_pct, clock ("instructions" or "wall": picks the default
    min_effect_pct), noise {"sd": ..., "dof": ...} (one boot summary's noise)
    and build_noise {"sd": ..., "dof": ...} (the between-build component).
    Top level: optional alpha, clock and shape (parse_shape).

    Base and head are one build each, so a metric without a build_noise, whose readings are all
    above 0, gets the between-build part the project measured for the shape's benchmark (the
    largest it measured for any, with none named), or per metric where the project measured the
    shape's own (kperf.stats.build_spread: several vCPUs): two builds whose boots agree exactly
    still differ by what builds differ by. A metric without a noise gets the phase bench's boot
    spread where the shape is one it measured.
    """
    top = doc if isinstance(doc, dict) else {}
    alpha = _number("(top level)", top, "alpha", 0.05)
    if not 0.0 < alpha < 1.0:
        raise FormatError("alpha must be between 0 and 1")
    top_clock = _clock("(top level)", top, None)
    shape = parse_shape(doc, benchmark)
    spread = (
        boot_spread.project_spread(shape.arch, shape.profile, shape.benchmark, shape.vcpus)
        if shape.bench_measured()
        else {}
    )
    build = measured_build_prior(shape.benchmark)
    # Per metric where the project measured the shape's between-build part (several vCPUs).
    specs = _metrics(doc)
    build_per_metric = build_spread.parts_for(shape.arch, shape.profile, shape.vcpus, shape.benchmark, list(specs))

    def build_if(name: str, relative: bool) -> NoisePrior | None:
        return build_per_metric.get(name, build) if relative else None

    inputs: dict[str, MetricInput] = {}
    for name, spec in specs.items():
        if not isinstance(spec, dict):
            raise FormatError(f"metric {name!r}: expected an object with base, head and higher_is_better")
        hib = spec.get("higher_is_better")
        if not isinstance(hib, bool):
            raise FormatError(f"metric {name!r}: 'higher_is_better' must be true or false")
        clock = _clock(name, spec, top_clock)
        floor = _number(name, spec, "min_effect_pct", min_effect_for_clock(clock or "wall"))
        if floor < 0.0:
            raise FormatError(f"metric {name!r}: 'min_effect_pct' must be >= 0")
        base, head = _boots(name, "base", spec.get("base")), _boots(name, "head", spec.get("head"))
        # The measured part is relative (on the log scale): it means nothing to readings at or below 0.
        relative = all(v > 0 for boot in (*base, *head) for v in boot)
        inputs[name] = MetricInput(
            base=base,
            head=head,
            higher_is_better=hib,
            min_effect_pct=floor,
            noise=_prior(name, spec, "noise") or spread.get(name),
            build_noise=_prior(name, spec, "build_noise")
            if spec.get("build_noise") is not None
            else build_if(name, relative),
        )
    return inputs, alpha


def boots_alone(doc: Any, benchmark: str | None = None) -> list[str]:
    """The instruction-clock metrics of a compare document whose intervals rest on their boots
    alone: no noise given, and a shape the phase bench has not measured."""
    top = doc if isinstance(doc, dict) else {}
    shape = parse_shape(doc, benchmark)
    measured = shape.bench_measured()
    return [
        name
        for name, spec in _metrics(doc).items()
        if isinstance(spec, dict)
        and spec.get("clock", top.get("clock")) == "instructions"
        and spec.get("noise") is None
        and not measured
    ]


def _clean(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None


def result_json(inp: MetricInput, r: MetricResult) -> dict[str, Any]:
    return {
        "verdict": str(r.verdict),
        "change_pct": _clean(r.change_pct),
        "ci_low_pct": _clean(r.ci_low_pct),
        "ci_high_pct": _clean(r.ci_high_pct),
        "p_value": _clean(r.p_value),
        "q_value": _clean(r.q_value),
        "base_mean": _clean(r.base_mean),
        "head_mean": _clean(r.head_mean),
        "base_boots": r.base_boots,
        "head_boots": r.head_boots,
        "base_samples": r.base_samples,
        "head_samples": r.head_samples,
        "min_effect_pct": r.min_effect_pct,
        "significant": r.significant,
        "build_noise": (
            {"sd": inp.build_noise.sd, "dof": inp.build_noise.dof, "share": _clean(r.extra.get("build_share"))}
            if inp.build_noise is not None
            else None
        ),
        "noise": {"sd": inp.noise.sd, "dof": inp.noise.dof} if inp.noise is not None else None,
        "note": "; ".join(r.notes),
        "notes": list(r.notes),
        "summary": [
            {
                "row": row.label,
                "base": row.base,
                "head": row.head,
                "change_pct": _clean(row.change_pct),
                "significant": row.significant,
            }
            for row in summary_rows(inp, r.verdict)
        ],
    }


def run_compare(
    doc: Any, benchmark: str | None = None
) -> tuple[dict[str, MetricInput], dict[str, MetricResult], dict[str, Any]]:
    inputs, alpha = parse_compare(doc, benchmark)
    results = compare_metrics(inputs, alpha=alpha)
    for name in boots_alone(doc, benchmark):
        results[name].notes.append(BOOTS_ALONE)
    out = {"alpha": alpha, "metrics": {name: result_json(inputs[name], results[name]) for name in inputs}}
    return inputs, results, out


def run_changepoints(doc: Any) -> dict[str, Any]:
    """Change points per metric.

    Per metric: higher_is_better, points [{commit, samples}], optional
    min_effect_pct and drift (also accepted at the top level, with threshold).
    """
    top = doc if isinstance(doc, dict) else {}
    # No threshold given: the one calibrated for each metric's drift rate.
    threshold = _number("(top level)", top, "threshold", 0.0) if "threshold" in top else None
    if threshold is not None and threshold <= 0.0:
        raise FormatError(
            f"threshold must be a positive number (|Z| at which an alarm is raised; {DEFAULT_THRESHOLD:g} by default)"
        )
    top_drift = _number("(top level)", top, "drift", 0.0)
    out: dict[str, Any] = {"metrics": {}}
    for name, spec in _metrics(doc).items():
        if not isinstance(spec, dict) or not isinstance(spec.get("points"), list):
            raise FormatError(f"metric {name!r}: expected an object with 'points': [{{'commit': ..., 'samples': ...}}]")
        hib = spec.get("higher_is_better")
        if not isinstance(hib, bool):
            raise FormatError(f"metric {name!r}: 'higher_is_better' must be true or false")
        commits: list[str] = []
        samples: list[list[list[float]]] = []
        for i, pt in enumerate(spec["points"]):
            if not isinstance(pt, dict):
                raise FormatError(f"metric {name!r}: points[{i}] must be an object with commit and samples")
            commits.append(str(pt.get("commit", i)))
            samples.append(_boots(name, f"points[{i}].samples", pt.get("samples", [])))
        drift = _number(name, spec, "drift", top_drift)
        if drift < 0.0:
            raise FormatError(
                f"metric {name!r}: 'drift' must be >= 0 (the level's random-walk variance per commit "
                "relative to one commit's noise; 0 for a stationary level)"
            )
        found = series_change_points(
            samples,
            hib,
            threshold=threshold,
            min_effect_pct=_number(name, spec, "min_effect_pct", 0.0),
            drift=drift,
        )
        out["metrics"][name] = {
            "drift": drift,
            "window": drift_window(drift),
            "change_points": [
                {
                    "index": cp.index,
                    "commit": commits[cp.index],
                    "direction": cp.direction,
                    "change_pct": round(cp.change_pct, 4),
                    "p_value": cp.p_value,
                    "detected_at": cp.detected_at,
                    "statistic": round(cp.statistic, 4),
                }
                for cp in found
            ],
        }
    return out
