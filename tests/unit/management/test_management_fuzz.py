"""Property run against the served /openapi.json: for every operation, hypothesis draws
path and query parameters, headers and bodies (valid-shaped and junk); no request may
answer 500 or an undocumented 5xx. Project-written (no schemathesis dependency)."""

from __future__ import annotations

import json
import string
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.replays.replays import ReplayStore
from tests.unit.management.test_management_support import Harness

# Data-plane operations call upstream backends (connection refused here: 503 by design).
SKIP = {
    "/v1/chat/completions",
    "/v1/responses",
    "/v1/responses/{response_id}",
    "/v1/responses/{response_id}/input_items",
}
ALLOWED_5XX = {501, 503, 504}

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(string.ascii_letters + "_", max_size=12), inner, max_size=5)
    ),
    max_leaves=20,
)


def _harness() -> tuple[Harness, dict[str, Any]]:
    store = ReplayStore()
    store.record({"id": "r1", "selected_model": "small", "decision": ""})
    h = Harness(replays=store)
    client = TestClient(h.app)
    return h, client.get("/openapi.json").json()


HARNESS, SPEC = _harness()
CLIENT = TestClient(HARNESS.app, raise_server_exceptions=False)
OPERATIONS = sorted(
    (path, method)
    for path, ops in SPEC["paths"].items()
    for method in ops
    if path not in SKIP and method in {"get", "post", "put", "patch", "delete"}
)


def _param_value(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    if "enum" in schema:
        return st.sampled_from(schema["enum"]) | st.text(max_size=8)
    kind = schema.get("type")
    if kind == "integer":
        return st.integers(-5, 2000) | st.text(max_size=6)
    if kind == "boolean":
        return st.booleans()
    return st.text(string.printable, max_size=30)


def _body(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    props = schema.get("properties") or {}
    shaped = (
        st.fixed_dictionaries({}, optional={name: json_values for name in props}) if props else st.nothing()
    )
    return shaped | json_values


@st.composite
def requests(draw: st.DrawFn, path: str, method: str) -> dict[str, Any]:
    operation = SPEC["paths"][path][method]
    url = path
    params: dict[str, Any] = {}
    headers: dict[str, str] = {}
    for parameter in operation.get("parameters", []):
        value = draw(_param_value(parameter.get("schema", {})))
        if parameter["in"] == "path":
            url = url.replace("{" + parameter["name"] + "}", quote(str(value), safe="") or "x")
        elif parameter["in"] == "query" and draw(st.booleans()):
            params[parameter["name"]] = value
        elif parameter["in"] == "header" and draw(st.booleans()):
            headers[parameter["name"]] = "".join(ch for ch in str(value) if 32 <= ord(ch) < 127)
    content: bytes | None = None
    body = operation.get("requestBody")
    if body is not None or method in {"post", "put", "patch"}:
        schema = ((body or {}).get("content", {}).get("application/json", {}) or {}).get("schema", {})
        kind = draw(st.sampled_from(["json", "json", "bytes", "empty"]))
        if kind == "json":
            content = json.dumps(draw(_body(schema))).encode()
        elif kind == "bytes":
            content = draw(st.binary(max_size=64))
        else:
            content = b""
        headers["content-type"] = "application/json"
    return {"method": method.upper(), "url": url, "params": params, "headers": headers, "content": content}


@pytest.mark.parametrize(("path", "method"), OPERATIONS)
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
@pytest.mark.slow
@given(data=st.data())
def test_no_operation_answers_500(path: str, method: str, data: st.DataObject) -> None:
    request = data.draw(requests(path, method))
    response = CLIENT.request(**request)
    assert response.status_code < 500 or response.status_code in ALLOWED_5XX, (request, response.text)
    if response.status_code >= 400:
        assert "error" in response.json()


def test_operations_cover_the_management_api():
    paths = {path for path, _ in OPERATIONS}
    assert {
        "/api/v1/config",
        "/api/v1/config/rollback",
        "/api/v1/observability/outcomes",
        "/api/v1/routing/preview",
    } <= paths
