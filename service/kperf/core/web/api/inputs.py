"""Input types the API's request bodies share."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator


def _one_or_many(value: Any) -> Any:
    # docs/benchmarks.md promises `"benchmarks": "all"`: one name as a plain
    # string means the list of that name (kperf.core.benchmarks.expand then
    # turns "all" into every benchmark). Anything else is left to the list's
    # own validation, so a number still answers 422 saying what was expected.
    return [value] if isinstance(value, str) else value


# A list of benchmark names, or one name as a string ("all", "spawn").
BenchmarkNames = Annotated[list[str], BeforeValidator(_one_or_many)]
# A list of grid names, or one as a string ("scaling").
GridNames = Annotated[list[str], BeforeValidator(_one_or_many)]
