"""Spec 1's route tables, walked against the app: every (method, path) the contract lists is an
operation of the served OpenAPI document, which tests/unit/api/test_openapi_conformance.py fuzzes
against the live app (every documented status and body shape, and the 501s the spec names),
or a page the app serves outside the document (/docs, /openapi.json, /health).

The tables are read from ../shared/spec (the contract beside the checkout). Routes the spec
lists that svc-sr does not serve yet are in NOT_BUILT, and the test asserts they are still
missing: serving one fails this test until it leaves the list, so the list is the true gap.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.management.test_management_support import Harness

SPEC = Path(__file__).resolve().parents[4] / "shared" / "spec" / "01-router-management-metrics.md"
VERBS = "GET|POST|PUT|PATCH|DELETE"
OUTSIDE_THE_DOCUMENT = {("GET", "/docs"), ("GET", "/openapi.json"), ("GET", "/health")}

# Every route of spec 1's tables is built (the last two: /nli and context-recovery).
NOT_BUILT: set[tuple[str, str]] = set()


def normalized(path: str) -> str:
    """Parameter names differ ({id} in the spec, {replay_id} in the app): compare shapes."""
    return re.sub(r"\{[^}]+\}", "{}", path.split("?")[0].strip())


def spec_routes() -> list[tuple[str, str]]:
    """(method, path) of every table row whose first cell is HTTP methods. A row may list
    several paths: `/a/b/x, /y, /z` means /a/b/x, /a/b/y, /a/b/z (the first one's parent)."""
    if not SPEC.is_file():
        pytest.fail(f"the contract is not beside the checkout: {SPEC}")
    rows = re.findall(rf"^\| ((?:{VERBS})(?:, (?:{VERBS}))*) \| ([^|]+) \|", SPEC.read_text(), re.MULTILINE)
    routes: list[tuple[str, str]] = []
    for methods, cell in rows:
        first, *rest = (normalized(p) for p in cell.split(","))
        paths = [first] + [
            p if p.startswith(("/api/", "/v1/")) else first.rsplit("/", 1)[0] + p for p in rest
        ]
        routes += [(method, path) for method in methods.split(", ") for path in paths]
    return routes


@pytest.fixture(scope="module")
def served() -> dict[str, Any]:
    with TestClient(Harness().app) as client:
        document: dict[str, Any] = client.get("/openapi.json").json()
        assert all(client.get(path).status_code == 200 for _, path in OUTSIDE_THE_DOCUMENT)
    return document


def test_the_walk_reads_the_whole_route_list() -> None:
    routes = spec_routes()
    assert len(routes) >= 75 and len(set(routes)) == len(routes)
    assert ("GET", "/api/v1/diagnostics/similarity/batch") not in routes  # a POST in the spec
    assert ("POST", "/api/v1/diagnostics/similarity/batch") in routes


@pytest.mark.slow
def test_every_route_of_spec_1_is_served_or_a_listed_gap(served: dict[str, Any]) -> None:
    operations = {
        (method.upper(), normalized(path)) for path, item in served["paths"].items() for method in item
    }
    missing = [r for r in spec_routes() if r not in operations and r not in OUTSIDE_THE_DOCUMENT]
    assert sorted(set(missing) - NOT_BUILT) == [], "spec routes the app does not document"
    assert sorted(NOT_BUILT - set(missing)) == [], "served now: take these off NOT_BUILT"
