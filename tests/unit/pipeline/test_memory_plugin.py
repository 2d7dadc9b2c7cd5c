"""The `memory` plugin through RouterPipeline (real encoder): a finished exchange's facts are
remembered in the background, the next request of the same scope carries the relevant ones
as a system message (header and routing_metadata count them), another scope's never; a
store that is down skips recall and the request still routes; extraction failures are
counted, never raised."""

from __future__ import annotations

from typing import Any

import pytest

from app.config.loader import parse_config
from app.config.plugins import MemoryPlugin
from app.exchange.answer import routing_metadata
from app.pipeline import PipelineServices, RouterPipeline
from app.pipeline.memory.plugin import PREAMBLE, inject, rank, scope_of
from app.pipeline.memory.store import InMemoryMemoryStore, Memory, MemoryScope, MemoryStoreUnavailable
from app.pipeline.plan import CompletionReport, RoutePlan
from app.pipeline.signals.base import EmbedFn

ANSWER = {
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
}


def document(**memory: Any) -> dict[str, Any]:
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "small"},
            "models": [{"name": "small", "backend_refs": [{"base_url": "http://127.0.0.1:9/v1"}]}],
        },
        "routing": {
            "decisions": [
                {
                    "name": "chat",
                    "modelRefs": [{"model": "small"}],
                    "plugins": [
                        {
                            "type": "system_prompt",
                            "configuration": {"system_prompt": "Be kind.", "mode": "replace"},
                        },
                        {"type": "memory", "configuration": memory},
                    ],
                }
            ]
        },
    }


def pipeline(embed: EmbedFn, store: Any, **memory: Any) -> RouterPipeline:
    return RouterPipeline(
        parse_config(document(**memory)).config, PipelineServices(embed=embed, memories=store)
    )


def ask(
    text: str, user: str | None = None, session: str | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    headers = {"x-user-id": user} if user else {}
    if session:
        headers["x-session-id"] = session
    return {"model": "MoM", "messages": [{"role": "user", "content": text}]}, headers


async def exchange(p: RouterPipeline, text: str, **who: str | None) -> RoutePlan:
    body, headers = ask(text, **who)
    plan = await p.route(body, headers)
    await p.complete(plan, CompletionReport(status=200, response=ANSWER))
    await p.services.memory_tasks.drain()
    return plan


def memory_message(plan: RoutePlan) -> str | None:
    texts = [
        m["content"] for m in plan.body["messages"] if m["role"] == "system" and PREAMBLE in m["content"]
    ]
    return texts[0] if texts else None


async def test_remembered_then_recalled_for_the_same_user_only(minilm_embed: EmbedFn) -> None:
    store = InMemoryMemoryStore()
    p = pipeline(minilm_embed, store)
    first = await exchange(p, "my name is Ada and I prefer answers in French", user="ada")
    assert first.response_headers["x-vsr-memories-recalled"] == "0"
    kept = await store.list_scope(MemoryScope(kind="user", id="ada"))
    assert sorted(m.text for m in kept) == ["The user prefers answers in French.", "The user's name is Ada."]
    assert kept[0].source.request_id == first.request_id and kept[0].source.decision == "chat"

    again = await exchange(p, "What is my name?", user="ada")
    injected = memory_message(again)
    assert injected is not None and "The user's name is Ada." in injected
    assert again.body["messages"][0] == {"role": "system", "content": "Be kind."}  # replace kept it apart
    assert again.response_headers["x-vsr-memories-recalled"] == str(again.memories_recalled)
    assert routing_metadata(again, 0.0)["memories_recalled"] == again.memories_recalled >= 1
    used = await store.get(next(m.id for m in kept if "Ada" in m.text))
    assert used is not None and used.use_count == 1 and used.last_used_at

    other = await exchange(p, "What is my name?", user="bob")
    assert memory_message(other) is None and other.response_headers["x-vsr-memories-recalled"] == "0"
    assert await store.list_scope(MemoryScope(kind="user", id="bob")) == []  # a question is no fact

    repeat = await exchange(p, "My name is Ada.", user="ada")
    assert repeat.memory_write is not None
    assert (
        len(await store.list_scope(MemoryScope(kind="user", id="ada"))) == 2
    )  # the same fact, not kept twice
    assert p.services.memory_tasks.counts["duplicate"] == 1


async def test_session_scope_and_no_identity(minilm_embed: EmbedFn) -> None:
    store = InMemoryMemoryStore()
    p = pipeline(minilm_embed, store, scope="session", recall_threshold=0.0)
    await exchange(p, "I'm allergic to peanuts.", session="s1", user="ada")
    assert [m.scope for m in await store.list_scope(MemoryScope(kind="session", id="s1"))] == [
        MemoryScope(kind="session", id="s1")
    ]
    assert await store.list_scope(MemoryScope(kind="user", id="ada")) == []
    other = await exchange(p, "Suggest a snack", session="s2")
    assert memory_message(other) is None
    same = await exchange(p, "Suggest a snack", session="s1")
    assert "allergic to peanuts" in (memory_message(same) or "")
    anonymous = await exchange(p, "I'm allergic to milk.")
    assert anonymous.response_headers["x-vsr-memory-status"] == "no_scope" and anonymous.memory_write is None


class DownStore(InMemoryMemoryStore):
    async def list_scope(self, scope: MemoryScope) -> list[Memory]:
        raise MemoryStoreUnavailable("down")


async def test_a_store_that_is_down_neither_blocks_nor_fails(minilm_embed: EmbedFn) -> None:
    p = pipeline(minilm_embed, DownStore())
    plan = await exchange(p, "my name is Ada", user="ada")
    assert plan.selected_model == "small" and plan.response_headers["x-vsr-memory-status"] == "unavailable"
    assert p.services.memory_tasks.counts["unavailable"] == 1


async def test_extraction_errors_are_counted_not_raised(minilm_embed: EmbedFn) -> None:
    async def broken(texts: list[str]) -> Any:
        if any("user" in t.lower() for t in texts):  # the facts' embedding, not the query's
            raise RuntimeError("encoder fell over")
        return await minilm_embed(texts)

    p = pipeline(broken, InMemoryMemoryStore())
    await exchange(p, "my name is Ada", user="ada")
    assert p.services.memory_tasks.counts["failed"] == 1


def test_scope_identity_and_ranking() -> None:
    assert scope_of("user", {"x-user-id": " ada "}, {"user": "x"}, None) == MemoryScope(kind="user", id="ada")
    assert scope_of("user", {}, {"user": "bob"}, None) == MemoryScope(kind="user", id="bob")
    assert scope_of("user", {}, {"user": 3}, "s") is None and scope_of("session", {}, {}, None) is None
    assert MemoryPlugin().recall_threshold == 0.25
    a = Memory(
        id="a", scope=MemoryScope(kind="user", id="u"), text="a", category="x", created_at="t", vector=[1, 0]
    )
    b = a.model_copy(update={"id": "b", "vector": [0.6, 0.8]})
    assert [m.id for m, _ in rank([b, a], [1.0, 0.0], 5, 0.5)] == ["a", "b"]
    assert [m.id for m, _ in rank([b, a], [1.0, 0.0], 1, 0.0)] == ["a"]
    assert rank([b], [1.0, 0.0], 5, 0.7) == []
    body = {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]}
    inject(body, [a])
    assert [m["role"] for m in body["messages"]] == ["system", "system", "user"]


@pytest.mark.parametrize(
    "bad", [{"scope": "tenant"}, {"recall_top_k": -1}, {"inject_as": "user"}, {"bogus": 1}]
)
def test_bad_memory_configuration_is_rejected(bad: dict[str, Any]) -> None:
    from app.config.errors import ConfigError

    with pytest.raises((ConfigError, ValueError)):
        parse_config(document(**bad))


def test_with_a_memory_plugin_the_scope_keys_the_response_cache() -> None:
    """The cache is looked up before recall: without the scope in the partition, Bob could be
    served the answer made with Ada's memories."""
    from app.pipeline.phases.cache import cache_partition

    body, _ = ask("what should I cook tonight?")
    ada = cache_partition("small", "chat", body, {"x-user-id": "ada"}, "user:ada")
    bob = cache_partition("small", "chat", body, {"x-user-id": "bob"}, "user:bob")
    plain = cache_partition("small", "chat", body, {"x-user-id": "ada"})
    assert len({ada, bob, plain}) == 3
    assert cache_partition("small", "chat", body, {}, "user:ada") == ada  # the scope, not the header
