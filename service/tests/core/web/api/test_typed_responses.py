"""Every API answer has a declared shape: in the OpenAPI document, and in the views' return types.

ninja validates an answer against the route's declared response, and mypy checks the
view's return type; a free-form `dict[str, Any]` leaves both with nothing to check
and leaves the clients' authors to read the code. So every 2xx JSON answer must be
an object with declared properties (or a list of them), and no view may return a
bare dict. Nested free-form JSON (stored tables, samples, parameters) is fine.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

from kperf.core.web.api import api

# Answers that are not JSON: a build's artifact is the file itself.
NOT_JSON = {"get /api/v1/runner/builds/{build_id}/artifacts/{name}"}


def _resolve(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = components[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _undeclared(schema: dict[str, Any], components: dict[str, Any]) -> str | None:
    """Why `schema` is not an object with declared properties (or a list of them); None if it is."""
    schema = _resolve(schema, components)
    alternatives = schema.get("anyOf") or schema.get("oneOf")
    if alternatives:
        reasons = [r for r in (_undeclared(s, components) for s in alternatives) if r]
        return "; ".join(reasons) or None
    if schema.get("type") == "array":
        return _undeclared(schema.get("items", {}), components)
    if schema.get("type") == "object" and schema.get("properties"):
        return None
    return f"free-form {schema}"


def test_every_answer_has_declared_properties_in_the_openapi_document() -> None:
    document = api.get_openapi_schema()
    components = document.get("components", {}).get("schemas", {})
    bad = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            where = f"{method} {path}"
            ok = {code: r for code, r in operation["responses"].items() if str(code).startswith("2")}
            if where in NOT_JSON:
                continue
            if not ok:
                bad.append(f"{where}: no 2xx answer declared")
            for code, response in ok.items():
                schema = response.get("content", {}).get("application/json", {}).get("schema")
                why = "no JSON schema declared" if schema is None else _undeclared(schema, components)
                if why:
                    bad.append(f"{where} {code}: {why}")
    assert not bad, "\n".join(bad)


def _bare(tp: Any) -> bool:
    """Whether a type is, or holds (in a list, a union, a Status), Any or a dict of anything."""
    if tp is Any or tp is dict or tp is object:
        return True
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (dict, Mapping) and (not args or args[-1] in (Any, object)):
        return True
    # A TypedDict has no origin and no args: its own fields may be free-form JSON.
    return any(_bare(a) for a in args)


def _views() -> list[Any]:
    api.get_openapi_schema()  # binds the routers
    return [
        operation.view_func
        for _, router in api._routers
        for path_view in router.path_operations.values()
        for operation in path_view.operations
    ]


def test_no_view_returns_a_bare_dict() -> None:
    views = _views()
    assert len(views) > 30, "the API's views were not found"
    bad = []
    for view in views:
        name = f"{view.__module__}.{view.__name__}"
        written = view.__annotations__.get("return")
        if written is None:
            bad.append(f"{name}: no return type")
            continue
        hints = typing.get_type_hints(view)
        if _bare(hints["return"]) or "dict[str, Any]" in str(written):
            bad.append(f"{name} -> {written}")
    assert not bad, "declare these answers as TypedDicts:\n" + "\n".join(bad)
