"""The tracked-branch request (kperf.core.tracking.request): the API's body is the schema the
domain takes, each field declared once; refusals name their field (test_tracking.py)."""

from __future__ import annotations

from kperf.core.tracking.request import TrackRequest
from kperf.core.web.api import api
from kperf.core.web.api.branches import TrackIn


def test_the_api_body_is_the_schemas_fields_with_their_descriptions() -> None:
    assert issubclass(TrackIn, TrackRequest) and set(TrackIn.model_fields) == set(TrackRequest.model_fields)
    body = api.get_openapi_schema()["components"]["schemas"]["TrackIn"]
    assert set(body["properties"]) == set(TrackRequest.model_fields)
    assert sorted(body["required"]) == ["branch", "tree"]
    for name, field in TrackRequest.model_fields.items():
        assert field.description, name
        assert body["properties"][name]["description"] == field.description, name


def test_one_benchmark_or_all_come_as_a_string_as_for_a_submission() -> None:
    assert TrackRequest.model_validate({"tree": "t", "branch": "b", "benchmarks": "pft"}).benchmarks == ["pft"]
    assert TrackRequest.model_validate({"tree": "t", "branch": "b"}).benchmarks == ["spawn"]
