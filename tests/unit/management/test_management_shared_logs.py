"""The audit log, replay records and outcomes in memory and in Redis (issue 15): every
behaviour runs against both implementations; the Redis ones also across two store objects
over one key prefix (two Ingress "replicas"), concurrently, tampered with, and with Redis
down. Real Redis (the session's valkey-server, `redis_url`), nothing mocked."""

from __future__ import annotations

import logging
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis

from app.common.api_docs import MAX_SEQUENCE
from app.common.ports import free_port
from app.management import audit_redis
from app.management.audit import AuditEntry, AuditLog, AuditTrail, verify_chain
from app.management.audit_redis import RedisAuditLog
from app.replays import replays_redis
from app.replays.replays import IdempotencyConflict, OutcomeIn, OutcomeLog, OutcomeStore, ReplayStore
from app.replays.replays_redis import RedisOutcomeStore, RedisReplayStore
from app.state.shared_store import ManagementStoreSettings, StoreUnavailable, redis_client

AuditFactory = Callable[..., AuditTrail]
ReplayFactory = Callable[..., Any]  # ReplayStore | RedisReplayStore
OutcomeFactory = Callable[..., OutcomeLog]


def client_for(url: str, timeout_seconds: float = 5.0) -> redis.Redis:
    """The client the product builds for a management store (fails within the timeout)."""
    return redis_client(ManagementStoreSettings(backend="redis", url=url, timeout_seconds=timeout_seconds))


@pytest.fixture
def shared(redis_url: str) -> Iterator[tuple[redis.Redis, str]]:
    """A client and a key prefix of this test's own."""
    client = client_for(redis_url)
    yield client, f"test:{uuid.uuid4().hex}:"
    client.close()


@pytest.fixture(params=["memory", "redis"])
def make_audit(request: pytest.FixtureRequest) -> AuditFactory:
    if request.param == "memory":
        return lambda capacity=10_000: AuditLog(capacity)
    client, prefix = request.getfixturevalue("shared")
    return lambda capacity=10_000: RedisAuditLog(client, prefix, capacity)


@pytest.fixture(params=["memory", "redis"])
def make_replays(request: pytest.FixtureRequest) -> ReplayFactory:
    if request.param == "memory":
        return lambda capacity=10_000: ReplayStore(capacity)
    client, prefix = request.getfixturevalue("shared")
    return lambda capacity=10_000: RedisReplayStore(client, prefix, capacity)


@pytest.fixture(params=["memory", "redis"])
def make_outcomes(request: pytest.FixtureRequest) -> OutcomeFactory:
    if request.param == "memory":
        return lambda capacity=10_000: OutcomeStore(capacity)
    client, prefix = request.getfixturevalue("shared")
    return lambda capacity=10_000: RedisOutcomeStore(client, prefix, capacity)


def replay(i: int, model: str = "small", decision: str = "", **extra: Any) -> dict[str, Any]:
    return {
        "request_id": f"r{i}",
        "selected_model": model,
        "decision": decision,
        "reason_code": "auto_routing",
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        "cost": {"amount": 0.5, "currency": "USD"},
        "latency_ms": 100.0 + i,
        **extra,
    }


def outcome(verdict: str = "good", replay_id: str = "r1") -> OutcomeIn:
    return OutcomeIn(replay_id=replay_id, target="big", verdict=verdict, score=0.5)


def run_together(workers: int, job: Callable[[int], Any]) -> list[Any]:
    """`job(i)` for i in range(workers), on as many threads, released at once."""
    start = threading.Barrier(workers)

    def released(i: int) -> Any:
        start.wait()
        return job(i)

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(released, range(workers)))


# ---------------------------------------------------------------------- audit, both stores


def test_audit_chain_verifies_and_detects_tampering(make_audit: AuditFactory) -> None:
    log = make_audit()
    for i in range(5):
        log.record("config.patch", request_id=f"r{i}", status=200)
    assert log.verify().ok and log.verify().checked == 5
    assert len(log) == 5 and log.last_sequence == 5
    entries = log.query(limit=10).entries
    entries[2].status = 500  # edited after the fact
    result = verify_chain(entries)
    assert not result.ok and result.first_bad_sequence == 3
    relinked = log.query(limit=10).entries
    del relinked[1]
    assert verify_chain(relinked).reason == "sequence gap"


def test_audit_ring_keeps_the_newest_and_reports_truncation(make_audit: AuditFactory) -> None:
    log = make_audit(capacity=5)
    for i in range(12):
        log.record("a" if i % 2 else "b")
    assert len(log) == 5 and log.verify().ok and log.last_sequence == 12
    page = log.query(limit=2, after_sequence=0)
    assert page.truncated and page.oldest_sequence == 8
    assert [e.sequence for e in page.entries] == [8, 9] and page.has_more and page.next_sequence == 9
    rest = log.query(limit=10, after_sequence=page.next_sequence)
    assert [e.sequence for e in rest.entries] == [10, 11, 12] and not rest.has_more and not rest.truncated
    only_a = log.query(action="a", limit=10)
    assert {e.action for e in only_a.entries} == {"a"}
    assert log.query(after_sequence=12).entries == [] and log.query(after_sequence=12).next_sequence == 12


def test_audit_filtered_pages_read_past_many_non_matching_entries(
    make_audit: AuditFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(audit_redis, "QUERY_CHUNK", 4)  # several reads per page in Redis
    log = make_audit()
    for i in range(40):
        log.record("rare" if i % 7 == 0 else "common")
    first = log.query(action="rare", limit=3)
    assert [e.sequence for e in first.entries] == [1, 8, 15] and first.has_more
    rest = log.query(action="rare", limit=3, after_sequence=first.next_sequence)
    assert [e.sequence for e in rest.entries] == [22, 29, 36] and not rest.has_more
    none = log.query(action="never", limit=3, after_sequence=5)
    assert none.entries == [] and none.next_sequence == 5 and not none.has_more


def test_audit_entries_keep_structured_fields_verifiable(make_audit: AuditFactory) -> None:
    log = make_audit()
    stored = log.record(
        "config.activate",
        principal="ops",
        config={"result": "active", "versions": (3, 4), "nested": {"z": 1, "a": [1.5, None]}},
        detail={"note": "ünïcode ✓"},
    )
    assert stored.sequence == 1 and stored.hash == stored.digest()
    [read] = log.query().entries
    config = read.model_dump(mode="json")["config"]
    assert config == {"result": "active", "versions": [3, 4], "nested": {"z": 1, "a": [1.5, None]}}
    assert read.detail == {"note": "ünïcode ✓"} and log.verify().ok


# ---------------------------------------------------------------------- audit, two replicas


def test_concurrent_appends_from_two_replicas_make_one_gap_free_chain(
    shared: tuple[redis.Redis, str],
) -> None:
    client, prefix = shared
    replicas = [RedisAuditLog(client, prefix), RedisAuditLog(client, prefix)]
    per_thread, threads = 25, 8

    def append(i: int) -> list[AuditEntry]:
        log = replicas[i % 2]
        return [log.record("auth.denied", request_id=f"t{i}-{n}") for n in range(per_thread)]

    returned = [e for batch in run_together(threads, append) for e in batch]
    total = per_thread * threads
    assert sorted(e.sequence for e in returned) == list(range(1, total + 1))  # none unstored
    for log in replicas:
        assert log.last_sequence == total and len(log) == total
        verification = log.verify()
        assert verification.ok and verification.checked == total
    entries = replicas[0].query(limit=total).entries
    assert [e.sequence for e in entries] == list(range(1, total + 1))
    assert {e.request_id for e in entries} == {e.request_id for e in returned}


def test_one_replicas_entry_is_read_by_the_other(shared: tuple[redis.Redis, str]) -> None:
    client, prefix = shared
    first, second = RedisAuditLog(client, prefix), RedisAuditLog(client, prefix)
    a = first.record("config.patch", status=200)
    b = second.record("config.patch", status=412)
    assert (a.sequence, b.sequence) == (1, 2) and b.prev_hash == a.hash
    assert [e.model_dump() for e in first.query().entries] == [a.model_dump(), b.model_dump()]
    assert first.last_sequence == 2 and first.verify().ok


def test_a_tampered_entry_fails_verify_with_its_sequence(shared: tuple[redis.Redis, str]) -> None:
    client, prefix = shared
    log = RedisAuditLog(client, prefix)
    for i in range(5):
        log.record("config.patch", request_id=f"r{i}", status=200)
    key = f"{prefix}audit"
    raw = client.lindex(key, 2)
    assert isinstance(raw, bytes)
    original = raw.decode()
    edited = AuditEntry.model_validate_json(original).model_copy(update={"status": 500})
    client.lset(key, 2, edited.model_dump_json())
    result = log.verify()
    assert not result.ok and result.first_bad_sequence == 3 and result.checked == 5
    assert result.reason == "entry hash does not match its content"

    client.lset(key, 2, "not json")
    broken = log.verify()
    assert not broken.ok and broken.first_bad_sequence == 3 and broken.reason == "entry is not an audit entry"
    assert [e.sequence for e in log.query().entries] == [1, 2, 4, 5]  # pages skip what cannot be read

    client.lset(key, 2, original)
    assert log.verify().ok
    client.rpop(key)  # the newest entry dropped: the rest still chains, the head says otherwise
    dropped = log.verify()
    assert not dropped.ok and dropped.first_bad_sequence == 4 and "head" in (dropped.reason or "")


# ---------------------------------------------------------------------- replays, both stores


def test_a_page_after_the_largest_sequence_is_empty(
    make_audit: AuditFactory, make_replays: ReplayFactory
) -> None:
    """The routes' bound (MAX_SEQUENCE) is a number every store reads: an empty page, not a
    Redis script that refused `1e+28` (a 503)."""
    log, replays = make_audit(), make_replays()
    log.record("config.patch")
    replays.record(replay(1))
    assert log.query(after_sequence=MAX_SEQUENCE).entries == []
    assert replays.list(after_sequence=MAX_SEQUENCE).records == []


def test_replay_store_is_bounded_and_aggregates(make_replays: ReplayFactory) -> None:
    store = make_replays(capacity=3)
    ids = [store.record(replay(i, "big" if i % 2 else "small", "math" if i % 2 else "")) for i in range(5)]
    assert len(store) == 3 and store.get(ids[0]) is None and store.get(ids[4]) is not None
    page = store.list(limit=2)
    assert [r["request_id"] for r in page.records] == ["r2", "r3"] and page.has_more
    assert page.oldest_sequence == 3 and page.next_sequence == 4 and page.newest_sequence == 5
    assert store.list(after_sequence=page.next_sequence).records[0]["request_id"] == "r4"
    agg = store.aggregate()
    assert agg.total == 3 and agg.by_model["small"].requests == 2 and agg.cost == {"USD": 1.5}
    assert agg.by_model["big"].prompt_tokens == 10 and agg.by_decision == {"": 2, "math": 1}
    assert agg.by_model["small"].mean_latency_ms == 103.0
    assert store.aggregate(model="big").total == 1 and store.aggregate(decision="math").total == 1


def test_replay_ids_copies_and_stamps(make_replays: ReplayFactory) -> None:
    store = make_replays()
    source = replay(1, id="given", request={"messages": [{"role": "user", "content": "hi"}]})
    assert store.record(source) == "given"
    source["request"]["messages"][0]["content"] = "changed later"
    again = store.record(replay(2, id="given"))  # an id is one record
    assert again != "given" and store.record({"replay_id": "other"}) == "other"
    kept = store.get("given")
    assert kept is not None and kept["id"] == "given" and kept["sequence"] == 1 and kept["timestamp"]
    assert kept["request"]["messages"][0]["content"] == "hi"
    kept["decision"] = "edited by a reader"
    assert store.get("given")["decision"] == ""
    assert store.get(again)["request_id"] == "r2"
    assert store.get("nope") is None and len(store) == 3


def test_replay_filtered_pages(make_replays: ReplayFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replays_redis, "READ_CHUNK", 3)  # several reads per page in Redis
    store = make_replays()
    for i in range(20):
        store.record(replay(i, "big" if i % 5 == 0 else "small", "math" if i % 5 == 0 else ""))
    page = store.list(limit=2, model="big")
    assert [r["request_id"] for r in page.records] == ["r0", "r5"] and page.has_more
    rest = store.list(limit=2, model="big", after_sequence=page.next_sequence)
    assert [r["request_id"] for r in rest.records] == ["r10", "r15"] and not rest.has_more
    assert store.list(decision="math", model="small").records == []
    assert store.aggregate(decision="math").by_model["big"].requests == 4


# ---------------------------------------------------------------------- replays, two replicas


def test_replays_from_two_replicas_share_one_bounded_ring(shared: tuple[redis.Redis, str]) -> None:
    client, prefix = shared
    replicas = [RedisReplayStore(client, prefix, capacity=50), RedisReplayStore(client, prefix, capacity=50)]
    ids = run_together(8, lambda i: [replicas[i % 2].record(replay(i * 100 + n)) for n in range(20)])
    every = [rid for batch in ids for rid in batch]
    assert len(set(every)) == 160
    reader = replicas[1]
    assert len(reader) == 50
    records = reader.list(limit=100).records
    assert [r["sequence"] for r in records] == list(range(111, 161))  # the newest 50, in order
    assert client.hlen(f"{prefix}replay:records") == 50  # the id lookup was trimmed with the ring
    assert all(reader.get(r["id"]) == r for r in records)
    assert reader.aggregate().total == 50


# ---------------------------------------------------------------------- outcomes


def test_outcomes_with_idempotency_key(make_outcomes: OutcomeFactory) -> None:
    store = make_outcomes()
    first = store.submit(outcome(), "alice", "k1")
    again = store.submit(outcome(), "alice", "k1")
    assert not first.idempotent_replay and again.idempotent_replay
    assert again.model_dump(exclude={"idempotent_replay"}) == first.model_dump(exclude={"idempotent_replay"})
    with pytest.raises(IdempotencyConflict):
        store.submit(outcome("bad"), "alice", "k1")
    with pytest.raises(IdempotencyConflict):
        store.submit(outcome(), "bob", "k1")  # the key is bound to its submitter too
    plain = [store.submit(outcome(), "alice") for _ in range(2)]
    assert plain[0].outcome_id != plain[1].outcome_id
    assert [r.outcome_id for r in store.list()] == [first.outcome_id] + [r.outcome_id for r in plain]
    assert first.source == "alice" and first.verdict == "good" and first.score == 0.5


def test_outcomes_and_keys_are_bounded(make_outcomes: OutcomeFactory) -> None:
    store = make_outcomes(capacity=2)
    first = store.submit(outcome(), "alice", "k1")
    store.submit(outcome(), "alice", "k2")
    store.submit(outcome(), "alice", "k3")  # k1 forgotten
    assert len(store.list()) == 2
    assert store.submit(outcome("other body"), "alice", "k1").outcome_id != first.outcome_id
    assert store.submit(outcome(), "alice", "k3").idempotent_replay


def test_idempotency_holds_across_replicas_at_once(shared: tuple[redis.Redis, str]) -> None:
    client, prefix = shared
    replicas = [RedisOutcomeStore(client, prefix), RedisOutcomeStore(client, prefix)]
    answers = run_together(8, lambda i: replicas[i % 2].submit(outcome(), "alice", "same-key"))
    assert len({a.outcome_id for a in answers}) == 1
    assert sum(not a.idempotent_replay for a in answers) == 1
    assert [r.outcome_id for r in replicas[1].list()] == [answers[0].outcome_id]
    with pytest.raises(IdempotencyConflict):
        replicas[1].submit(outcome("bad"), "alice", "same-key")


@pytest.mark.slow
async def test_two_ingress_replicas_share_audit_and_outcomes_over_http(
    shared: tuple[redis.Redis, str],
) -> None:
    # Imported here: a module holding `Harness` runs every test once per config store
    # (tests/unit/conftest.py), which none of these tests is about.
    from tests.unit.management.test_management_support import Harness

    client, prefix = shared

    def replica() -> Harness:
        return Harness(
            replays=RedisReplayStore(client, prefix),  # type: ignore[arg-type]
            audit=RedisAuditLog(client, prefix),
            outcomes=RedisOutcomeStore(client, prefix),
        )

    first, second = replica(), replica()
    rid = first.replays.record(replay(1, "big", "math"))  # type: ignore[union-attr]
    body = {"replay_id": rid, "target": "big", "verdict": "good"}
    headers = {"Idempotency-Key": "k1"}
    async with first.client() as a, second.client() as b:
        created = await a.post("/api/v1/observability/outcomes", json=body, headers=headers)
        replayed = await b.post("/api/v1/observability/outcomes", json=body, headers=headers)
        conflict = await b.post(
            "/api/v1/observability/outcomes", json={**body, "verdict": "bad"}, headers=headers
        )
        seen = await b.get(f"/api/v1/observability/replays/{rid}")
        audit = (await a.get("/api/v1/observability/audit", params={"action": "outcome.submit"})).json()
    assert (created.status_code, replayed.status_code, conflict.status_code) == (201, 200, 409)
    assert replayed.json()["outcome_id"] == created.json()["outcome_id"]
    assert seen.json()["request_id"] == "r1"
    assert [e["status"] for e in audit["entries"]] == [201, 200, 409]  # both replicas' entries
    assert first.management.audit.verify().ok


# ---------------------------------------------------------------------- Redis down or slow


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


def test_a_closed_port_degrades_audit_and_fails_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    client = client_for(f"redis://127.0.0.1:{free_port()}", timeout_seconds=0.5)
    log = RedisAuditLog(client, "down:")
    with caplog.at_level(logging.WARNING, logger="svc_sr.management.audit"):
        entry = log.record("auth.denied", status=403)
    assert entry.sequence == 0 and entry.action == "auth.denied" and entry.hash == entry.digest()
    assert "not stored" in caplog.text
    replays, outcomes = RedisReplayStore(client, "down:"), RedisOutcomeStore(client, "down:")
    calls: list[Callable[[], object]] = [
        log.query,
        log.verify,
        lambda: len(log),
        lambda: log.last_sequence,
        lambda: replays.record(replay(1)),
        replays.list,
        lambda: replays.get("x"),
        replays.aggregate,
        lambda: outcomes.submit(outcome(), "alice", "k"),
        outcomes.list,
    ]
    for call in calls:
        with pytest.raises(StoreUnavailable) as raised:
            call()
        assert isinstance(raised.value.__cause__, redis.ConnectionError)


def test_a_silent_store_times_out_into_store_unavailable(silent_port: int) -> None:
    client = client_for(f"redis://127.0.0.1:{silent_port}", timeout_seconds=0.2)
    log = RedisAuditLog(client, "slow:")
    assert log.record("auth.denied").sequence == 0  # the request goes on
    with pytest.raises(StoreUnavailable) as raised:
        log.query()
    assert isinstance(raised.value.__cause__, redis.TimeoutError)
    with pytest.raises(StoreUnavailable) as raised:
        RedisOutcomeStore(client, "slow:").submit(outcome(), "alice")
    assert isinstance(raised.value.__cause__, redis.TimeoutError)
