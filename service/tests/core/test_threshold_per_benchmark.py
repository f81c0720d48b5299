"""The practical threshold per benchmark on the instruction clock (docs/statistics.md,
"The practical threshold per benchmark"): lower where the perturbed-build bench
flagged no unrelated change at it, the clock's default elsewhere, and what an
operator, a submission or a tracked branch set over both."""

from __future__ import annotations

from typing import Any

import pytest

from kperf.conf import ConfigError, env_percentages
from kperf.core import benchmarks
from kperf.stats import min_effect_for_clock
from kperf.stats.abtest import DEFAULT_MIN_EFFECT_PCT, DEFAULT_MIN_EFFECT_PCT_BY_BENCHMARK


def test_the_page_allocator_and_aim9_keep_the_clock_s_default_and_the_others_go_lower() -> None:
    clock = DEFAULT_MIN_EFFECT_PCT["instructions"]
    assert min_effect_for_clock("instructions", "pagealloc") == clock
    assert min_effect_for_clock("instructions", "aim9") == clock
    for bench in ("spawn", "pft"):
        assert 0.0 < min_effect_for_clock("instructions", bench) < clock, bench
    # The wall clock has no per-benchmark defaults.
    assert min_effect_for_clock("wall", "spawn") == DEFAULT_MIN_EFFECT_PCT["wall"]


def test_the_service_reads_the_benchmark_s_default_and_what_was_chosen_wins(settings: Any) -> None:
    by_benchmark = settings.KPERF_MIN_EFFECT_PCT_INSTRUCTIONS_BY_BENCHMARK
    assert by_benchmark == DEFAULT_MIN_EFFECT_PCT_BY_BENCHMARK["instructions"]
    assert benchmarks.min_effect_pct("spawn-vmas-0", "instructions", benchmark="spawn") == 0.25
    assert benchmarks.min_effect_pct("alloc-odr0-1", "instructions", benchmark="pagealloc") == 0.5
    assert benchmarks.min_effect_pct("brk_test", "instructions", benchmark="aim9") == 0.5
    assert benchmarks.min_effect_pct("spawn-vmas-0", "wall", benchmark="spawn") == 3.0
    # A submission's or branch's own threshold is taken as it is.
    assert benchmarks.min_effect_pct("spawn-vmas-0", "instructions", 1.0, "spawn") == 1.0
    # An operator who wants one threshold for every benchmark.
    settings.KPERF_MIN_EFFECT_PCT_INSTRUCTIONS_BY_BENCHMARK = {}
    assert benchmarks.min_effect_pct("spawn-vmas-0", "instructions", benchmark="spawn") == 0.5


def test_the_environment_names_a_threshold_per_benchmark_or_none(monkeypatch: pytest.MonkeyPatch) -> None:
    name = "KPERF_MIN_EFFECT_PCT_INSTRUCTIONS_BY_BENCHMARK"
    monkeypatch.setenv(name, "spawn=0.2, aim9=0.3")
    assert env_percentages(name, {"pft": 0.25}) == {"spawn": 0.2, "aim9": 0.3}
    monkeypatch.setenv(name, "none")
    assert env_percentages(name, {"pft": 0.25}) == {}
    monkeypatch.setenv(name, "")
    assert env_percentages(name, {"pft": 0.25}) == {"pft": 0.25}
    for bad in ("spawn", "spawn=fast", "=0.2", "spawn=-1"):
        monkeypatch.setenv(name, bad)
        with pytest.raises(ConfigError, match="is not name=percent"):
            env_percentages(name, {})
