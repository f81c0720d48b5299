"""kperf's statistics: pure Python with numpy and scipy, no Django.

The service loads series through the ORM and hands plain lists to these
functions; everything here is tested without a database.
"""

from kperf.stats.abtest import (
    CLOCKS,
    DEFAULT_MIN_EFFECT_PCT,
    MetricInput,
    MetricResult,
    NoisePrior,
    Verdict,
    compare_metrics,
    compare_one,
    min_effect_for_clock,
)

__all__ = [
    "CLOCKS",
    "DEFAULT_MIN_EFFECT_PCT",
    "MetricInput",
    "MetricResult",
    "NoisePrior",
    "Verdict",
    "compare_metrics",
    "compare_one",
    "min_effect_for_clock",
]
