"""The response cache on a shared store, through the real graph: Redis, Milvus Lite, a hybrid.

One svc-sr application (its own name, route prefix, state directory and metrics port) is
deployed into the session's Ray instance for this module; each case activates its own
configuration document through the management API (PUT /api/v1/config: the hot-reload path
a user takes), which turns the semantic cache on with `global.stores.response_cache.
backend_type` set; a second identical request is answered from the store. Killing the
ResponseCache replica (Serve starts a new one: empty process memory) must keep that answer:
the entries live in the store, not the replica. (A whole-process restart of `svc-sr serve`
on Milvus Lite is test_cli_restart.py's.) A store that is down costs a miss, never the
request. The storage API's invalidate and flush act on a whole model+decision scope, its
tenant partitions included.

Redis is a real server with RediSearch (tests/fakes/stores.py); Milvus Lite keeps its data
in the application's state directory. The application is deleted when the module ends.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from app.cache.factory import MILVUS_LITE_DB
from app.common.ports import free_port
from tests.fakes.stores import redis_with_search
from tests.integration.conftest import Stack
from tests.integration.test_metrics import scrape, value

pytestmark = pytest.mark.integration

DEPLOY_TIMEOUT_S = 240.0  # three model deployments load on a 2-core box
ACTIVATION_TIMEOUT_S = 180.0  # PUT /api/v1/config answers once every replica has the document
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


APP = "cache-stores"


@dataclass
class CacheApp:
    base: str  # http://127.0.0.1:<port>/cache-stores
    state_dir: Path
    metrics_url: str


@pytest.fixture(scope="module")
def cache_app(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CacheApp]:
    """The module's application, first serving the cache on process memory."""
    from ray import serve

    from deployments.graph import GraphArgs, build_graph

    state_dir = tmp_path_factory.mktemp("cache-stores")
    metrics_port = free_port()
    args = GraphArgs(
        config=cached_config(stack, {"backend_type": "memory"}),
        state_dir=str(state_dir),
        metrics={"port": metrics_port},
        decision_model=False,
    )
    try:
        serve.run(build_graph(args), name=APP, route_prefix=f"/{APP}")
        base = f"{stack.base_url}/{APP}"
        wait_until(lambda: _ready(f"{base}/ready"), DEPLOY_TIMEOUT_S, f"{APP} to be ready")
        yield CacheApp(base, state_dir, f"http://127.0.0.1:{metrics_port}/metrics")
    finally:
        serve.delete(APP)


def activate(app: CacheApp, document: dict[str, Any], backend: str | None) -> str:
    """PUT the document (hot reload: the ResponseCache reconfigures onto its store); returns
    the base URL once the cache reports `backend` (None: a store that is down, whose stats
    raise CacheUnavailable; the PUT's 200 already says every replica has the document)."""
    with httpx.Client(base_url=app.base, timeout=ACTIVATION_TIMEOUT_S) as client:
        tag = client.get("/api/v1/config").headers["etag"]
        reply = client.put("/api/v1/config", json=document, headers={"If-Match": tag})
    assert reply.status_code == 200, reply.text
    if backend is not None:
        wait_until(lambda: cache_stats()["backend"] == backend, DEPLOY_TIMEOUT_S, f"the cache on {backend}")
    return app.base


def restart_cache_replica() -> None:
    """ray.kill the ResponseCache replica; returns when Serve runs a new one in its place.
    (ray.kill only asks: the actor is dead once Ray no longer lists its name.)"""
    import ray
    from ray import serve

    def replicas() -> list[str]:
        prefix = f"SERVE_REPLICA::{APP}#ResponseCache#"
        return [
            a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(prefix)
        ]

    (killed,) = replicas()
    ray.kill(ray.get_actor(killed, namespace="serve"), no_restart=True)

    def replaced() -> bool:
        status = serve.status().applications[APP].deployments["ResponseCache"]
        running = status.status == "HEALTHY" and dict(status.replica_states) == {"RUNNING": 1}
        return running and killed not in replicas()

    wait_until(replaced, DEPLOY_TIMEOUT_S, "a new ResponseCache replica in place of the killed one")


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


def cache_stats() -> dict[str, Any]:
    from ray import serve

    stats: dict[str, Any] = (
        serve.get_deployment_handle("ResponseCache", APP).stats.remote().result(timeout_s=30)
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
def test_the_store_answers_across_a_replica_restart(
    stack: Stack, cache_app: CacheApp, request: pytest.FixtureRequest, backend: str
) -> None:
    settings = store_settings(backend, lambda: str(request.getfixturevalue("redis_url")))
    prompt = f"storecache: how long does it take light to reach Earth from the Sun? ({backend})"
    base = activate(cache_app, cached_config(stack, settings), backend)

    upstream_calls = stack.upstream_a.request_count
    status, headers, first = ask(base, prompt)
    assert status == 200 and headers["x-cache-status"] == "miss"
    assert stack.upstream_a.request_count == upstream_calls + 1
    wait_until(lambda: cache_stats()["entries"] >= 1, WRITE_TIMEOUT_S, "the answer's cache write")
    hit = assert_answered_from_cache(stack, base, prompt)
    assert hit["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
    if backend == "milvus":  # Milvus Lite keeps the collection in the app's state dir
        assert (cache_app.state_dir / MILVUS_LITE_DB).is_dir()

    # A new replica, empty process memory: only the store remembers the answer.
    restart_cache_replica()
    wait_until(lambda: cache_stats()["backend"] == backend, DEPLOY_TIMEOUT_S, f"the new replica on {backend}")
    again = assert_answered_from_cache(stack, base, prompt)
    assert again["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]


def test_a_store_that_is_down_costs_a_miss_never_the_request(stack: Stack, cache_app: CacheApp) -> None:
    closed_port = free_port()  # free now, and nothing listens on it
    settings = {
        "backend_type": "redis",
        "redis": {"url": f"redis://127.0.0.1:{closed_port}", "timeout_seconds": 1},
    }
    prompt = "storecache: why is the sky blue? (store down)"
    errors = "svc_router_cache_errors_total"
    before = scrape(cache_app.metrics_url)
    counted = {op: value(before, errors, operation=op) for op in ("lookup", "store")}

    base = activate(cache_app, cached_config(stack, settings), None)
    upstream_calls = stack.upstream_a.request_count
    for attempt in (1, 2):  # the second asks again: nothing was stored, so a miss again
        status, headers, body = ask(base, prompt)
        assert status == 200 and headers["x-cache-status"] == "miss"
        assert body["choices"][0]["message"]["content"]
        assert stack.upstream_a.request_count == upstream_calls + attempt

    def both_counted() -> bool:
        series = scrape(cache_app.metrics_url)
        return all(value(series, errors, operation=op) >= counted[op] + 2 for op in counted)

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


def test_invalidate_and_flush_act_on_a_whole_scope(stack: Stack, cache_app: CacheApp, redis_url: str) -> None:
    document = two_decision_config(stack, {"backend_type": "redis", "redis": redis_location(redis_url)})
    tenant = {"x-vsr-tenant": "acme"}
    stored, stored_for_tenant = "storecache: what is a light year?", "storecache: what is a parsec?"
    other = "othercache: what is an astronomical unit?"
    stored_scope = {"model": "model-a", "decision": "stored"}

    base = activate(cache_app, document, "redis")
    for prompt, headers in ((stored, None), (stored_for_tenant, tenant), (other, None)):
        status, answered, _ = ask(base, prompt, headers)
        assert status == 200 and answered["x-cache-status"] == "miss"
    wait_until(lambda: cache_stats()["entries"] >= 3, WRITE_TIMEOUT_S, "three cache writes")
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
