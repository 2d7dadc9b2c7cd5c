"""The response cache on a shared store, through the real graph: Redis, Milvus Lite, a hybrid.

Each case deploys an svc-sr application of its own into the session's Ray instance (its own
name, route prefix and state directory) from a config document that turns the semantic
cache on with `global.stores.response_cache.backend_type` set; a second identical request
is answered from the store. Deleting the application and deploying it again (new replicas,
empty process memory) must keep that answer: the entries live in the store, not the
replica. A store that is down costs a miss, never the request. The storage API's invalidate
and flush act on a whole model+decision scope, its tenant partitions included.

Redis is a real server with RediSearch (tests/fakes/stores.py); Milvus Lite keeps its data
in the application's state directory. Every application is deleted when its case ends.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from app.cache.factory import MILVUS_LITE_DB
from tests.fakes.stores import redis_with_search
from tests.fakes.upstream import find_free_port
from tests.integration.conftest import Stack
from tests.integration.test_metrics import scrape, value

pytestmark = pytest.mark.integration

DEPLOY_TIMEOUT_S = 240.0  # three model deployments load on a 2-core box
WRITE_TIMEOUT_S = 30.0  # the answer's cache write happens after the answer is sent
METRICS_TIMEOUT_S = 30.0  # replicas push their counters about once a second


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_with_search(tmp_path_factory.mktemp("valkey")) as url:
        yield url


def cached_config(stack: Stack, store: dict[str, Any]) -> dict[str, Any]:
    """One decision (keyword `storecache`) with the semantic cache on, answered by model-a;
    `store`: the `global.stores.response_cache` keys that pick and place the backend."""
    return {
        "version": "v0.3",
        "providers": {
            "models": [{"name": "model-a", "backend_refs": [{"base_url": stack.upstream_a.host_url}]}],
        },
        "routing": {
            "signals": {
                "keywords": [{"name": "store_words", "operator": "OR", "keywords": ["storecache"]}],
            },
            "decisions": [
                {
                    "name": "stored",
                    "priority": 100,
                    "rules": {"operator": "OR", "conditions": [{"type": "keyword", "name": "store_words"}]},
                    "modelRefs": [{"model": "model-a"}],
                    "plugins": [
                        {
                            "type": "semantic-cache",
                            "configuration": {"enabled": True, "similarity_threshold": 0.9},
                        }
                    ],
                }
            ],
        },
        "global": {"stores": {"response_cache": {"enabled": True, **store}}},
    }


def redis_location(url: str) -> dict[str, Any]:
    """A Redis index and key prefix no other case (or earlier run on the same server) uses."""
    tag = uuid.uuid4().hex[:12]
    return {"url": url, "index_name": f"itest_{tag}", "key_prefix": f"itest:{tag}:"}


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(0.1)  # polling the condition


def _ready(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def deployed(
    stack: Stack, name: str, document: dict[str, Any], state_dir: Path, metrics: dict[str, Any] | None = None
) -> Iterator[str]:
    """An svc-sr application `name` at route prefix /name, deleted on exit; yields its base URL."""
    from ray import serve

    from deployments.graph import GraphArgs, build_graph

    args = GraphArgs(
        config=document,
        state_dir=str(state_dir),
        metrics=metrics or {"enabled": False},
        decision_model=False,
    )
    try:
        serve.run(build_graph(args), name=name, route_prefix=f"/{name}")
        base = f"{stack.base_url}/{name}"
        wait_until(lambda: _ready(f"{base}/ready"), DEPLOY_TIMEOUT_S, f"{name} to be ready")
        yield base
    finally:
        serve.delete(name)


def ask(
    base: str, prompt: str, headers: Mapping[str, str] | None = None
) -> tuple[int, Mapping[str, str], dict[str, Any]]:
    """(status, headers, body) of one chat completion through the OpenAI SDK."""
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)
    response = client.chat.completions.with_raw_response.create(
        model="MoM", messages=[{"role": "user", "content": prompt}], extra_headers=dict(headers or {})
    )
    body: dict[str, Any] = json.loads(response.text)
    return response.status_code, response.headers, body


def cache_stats(name: str) -> dict[str, Any]:
    from ray import serve

    stats: dict[str, Any] = (
        serve.get_deployment_handle("ResponseCache", name).stats.remote().result(timeout_s=30)
    )
    return stats


def assert_answered_from_cache(
    stack: Stack, base: str, prompt: str, headers: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The prompt is a hit: no upstream call, the cached answer; returns the body."""
    upstream_calls = stack.upstream_a.request_count
    status, headers, body = ask(base, prompt, headers)
    assert status == 200
    assert headers["x-cache-status"] == "hit"
    assert body["routing_metadata"]["cache_hit"] is True
    assert stack.upstream_a.request_count == upstream_calls
    return body


STORES = ("redis", "milvus", "hybrid")


def store_settings(backend: str, redis_url: Callable[[], str]) -> dict[str, Any]:
    """redis: a fresh index; milvus: Milvus Lite in the app's state dir; hybrid: over Redis."""
    if backend == "milvus":
        return {"backend_type": "milvus"}
    settings: dict[str, Any] = {"backend_type": backend, "redis": redis_location(redis_url())}
    if backend == "hybrid":
        settings["hybrid_store"] = "redis"
    return settings


@pytest.mark.parametrize("backend", STORES)
def test_the_store_answers_across_an_application_restart(
    stack: Stack, request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    name = f"cache-{backend}"
    settings = store_settings(backend, lambda: str(request.getfixturevalue("redis_url")))
    document = cached_config(stack, settings)
    prompt = f"storecache: how long does it take light to reach Earth from the Sun? ({backend})"

    with deployed(stack, name, document, tmp_path) as base:
        upstream_calls = stack.upstream_a.request_count
        status, headers, first = ask(base, prompt)
        assert status == 200 and headers["x-cache-status"] == "miss"
        assert stack.upstream_a.request_count == upstream_calls + 1
        wait_until(lambda: cache_stats(name)["entries"] >= 1, WRITE_TIMEOUT_S, "the answer's cache write")
        hit = assert_answered_from_cache(stack, base, prompt)
        assert hit["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
        stats = cache_stats(name)
        assert stats["backend"] == backend and stats["entries"] >= 1
        if backend == "milvus":  # Milvus Lite keeps the collection in the app's state dir
            assert (tmp_path / MILVUS_LITE_DB).is_dir()

    # New replicas, empty process memory: only the store remembers the answer.
    with deployed(stack, name, document, tmp_path) as base:
        assert cache_stats(name)["backend"] == backend
        again = assert_answered_from_cache(stack, base, prompt)
        assert again["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]


def test_a_store_that_is_down_costs_a_miss_never_the_request(stack: Stack, tmp_path: Path) -> None:
    closed_port = find_free_port()  # free now, and nothing listens on it
    settings = {
        "backend_type": "redis",
        "redis": {"url": f"redis://127.0.0.1:{closed_port}", "timeout_seconds": 1},
    }
    metrics_url = f"http://127.0.0.1:{(metrics_port := find_free_port())}/metrics"
    prompt = "storecache: why is the sky blue? (store down)"

    with deployed(
        stack, "cache-down", cached_config(stack, settings), tmp_path, {"port": metrics_port}
    ) as base:
        upstream_calls = stack.upstream_a.request_count
        for attempt in (1, 2):  # the second asks again: nothing was stored, so a miss again
            status, headers, body = ask(base, prompt)
            assert status == 200 and headers["x-cache-status"] == "miss"
            assert body["choices"][0]["message"]["content"]
            assert stack.upstream_a.request_count == upstream_calls + attempt

        def both_counted() -> bool:
            series = scrape(metrics_url)
            errors = "svc_router_cache_errors_total"
            return (
                value(series, errors, operation="lookup") >= 2
                and value(series, errors, operation="store") >= 2
            )

        wait_until(both_counted, METRICS_TIMEOUT_S, "two lookup and two store errors in the pushed metrics")


def two_decision_config(stack: Stack, store: dict[str, Any]) -> dict[str, Any]:
    """cached_config plus a second cached decision (`other`, keyword `othercache`) on model-a."""
    document = cached_config(stack, store)
    routing = document["routing"]
    routing["signals"]["keywords"].append(
        {"name": "other_words", "operator": "OR", "keywords": ["othercache"]}
    )
    other = json.loads(json.dumps(routing["decisions"][0]))
    other.update(
        name="other", rules={"operator": "OR", "conditions": [{"type": "keyword", "name": "other_words"}]}
    )
    routing["decisions"].append(other)
    return document


def storage(base: str, action: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    url = f"{base}/api/v1/storage/response-cache/{action}"
    response = (
        httpx.post(url, json=body or {}, timeout=30) if body is not None else httpx.get(url, timeout=30)
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_invalidate_and_flush_act_on_a_whole_scope(stack: Stack, redis_url: str, tmp_path: Path) -> None:
    document = two_decision_config(stack, {"backend_type": "redis", "redis": redis_location(redis_url)})
    tenant = {"x-vsr-tenant": "acme"}
    stored, stored_for_tenant = "storecache: what is a light year?", "storecache: what is a parsec?"
    other = "othercache: what is an astronomical unit?"
    stored_scope = {"model": "model-a", "decision": "stored"}

    with deployed(stack, "cache-scopes", document, tmp_path) as base:
        for prompt, headers in ((stored, None), (stored_for_tenant, tenant), (other, None)):
            status, answered, _ = ask(base, prompt, headers)
            assert status == 200 and answered["x-cache-status"] == "miss"
        wait_until(lambda: cache_stats("cache-scopes")["entries"] >= 3, WRITE_TIMEOUT_S, "three cache writes")
        assert_answered_from_cache(stack, base, stored_for_tenant, tenant)

        dry = storage(base, "invalidate", {"scope": stored_scope, "dry_run": True})
        assert dry == {"scope": "model-a|stored", "dry_run": True, "entries": 2}
        removed = storage(base, "invalidate", {"scope": stored_scope})
        assert removed["entries"] == 2  # the tenant's partition with the plain one

        for prompt, headers in ((stored, None), (stored_for_tenant, tenant)):
            status, answered, _ = ask(base, prompt, headers)
            assert status == 200 and answered["x-cache-status"] == "miss", prompt
        assert_answered_from_cache(stack, base, other)

        flushed = storage(base, "flush", {"scope": {"model": "model-a", "decision": "other"}})
        assert flushed == {"scope": "model-a|other", "removed": 1, "epoch": 1}
        assert storage(base, "flush", {})["epoch"] == 1
        stats = storage(base, "stats")
        assert stats["epoch"] == 1 and stats["scope_epochs"] == {"model-a|other": 1}
        assert storage(base, "capabilities")["epochs"] == "shared"
        status, answered, _ = ask(base, other)
        assert status == 200 and answered["x-cache-status"] == "miss"
