"""The served OpenAPI document tells the truth: schemathesis fuzzes every operation of
/openapi.json against the Ingress app (in process over ASGI, no Ray; the backends it calls
are fakes: an OpenAI-compatible upstream on 127.0.0.1, fake classifiers, the decision model
in process, an in-memory response cache whose probes reach nothing).

Checks on every generated request (positive and negative, bounded and derandomized):
- not_a_server_error: no 5xx, except 501 (the spec's NOT_IMPLEMENTED older paths, each
  documented on its operation);
- status_code_conformance: every status answered is documented on its operation;
- content_type_conformance and response_schema_conformance: every answer has a documented
  content type and matches its documented schema (error bodies included);
- positive_data_acceptance: a request the schema calls valid is not refused as malformed,
  so the request schemas carry the constraints the handlers enforce. The statuses a schema
  cannot state (412 for a stale If-Match, 400 where an upload's bytes, a model card or a file id
  decides) are those the live run allows, each with its reason, read from one file:
  tests/integration/schemathesis.toml.

`docs/management-api.md` ("Keeping the OpenAPI document honest") says how to run it.
"""

from __future__ import annotations

import re
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from app.api.app import create_app
from app.api.decisions import LocalDecisionSource
from app.cache.admin import CacheControl, LocalCacheAdmin, store_control
from app.cache.base import CacheUnavailable
from app.cache.memory import InMemorySemanticCache
from app.config.global_config import ResponseCacheConfig
from app.config.storage import VectorStoreConfig
from app.observability.metrics import MetricsAggregator
from app.pipeline.memory.store import InMemoryMemoryStore
from app.replays.classification_metrics import aggregator_report
from app.replays.replays import ReplayStore
from app.srun.catalog import DECISION_MODEL, load
from app.storage import open_storage
from app.storage.knowledge_bases import KnowledgeBaseService
from app.upstream.client import UpstreamClient
from tests.fakes.classifiers import FakeBackend
from tests.fakes.embedding import hashed_embed
from tests.fakes.upstream import FakeUpstream
from tests.unit.management.test_management_support import Harness, base_document
from tests.unit.storage.test_knowledge_bases import fake_embed

# The checks' expectations are the live run's (tests/integration/test_api_promises.py); here
# bounded and reproducible: the same cases on every run. The coverage phase adds each
# operation's boundary cases (lengths, ranges, enums, missing required fields) on top.
LIVE = tomllib.loads((Path(__file__).parents[2] / "integration" / "schemathesis.toml").read_text())
CONFIG: dict[str, Any] = {
    **LIVE,
    "seed": 18,
    "generation": {"deterministic": True, "max-examples": 12, "database": "none"},
    "phases": {"stateful": {"enabled": False}},
    "checks": {**LIVE["checks"], "not_a_server_error": {"expected-statuses": ["2xx", "3xx", "4xx", "501"]}},
}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    positive_data_acceptance,
]


class MemoryProbesOnly:
    """The live cache's control, whose probe tries a candidate in-memory cache for real; a Redis
    or Milvus candidate is answered as unreachable without a connection (the fuzzer draws hosts
    and paths: it must reach nothing)."""

    def __init__(self, control: CacheControl) -> None:
        self._control = control

    def __getattr__(self, name: str) -> Any:
        return getattr(self._control, name)

    async def probe(self, settings: ResponseCacheConfig) -> None:
        if settings.backend_type != "memory":
            raise CacheUnavailable("not probed: this test reaches 127.0.0.1 only")
        await self._control.probe(settings)


def build_app(upstream_url: str) -> FastAPI:
    replays = ReplayStore()
    replays.record({"id": "r1", "selected_model": "small", "decision": ""})
    cache = LocalCacheAdmin(
        MemoryProbesOnly(store_control(InMemorySemanticCache(max_entries=0, ttl_seconds=0)))
    )
    metrics = MetricsAggregator()
    harness = Harness(
        base_document(upstream_url),
        replays=replays,
        cache_admin=cache,
        metrics=lambda: aggregator_report(metrics),
        knowledge_bases=KnowledgeBaseService(embed=fake_embed),  # a runtime: mutations answer 202
        memory_store=InMemoryMemoryStore(),
        storage=open_storage(
            VectorStoreConfig(directory=tempfile.mkdtemp()), Path("unused"), embed=hashed_embed
        ),
    )
    return create_app(
        harness.pipeline,
        UpstreamClient(),
        harness.view,
        classifiers=FakeBackend(),
        management=harness.management,
        decisions=LocalDecisionSource(load(DECISION_MODEL)),
        parts=harness.parts,
    )


def served(app: FastAPI) -> dict[str, Any]:
    with TestClient(app) as client:
        response = client.get("/openapi.json")
    assert response.status_code == 200, response.text
    document: dict[str, Any] = response.json()
    return document


# The document is the same whatever the backends (test_fuzzed_document_is_the_served_one);
# schemathesis needs it at collection, before the fake upstream runs.
DOCUMENT = served(Harness().app)
schema = schemathesis.openapi.from_dict(DOCUMENT, config=schemathesis.Config.from_dict(CONFIG))


@pytest.fixture(scope="module")
def live_app() -> Iterator[FastAPI]:
    with FakeUpstream(name="conformance") as upstream:
        yield build_app(upstream.base_url)


@pytest.mark.slow
@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_operation_conforms(case: schemathesis.Case, live_app: FastAPI) -> None:
    case.call_and_validate(app=live_app, checks=CHECKS)


@pytest.mark.slow
def test_fuzzed_document_is_the_served_one(live_app: FastAPI) -> None:
    assert served(live_app) == DOCUMENT


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def test_every_reference_resolves() -> None:
    components = DOCUMENT["components"]["schemas"]
    refs = set(_refs(DOCUMENT))
    assert refs, "the document uses components"
    unresolved = {ref for ref in refs if not ref.startswith("#/components/schemas/")}
    unresolved |= {ref for ref in refs if ref.rsplit("/", 1)[-1] not in components}
    assert unresolved == set()
    assert "NestedState" in components and "HTTPValidationError" not in components


def test_every_failure_status_documents_its_body() -> None:
    undocumented = []
    for path, operations in DOCUMENT["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if re.fullmatch(r"[45]\d\d", status) and "schema" not in (
                    response.get("content", {}).get("application/json", {})
                ):
                    undocumented.append(f"{method.upper()} {path} {status}")
    assert undocumented == []
