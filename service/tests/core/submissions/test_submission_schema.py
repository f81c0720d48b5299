"""One submission request for the API and the web form (kperf.core.submissions.request).

The same bad input is refused by both, naming the same field in the same
words; the same good input stores the same submission through either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from kperf.core.models import PatchSeries, Submission
from kperf.core.submissions.request import REFUSED, SubmissionRequest
from kperf.core.web.api import api
from kperf.core.web.submission_form import SubmissionForm

from tests.conftest import Api
from tests.series_fixtures import lists_allowed  # noqa: F401 (an autouse fixture: the lists mailed are allowed)

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser(alice: Any) -> Client:
    c = Client()
    assert c.login(username="alice", password="alice-password-1")
    return c


def request_body(tree: Path, /, **changes: Any) -> dict[str, Any]:
    """An API body for tree's feature branch against master. The arches are given: a form's boxes none of
    which is ticked post nothing, which the form reads as no architecture."""
    body = {"tree": str(tree), "branch": "feature", "base": "master", "benchmarks": ["spawn"], "arches": ["x86_64"]}
    return body | changes


def as_posted(body: dict[str, Any]) -> dict[str, Any]:
    """What the form posts for the same request: the addresses typed in one text, the rest as they are
    (a list as the values of its ticked boxes)."""
    return {k: ", ".join(v) if k == "mail_to" else v for k, v in body.items()}


def form_errors(browser: Client, body: dict[str, Any]) -> dict[str, list[str]]:
    resp = browser.post("/submissions/new", as_posted(body))
    assert resp.status_code == 200, resp
    return {field: list(messages) for field, messages in resp.context["form"].errors.items()}


BAD = [
    ({"branch": "a..b"}, "branch", "'..'"),
    ({"branch": ""}, "branch", "give a branch to test, or a patch series"),
    ({"base": "-x"}, "base", "starts with '-'"),
    ({"tree": "ext::sh -c id"}, "tree", "transport"),
    ({"benchmarks": ["dhrystone"]}, "benchmarks", "unknown benchmark 'dhrystone'"),
    ({"benchmarks": []}, "benchmarks", "no benchmark"),
    ({"grids": ["huge"]}, "grids", "no grid 'huge' in spawn"),
    ({"benchmarks": ["spawn", "pft"], "grids": ["scaling"]}, "grids", "'spawn' has none of the grids scaling"),
    ({"profile": "huge"}, "profile", "unknown configuration profile 'huge'"),
    ({"arches": ["riscv"]}, "arches", "unknown architecture"),
    ({"arches": ["arm64"]}, "arches", "no machine class runs arm64"),
    ({"min_effect_pct": "99"}, "min_effect_pct", "a percentage from 0.05 to 50"),
    ({"boot_params": "nosmt kperf.boot=1"}, "boot_params", "'kperf.boot=1' is kperf's own"),
    ({"thp": "sometimes"}, "thp", "thp must be one of"),
    ({"mail_to": ["nobody-at-example"]}, "mail_to", "'nobody-at-example' is not an e-mail address"),
]


@pytest.mark.parametrize(("change", "field", "says"), BAD, ids=[f"{f}-{i}" for i, (_, f, _) in enumerate(BAD)])
def test_the_api_and_the_form_refuse_the_same_input_naming_the_same_field(
    alice_api: Api, browser: Client, small_tree: Path, qemu_class: Any, change: dict[str, Any], field: str, says: str
) -> None:
    body = request_body(small_tree, **change)
    resp = alice_api.post("/submissions", body)
    assert resp.status_code == 400, resp.content
    err = resp.json()
    assert (err["code"], err["field"]) == ("invalid-submission", field) and says in err["detail"]
    # The form: the one error, next to the same field, in the API's words.
    assert form_errors(browser, body) == {field: [err["detail"]]}
    assert not Submission.objects.exists()


def test_a_value_of_the_wrong_type_is_named_alike_by_both(
    alice_api: Api, browser: Client, small_tree: Path, qemu_class: Any
) -> None:
    body = request_body(small_tree, min_effect_pct="lots")
    resp = alice_api.post("/submissions", body)
    assert resp.status_code == 422 and resp.json()["code"] == "invalid" and resp.json()["field"] == "min_effect_pct"
    errors = form_errors(browser, body)
    assert list(errors) == ["min_effect_pct"]
    assert resp.json()["detail"] == f"min_effect_pct: {errors['min_effect_pct'][0]}"
    assert "valid number" in resp.json()["detail"] and not Submission.objects.exists()


def stored(sub: Submission) -> dict[str, Any]:
    fields = ["owner_id", "tree_id", "kind", "head_ref", "base_ref", "benchmarks", "grids", "arches"]
    fields += ["min_effect_pct", "boot_params", "thp", "profile", "mail_to", "status"]
    return {f: getattr(sub, f) for f in fields}


def test_the_api_and_the_form_store_the_same_submission_for_the_same_input(
    alice_api: Api, browser: Client, small_tree: Path, qemu_class: Any
) -> None:
    body = request_body(
        small_tree,
        benchmarks=["spawn", "pft"],
        grids=["quick", "scaling"],
        profile="mm",
        min_effect_pct="1.5",
        boot_params="mitigations=off",
        thp="madvise",
        mail_to=["list@example.org", "other@example.org"],
    )
    resp = alice_api.post("/submissions", body)
    assert resp.status_code == 201, resp.content
    posted = browser.post("/submissions/new", as_posted(body))
    assert posted.status_code == 302, posted.context and posted.context["form"].errors
    by_api, by_form = Submission.objects.order_by("pk")
    assert posted["Location"] == f"/submissions/{by_form.pk}"
    assert stored(by_api) == stored(by_form)
    assert stored(by_form) | {"owner_id": 0, "tree_id": 0} == {
        "owner_id": 0,
        "tree_id": 0,
        "kind": "branch",
        "head_ref": "feature",
        "base_ref": "master",
        "benchmarks": ["spawn", "pft"],
        "grids": ["quick", "scaling"],
        "arches": ["x86_64"],
        "min_effect_pct": 1.5,
        "boot_params": "mitigations=off",
        "thp": "madvise",
        "profile": "mm",
        "mail_to": ["list@example.org", "other@example.org"],
        "status": "queued",
    }


def test_a_series_sent_as_text_and_uploaded_as_a_file_is_stored_alike(
    alice_api: Api, browser: Client, small_tree: Path, mbox: bytes, qemu_class: Any, settings_dirs: Any
) -> None:
    body = {"tree": str(small_tree), "base": "master", "benchmarks": ["spawn"], "arches": ["x86_64"]}
    assert alice_api.post("/submissions", body | {"mbox": mbox.decode()}).status_code == 201
    posted = browser.post("/submissions/new", body | {"grids": ["quick"], "mbox": SimpleUploadedFile("s.mbx", mbox)})
    assert posted.status_code == 302
    by_api, by_form = Submission.objects.order_by("pk")
    assert stored(by_api) == stored(by_form) and by_form.kind == Submission.Kind.SERIES
    api_series, form_series = (PatchSeries.objects.get(submission=s) for s in (by_api, by_form))
    assert (api_series.subject, api_series.patches) == (form_series.subject, form_series.patches)


def test_a_refusal_is_located_at_its_field_by_the_schema_itself(small_tree: Path, qemu_class: Any) -> None:
    """The location is pydantic's: a field's own check is attached to it, a check of several fields raises
    at the one it blames; the message is never read to find the field."""
    with pytest.raises(pydantic.ValidationError) as caught:
        SubmissionRequest.model_validate(request_body(small_tree, base="a..b", thp="sometimes"))
    assert [(e["loc"], e["type"]) for e in caught.value.errors()] == [(("base",), REFUSED), (("thp",), REFUSED)]
    with pytest.raises(pydantic.ValidationError) as caught:
        SubmissionRequest.model_validate(request_body(small_tree, grid="quick", grids=["quick"]))
    assert [e["loc"] for e in caught.value.errors()] == [("grids",)]
    # Checked, the request is what is stored: one grid becomes the list of grids, "all" every benchmark.
    req = SubmissionRequest.model_validate(request_body(small_tree, grid="quick", benchmarks="all"))
    assert (req.grid, req.grids, req.head_ref) == ("", ["quick"], "feature") and len(req.benchmarks) > 1


def test_the_api_body_and_the_form_are_the_schemas_fields(qemu_class: Any) -> None:
    body = api.get_openapi_schema()["components"]["schemas"]["SubmissionIn"]
    schema = set(SubmissionRequest.model_fields)
    # The API adds one spelling of the mbox; the form leaves out one of the grids (it ticks them).
    assert set(body["properties"]) == schema | {"mbox_b64"} and body["required"] == ["base"]
    assert set(SubmissionForm().fields) == schema - {"grid"}
    assert body["properties"]["profile"]["description"] == SubmissionForm().fields["profile"].help_text
