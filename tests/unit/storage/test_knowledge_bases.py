"""Knowledge-base routes (docs/knowledge-bases.md), the map, and the store.

The encoder is a deterministic fake (a unit vector per text from its hash, plus a label
direction), so activation and the map are exact; a gated fake holds an activation pending."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.state.shared_store import ManagementStoreSettings
from app.storage.kb_map import project
from app.storage.knowledge_bases import KnowledgeBaseService, KnowledgeBaseStore, open_kb_store
from tests.unit.management.test_management_support import Harness, base_document, error_code, with_auth

DIM = 16
PREFIX = "/api/v1/storage/knowledge-bases"


def fake_vector(text: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
    vector = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return vector / np.linalg.norm(vector)


async def fake_embed(texts: list[str]) -> np.ndarray:
    return np.stack([fake_vector(t) for t in texts])


class GatedEmbed:
    """An encoder that answers only once `release()` is called (an activation held pending)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()

    def release(self) -> None:
        self.gate.set()

    async def __call__(self, texts: list[str]) -> np.ndarray:
        await self.gate.wait()
        return await fake_embed(texts)


def entries(label: str, n: int) -> list[dict[str, Any]]:
    return [{"text": f"{label} example number {i}", "label": label} for i in range(n)]


def harness(embed: Any = fake_embed, store: KnowledgeBaseStore | None = None, **kwargs: Any) -> Harness:
    return Harness(knowledge_bases=KnowledgeBaseService(store, embed=embed), **kwargs)


async def wait_active(h: Harness, name: str) -> dict[str, Any]:
    await h.parts.storage.knowledge_bases.drain()
    async with h.client() as c:
        body = (await c.get(f"{PREFIX}/{name}")).json()
    return body


async def test_create_answers_202_pending_then_turns_active() -> None:
    h = harness()
    async with h.client() as c:
        created = await c.post(
            PREFIX, json={"name": "faq", "entries": entries("billing", 3) + entries("tech", 2)}
        )
        assert created.status_code == 202, created.text
        body = created.json()
        assert body["activation_status"] == "pending" and body["status"] == "pending"
        assert len(body["generated_runtime_hash"]) == 64
        assert body["knowledge_base"]["labels"] == {"billing": 3, "tech": 2}
    view = await wait_active(h, "faq")
    assert view["activation_status"] == "active"
    assert view["active_runtime_hash"] == body["generated_runtime_hash"]
    assert [e["label"] for e in view["entries"]] == ["billing"] * 3 + ["tech"] * 2
    async with h.client() as c:
        listed = (await c.get(PREFIX)).json()
    assert [b["name"] for b in listed["data"]] == ["faq"] and "entries" not in listed["data"][0]
    audit = h.management.audit.query("kb.create").entries
    assert len(audit) == 1 and audit[0].status == 202


@pytest.mark.slow
async def test_second_mutation_while_pending_is_409_and_the_first_is_intact() -> None:
    gated = GatedEmbed()
    h = harness(embed=gated)
    async with h.client() as c:
        first = await c.post(PREFIX, json={"name": "one", "entries": entries("a", 2)})
        assert first.status_code == 202
        for attempt in (
            c.post(PREFIX, json={"name": "two", "entries": entries("b", 2)}),
            c.put(f"{PREFIX}/one", json={"entries": entries("z", 4)}),
            c.delete(f"{PREFIX}/one"),
        ):
            refused = await attempt
            assert refused.status_code == 409, refused.text
            assert error_code(refused) == "CONFIG_ACTIVATION_PENDING"
            assert refused.json()["error"]["details"] == {"pending": "one", "operation": "create"}
            assert refused.json()["error"]["timestamp"]
        still = (await c.get(f"{PREFIX}/one")).json()
        assert still["activation_status"] == "pending"
        assert still["generated_runtime_hash"] == first.json()["generated_runtime_hash"]
        assert [e["label"] for e in still["entries"]] == ["a", "a"]
        assert (await c.get(f"{PREFIX}/two")).status_code == 404
    gated.release()
    assert (await wait_active(h, "one"))["activation_status"] == "active"
    async with h.client() as c:  # no longer pending: the next mutation goes through
        assert (await c.put(f"{PREFIX}/one", json={"entries": entries("z", 4)})).status_code == 202


@pytest.mark.slow
async def test_update_and_delete_activate_and_404s() -> None:
    h = harness()
    async with h.client() as c:
        assert (await c.get(f"{PREFIX}/nope")).status_code == 404
        assert error_code(await c.put(f"{PREFIX}/nope", json={"entries": entries("a", 1)})) == "NOT_FOUND"
        assert (await c.delete(f"{PREFIX}/nope")).status_code == 404
        assert (await c.get(f"{PREFIX}/nope/map/metadata")).status_code == 404
        assert (await c.post(PREFIX, json={"name": "kb", "entries": entries("a", 2)})).status_code == 202
    first = await wait_active(h, "kb")
    async with h.client() as c:
        duplicate = await c.post(PREFIX, json={"name": "kb", "entries": entries("a", 2)})
        assert duplicate.status_code == 409 and error_code(duplicate) == "ALREADY_EXISTS"
        updated = await c.put(f"{PREFIX}/kb", json={"entries": entries("b", 3)})
        assert updated.status_code == 202
        assert updated.json()["active_runtime_hash"] == first["generated_runtime_hash"]
    second = await wait_active(h, "kb")
    assert second["activation_status"] == "active" and second["entry_count"] == 3
    assert second["generated_runtime_hash"] != first["generated_runtime_hash"]
    async with h.client() as c:
        deleted = await c.delete(f"{PREFIX}/kb")
        assert deleted.status_code == 202 and deleted.json()["knowledge_base"]["operation"] == "delete"
    await h.parts.storage.knowledge_bases.drain()
    async with h.client() as c:
        assert (await c.get(f"{PREFIX}/kb")).status_code == 404
        assert (await c.get(PREFIX)).json()["data"] == []


@pytest.mark.slow
async def test_bad_input_is_400_and_no_runtime_is_503() -> None:
    h = harness()
    async with h.client() as c:
        for body in (
            {"name": "x", "entries": []},
            {"name": "bad name!", "entries": entries("a", 1)},
            {"name": "x", "entries": [{"text": "  ", "label": "a"}]},
            {"name": "x", "entries": [{"text": "t"}]},
        ):
            response = await c.post(PREFIX, json=body)
            assert response.status_code == 400 and error_code(response) == "INVALID_INPUT", body
        assert (await c.post(PREFIX, content=b"{not json")).status_code == 400
    standalone = Harness()  # no runtime to embed: nothing persisted
    async with standalone.client() as c:
        refused = await c.post(PREFIX, json={"name": "x", "entries": entries("a", 1)})
        assert refused.status_code == 503
        assert (await c.get(PREFIX)).json()["data"] == []


@pytest.mark.slow
async def test_failed_embedding_reads_failed_and_does_not_block() -> None:
    async def broken(texts: list[str]) -> np.ndarray:
        raise RuntimeError("encoder down")

    h = harness(embed=broken)
    async with h.client() as c:
        assert (await c.post(PREFIX, json={"name": "kb", "entries": entries("a", 2)})).status_code == 202
    view = await wait_active(h, "kb")
    assert view["activation_status"] == "failed" and "encoder down" in view["error"]
    async with h.client() as c:
        assert (await c.get(f"{PREFIX}/kb/map/metadata")).status_code == 409
        assert (await c.delete(f"{PREFIX}/kb")).status_code == 202


@pytest.mark.slow
async def test_permissions_reads_need_data_read_writes_config_write() -> None:
    env = {"T_ADMIN": "admin-tok-1", "T_VIEW": "viewer-tok-2", "T_DATA": "data-tok-3"}
    auth = {
        "mode": "bearer",
        "tokens": [
            {"name": "root", "token_env": "T_ADMIN", "role": "admin"},
            {"name": "dash", "token_env": "T_VIEW", "role": "viewer"},
            {"name": "reader", "token_env": "T_DATA", "permissions": ["data.read"]},
        ],
    }
    h = harness(document=with_auth(base_document(), auth), environ=env)
    body = {"name": "kb", "entries": entries("a", 2)}
    async with h.client() as anonymous, h.client("viewer-tok-2") as viewer, h.client("data-tok-3") as reader:
        assert (await anonymous.get(PREFIX)).status_code == 401
        assert (await viewer.get(PREFIX)).status_code == 403
        assert (await reader.post(PREFIX, json=body)).status_code == 403
        assert (await reader.get(PREFIX)).status_code == 200
    async with h.client("admin-tok-1") as admin:
        assert (await admin.post(PREFIX, json=body)).status_code == 202


@pytest.mark.slow
async def test_map_metadata_and_ndjson_are_deterministic() -> None:
    h = harness()
    async with h.client() as c:
        kb = entries("alpha", 6) + entries("beta", 5)
        assert (await c.post(PREFIX, json={"name": "m", "entries": kb})).status_code == 202
    await h.parts.storage.knowledge_bases.drain()
    async with h.client() as c:
        meta = (await c.get(f"{PREFIX}/m/map/metadata")).json()
        data = await c.get(f"{PREFIX}/m/map/data.ndjson")
    assert data.status_code == 200 and data.headers["content-type"].startswith("application/x-ndjson")
    points = [json.loads(line) for line in data.text.splitlines()]
    assert meta["count"] == len(points) == 11 and meta["labels"] == {"alpha": 6, "beta": 5}
    assert meta["projection"] == "pca" and meta["dimension"] == DIM
    assert 0 < meta["explained_variance"][1] <= meta["explained_variance"][0] <= 1
    assert {p["id"] for p in points} == {str(i) for i in range(11)}
    assert set(points[0]) == {"id", "label", "x", "y", "text"}
    bounds = meta["bounds"]
    assert all(bounds["x_min"] <= p["x"] <= bounds["x_max"] for p in points)
    # the same vectors in another order project to the same points (sign convention, centring)
    matrix = await fake_embed([e["text"] for e in kb])
    again, _ = project(matrix[::-1].copy())
    first, _ = project(matrix)
    assert np.allclose(first, again[::-1], atol=1e-6)
    assert [round(p["x"], 4) for p in points] == [round(float(x), 4) for x in first[:, 0]]


@pytest.mark.slow
async def test_file_store_is_shared_between_two_replicas(tmp_path: Path) -> None:
    settings = ManagementStoreSettings()
    one = harness(store=open_kb_store(settings, "app", tmp_path))
    two = harness(store=open_kb_store(settings, "app", tmp_path))
    gated = GatedEmbed()
    one.parts.storage.knowledge_bases.embed = gated
    async with one.client() as a, two.client() as b:
        assert (await a.post(PREFIX, json={"name": "kb", "entries": entries("a", 2)})).status_code == 202
        refused = await b.post(PREFIX, json={"name": "other", "entries": entries("b", 1)})
        assert refused.status_code == 409 and error_code(refused) == "CONFIG_ACTIVATION_PENDING"
        gated.release()
        await one.parts.storage.knowledge_bases.drain()
        assert (await b.get(f"{PREFIX}/kb")).json()["activation_status"] == "active"
        assert (await b.get(f"{PREFIX}/kb/map/metadata")).json()["count"] == 2
    assert (tmp_path / "knowledge_bases.json").exists() and (tmp_path / "kb_vectors_kb.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("stale", [True, False])
async def test_a_pending_base_past_its_timeout_reads_failed_and_unblocks(stale: bool) -> None:
    now = [1000.0]
    service = KnowledgeBaseService(embed=GatedEmbed(), pending_timeout_s=60, clock=lambda: now[0])
    h = Harness(knowledge_bases=service)
    async with h.client() as c:
        assert (await c.post(PREFIX, json={"name": "kb", "entries": entries("a", 1)})).status_code == 202
        now[0] += 61 if stale else 30
        view = (await c.get(f"{PREFIX}/kb")).json()
        retry = await c.put(f"{PREFIX}/kb", json={"entries": entries("a", 2)})
    assert view["activation_status"] == ("failed" if stale else "pending")
    assert retry.status_code == (202 if stale else 409)
