"""Rate limits of the data plane (global.services.ratelimit): token buckets per API key and per
route, 429 RATE_LIMIT_EXCEEDED with Retry-After, shared over the management store's Redis by
two Ingress apps, and a store that is down lets requests through."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.common.ports import free_port
from app.state.rate_buckets import Bucket, MemoryBuckets, RedisBuckets
from app.state.shared_store import ManagementStoreSettings, redis_client
from tests.fakes.upstream import FakeUpstream
from tests.unit.exchange.test_responses_store import plane, upstream  # noqa: F401  (the module's fake upstream)


def limits(**ratelimit: Any) -> dict[str, Any]:
    return {"ratelimit": {"enabled": True, **ratelimit}}


def redis_buckets(url: str, prefix: str, timeout_s: float = 2.0) -> RedisBuckets:
    settings = ManagementStoreSettings(backend="redis", url=url, timeout_seconds=timeout_s)
    return RedisBuckets(redis_client(settings), prefix)


async def ask(app: FastAPI, path: str = "/v1/models", key: str | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://svc") as http:
        if path == "/v1/models":
            return await http.get(path, headers=headers)
        body = {"model": "MoM", "messages": [{"role": "user", "content": "hi"}]}
        return await http.post(path, json=body, headers=headers)


def assert_limited(answer: httpx.Response, scope: str) -> None:
    assert answer.status_code == 429, answer.text
    assert int(answer.headers["retry-after"]) >= 1
    error = answer.json()["error"]
    assert (error["code"], error["type"], error["details"]["limit"]) == (
        "RATE_LIMIT_EXCEEDED",
        "rate_limit_error",
        scope,
    )


@pytest.mark.slow
async def test_each_key_has_its_own_bucket(upstream: FakeUpstream):  # noqa: F811
    app = plane(upstream, limits(per_key={"requests_per_minute": 2}))
    for _ in range(2):
        assert (await ask(app, "/v1/chat/completions", key="sk-a")).status_code == 200
    assert_limited(await ask(app, "/v1/chat/completions", key="sk-a"), "per_key")
    assert (await ask(app, key="sk-b")).status_code == 200  # another key, its own bucket
    assert (await ask(app)).status_code == 200  # no key: the shared anonymous bucket
    assert (await ask(app)).status_code == 200
    assert_limited(await ask(app), "per_key")


@pytest.mark.slow
async def test_a_route_bucket_is_shared_by_every_caller(upstream: FakeUpstream):  # noqa: F811
    app = plane(upstream, limits(routes={"/v1/models": {"requests_per_minute": 60, "burst": 1}}))
    assert (await ask(app, key="sk-a")).status_code == 200
    answer = await ask(app, key="sk-b")
    assert_limited(answer, "route")
    assert answer.json()["error"]["details"]["route"] == "/v1/models"
    assert (await ask(app, "/v1/chat/completions", key="sk-b")).status_code == 200  # another route


@pytest.mark.slow
async def test_limits_off_by_default(upstream: FakeUpstream):  # noqa: F811
    app = plane(upstream)
    for _ in range(5):
        assert (await ask(app)).status_code == 200


@pytest.mark.slow
async def test_two_replicas_share_buckets_on_redis(upstream: FakeUpstream, redis_url: str):  # noqa: F811
    prefix = f"svc_sr:test:{uuid.uuid4().hex}:"
    settings = limits(per_key={"requests_per_minute": 1})
    one = plane(upstream, settings, rate_buckets=redis_buckets(redis_url, prefix))
    other = plane(upstream, settings, rate_buckets=redis_buckets(redis_url, prefix))
    assert (await ask(one, key="sk-a")).status_code == 200
    assert_limited(await ask(other, key="sk-a"), "per_key")
    # backend: memory keeps each replica's own buckets even with Redis at hand
    local = plane(
        upstream,
        limits(backend="memory", per_key={"requests_per_minute": 1}),
        rate_buckets=redis_buckets(redis_url, prefix),
    )
    assert (await ask(local, key="sk-a")).status_code == 200


@pytest.mark.slow
async def test_a_store_that_is_down_lets_requests_through(upstream: FakeUpstream):  # noqa: F811
    down = redis_buckets(f"redis://127.0.0.1:{free_port()}/0", "svc_sr:down:", timeout_s=0.5)
    app = plane(upstream, limits(per_key={"requests_per_minute": 1}), rate_buckets=down)
    for _ in range(3):
        assert (await ask(app, key="sk-a")).status_code == 200


@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_buckets_refill_and_take_from_all_or_none(kind: str, request: pytest.FixtureRequest):
    now = [0.0]
    if kind == "memory":
        store: Any = MemoryBuckets(clock=lambda: now[0])
    else:
        store = redis_buckets(request.getfixturevalue("redis_url"), f"svc_sr:test:{uuid.uuid4().hex}:")
    wide = Bucket("wide", capacity=5, per_second=0.01)
    narrow = Bucket("narrow", capacity=1, per_second=0.01)  # a token every 100 s
    assert (await store.take([wide, narrow])).allowed
    refused = await store.take([wide, narrow])
    assert refused.empty == narrow and 90 < refused.wait_s <= 100
    for _ in range(4):  # the refusal took nothing from the wide bucket: 4 tokens left
        assert (await store.take([wide])).allowed
    assert not (await store.take([wide])).allowed
    if kind == "memory":
        now[0] += 100.0
        assert (await store.take([narrow])).allowed
