"""Spend per key and team: calendar periods, and reservations that cannot overspend a budget
when many requests race for its last dollars, in memory and on Redis (two stores over one
Redis: two replicas)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest

from app.config.global_config import ApiKeysConfig, Budget
from app.config.pricing import Pricing
from app.keys.gate import KeyGate, estimate_cost
from app.keys.records import MISS_RECHECK_S, KeySpec, KeyStore
from app.keys.spend import MemorySpend, RedisSpend, SpendStore, counter, period_of
from app.state.shared_store import ManagementStoreSettings, StoreUnavailable, redis_client


def test_periods_are_calendar_periods_in_utc() -> None:
    now = datetime(2026, 12, 31, 23, 59, tzinfo=UTC)  # a Thursday
    day, week, month = (period_of(kind, now) for kind in ("day", "week", "month"))
    assert (day.name, day.end) == ("day:2026-12-31", datetime(2027, 1, 1, tzinfo=UTC))
    assert (week.name, week.start.weekday(), week.end) == (
        "week:2026-12-28",
        0,
        datetime(2027, 1, 4, tzinfo=UTC),
    )
    assert (month.name, month.end) == ("month:2026-12", datetime(2027, 1, 1, tzinfo=UTC))


async def race(stores: list[SpendStore], budget: float, amount: float, requests: int) -> tuple[int, float]:
    """`requests` reservations at once, spread over `stores`; (admitted, spent)."""
    c = counter(f"key:{uuid.uuid4().hex}", Budget(usd=budget, period="day"), datetime.now(UTC))
    results = await asyncio.gather(*(stores[i % len(stores)].reserve([c], amount) for i in range(requests)))
    return sum(r.full is None for r in results), (await stores[0].spent([c]))[0]


async def test_memory_reservations_never_pass_a_full_budget() -> None:
    admitted, spent = await race([MemorySpend()], budget=1.0, amount=0.3, requests=50)
    assert admitted == 4 and spent == pytest.approx(1.2)  # the last admitted one starts under 1.0


@pytest.mark.slow
async def test_two_replicas_on_redis_overspend_by_at_most_one_reservation(redis_url: str) -> None:
    settings = ManagementStoreSettings(backend="redis", url=redis_url)
    prefix = f"svc_sr:test:{uuid.uuid4().hex}:"
    stores: list[SpendStore] = [
        RedisSpend(redis_client(settings), prefix),
        RedisSpend(redis_client(settings), prefix),
    ]
    admitted, spent = await race(stores, budget=1.0, amount=0.3, requests=60)
    assert admitted == 4 and spent == pytest.approx(1.2)
    c = counter("key:settled", Budget(usd=1.0, period="day"), datetime.now(UTC))
    assert (await stores[0].reserve([c], 0.5)).full is None
    await stores[1].settle([c], -0.4)  # the real cost was 0.1
    assert (await stores[0].spent([c]))[0] == pytest.approx(0.1)


async def test_a_spend_store_that_is_down_lets_the_request_through() -> None:
    class Down(MemorySpend):
        async def spent(self, counters):  # type: ignore[no-untyped-def]
            raise StoreUnavailable("down")

        async def reserve(self, counters, amount):  # type: ignore[no-untyped-def]
            raise StoreUnavailable("down")

    store = KeyStore(cache_seconds=0)
    _, secret = store.issue(KeySpec(name="k", models=["m"], budget=Budget(usd=1.0)))
    gate = KeyGate(store, required=lambda: True, settings=ApiKeysConfig, spend=Down())
    admission = await gate.admit({"x-api-key": secret})
    assert admission is not None and not admission.grant.step_down
    assert (await admission.reserve({}, "m", {"messages": []})) is admission


async def test_a_team_budget_counts_every_key_of_the_team() -> None:
    store = KeyStore(cache_seconds=0)
    # Its own budget as big as the team's: both fill at once (a tie between the two counters).
    _, first = store.issue(KeySpec(name="a", models=["m"], team="research", budget=Budget(usd=1.0)))
    _, second = store.issue(KeySpec(name="b", models=["m"], team="research"))
    settings = ApiKeysConfig(teams={"research": Budget(usd=1.0, period="month")})
    gate = KeyGate(store, required=lambda: True, settings=lambda: settings)
    pricing = {"m": Pricing(prompt_per_1m=1_000_000.0)}  # a dollar per prompt token
    spent = await gate.admit({"authorization": f"Bearer {first}"})
    assert spent is not None
    await (await spent.reserve(pricing, "m", {"messages": []})).settle(1.0)
    with pytest.raises(Exception) as refused:
        await gate.admit({"authorization": f"Bearer {second}"})
    assert getattr(refused.value, "code", None) == "budget_exceeded"
    assert refused.value.details["budget"]["owner"] == "team:research"  # type: ignore[attr-defined]
    with pytest.raises(Exception) as tied:
        await gate.admit({"authorization": f"Bearer {first}"})
    assert getattr(tied.value, "code", None) == "budget_exceeded"


def test_the_estimate_covers_the_prompt_and_max_tokens() -> None:
    pricing = Pricing(prompt_per_1m=1_000_000.0, completion_per_1m=2_000_000.0)
    body = {"messages": [{"role": "user", "content": "x" * 300}], "max_tokens": 10}
    assert estimate_cost(pricing, body) >= 100 + 20  # at least a token per 3 bytes, and max_tokens
    assert estimate_cost(None, body) == 0.0


def test_a_refused_model_survives_the_trip_from_a_router_replica() -> None:
    import pickle

    from app.keys.gate import ModelNotGranted

    back = pickle.loads(pickle.dumps(ModelNotGranted("other", ["cheap"])))
    assert (back.status, back.code, back.details) == (
        403,
        "model_not_granted",
        {"model": "other", "granted": ["cheap"], "action_taken": "block"},
    )


def test_a_key_issued_on_another_replica_is_known_at_once_and_a_revoked_one_within_the_cache() -> None:
    from app.state.state_stores import MemoryStateStore

    now = [0.0]
    shared = MemoryStateStore()
    here = KeyStore(shared, cache_seconds=0.5, clock=lambda: now[0])
    there = KeyStore(shared, cache_seconds=0.5, clock=lambda: now[0])
    assert here.lookup("sk-svc-none") is None  # read now: cached for 0.5 s
    record, secret = there.issue(KeySpec(name="k", models=["m"]))
    assert here.lookup(secret) is None  # a miss just after a read is a miss ...
    now[0] = MISS_RECHECK_S
    assert here.lookup(secret) == record  # ... then re-reads a changed registry
    there.revoke(record.id)
    assert here.lookup(secret) == record  # trusted for cache_seconds ...
    now[0] = MISS_RECHECK_S + 0.5
    assert here.lookup(secret) is None  # ... and no longer


async def test_a_listener_without_keys_reads_the_store_once_per_cache_period() -> None:
    from app.state.state_stores import MemoryStateStore

    class Counting(MemoryStateStore):
        reads = 0

        def load_json(self) -> str | None:
            Counting.reads += 1
            return super().load_json()

    now = [0.0]
    store = KeyStore(Counting(), cache_seconds=0.5, clock=lambda: now[0])
    _, secret = store.issue(KeySpec(name="k", models=["m"]))
    gate = KeyGate(store, required=lambda: False, settings=lambda: ApiKeysConfig(cache_seconds=0.5))
    reads = Counting.reads
    for _ in range(20):  # an SDK's placeholder key, then a real one: one read for all of them
        assert await gate.admit({"authorization": "Bearer sk-placeholder"}) is None
        assert (await gate.admit({"x-api-key": secret})) is not None
    assert Counting.reads == reads + 1


def test_a_flood_of_unknown_keys_reads_the_registry_revision_once_per_interval() -> None:
    from app.state.state_stores import MemoryStateStore

    now = [0.0]
    store = KeyStore(MemoryStateStore(), cache_seconds=0.5, clock=lambda: now[0])
    checks = []
    real = store.revision

    def counted() -> int:
        checks.append(now[0])
        return real()

    store.revision = counted  # type: ignore[method-assign]
    assert store.lookup("sk-svc-a") is None  # the first read loads the registry
    for i in range(100):
        now[0] = i * 0.001  # 100 unknown keys within 0.1 s
        assert store.lookup(f"sk-svc-{i}") is None
    assert len(checks) == 1  # one re-check after MISS_RECHECK_S, not one per request
