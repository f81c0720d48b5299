"""The API against its own OpenAPI schema: schemathesis generates requests for every
operation from /api/v1/openapi.json and sends them to a live server.

Every answer must be no server error, have a status the schema documents for
that operation, and match the documented body (ErrorOut for the 4xx).
Bounded so it runs in well under two minutes.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from kperf.core.models import ApiToken, BuildMachine, MachineClass, Runner
from kperf.core.web.api import api

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture
def tokens(transactional_db: Any, alice: Any) -> dict[str, str]:
    """A user's token, a runner's and a build machine's: each operation is called as the one it is for."""
    mclass = MachineClass.objects.create(name="qemu-x86_64", arch="x86_64")
    _, runner = Runner.register("qemu-1", mclass)
    _, user = ApiToken.issue(alice)
    _, builder = BuildMachine.register("builder-1")
    return {"user": user, "runner": runner, "builder": builder}


# The schema the server publishes at /api/v1/openapi.json, read in-process so
# each operation is its own test.
schema = schemathesis.openapi.from_dict(api.get_openapi_schema())


@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_every_operation_answers_as_documented(case: Any, live_server: Any, tokens: dict[str, str]) -> None:
    who = {"runner": "runner", "builder": "builder"}.get(case.path.split("/")[3], "user")
    case.call_and_validate(
        base_url=live_server.url, headers={"Authorization": f"Bearer {tokens[who]}"}, checks=CHECKS, timeout=30
    )
