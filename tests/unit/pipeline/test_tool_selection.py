"""The `tools` (static policy) and `tool_selection` (semantic top_k) plugins: config models,
the pure selection, and the request path (x-tools-selected, the body sent upstream)."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from app.config.loader import parse_config
from app.config.plugins import ToolSelectionPlugin, ToolsPlugin, parse_plugin
from app.config.routing import Plugin
from app.pipeline.pipeline import RouterPipeline
from app.pipeline.services import PipelineServices
from app.pipeline.tools import (
    ToolPolicy,
    ToolSelectionPolicy,
    ToolVectorCache,
    select_tools,
    tool_text,
)

DIM = 64


def word_vector(text: str) -> np.ndarray:
    """A deterministic bag-of-words unit vector: texts sharing words are similar."""
    vector = np.zeros(DIM, dtype=np.float32)
    for word in text.lower().replace(":", " ").split():
        vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % DIM] += 1.0
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector


class CountingEmbed:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    async def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.stack([word_vector(t) for t in texts])


def tool(name: str, description: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description}}


TOOLS = [
    tool("get_weather", "weather forecast for a city"),
    tool("send_email", "send an email message to a recipient"),
    tool("search_flights", "search flights between two airports"),
    tool("convert_currency", "convert an amount between currencies"),
    tool("delete_file", "delete a file from disk"),
]


def test_config_models_validate_their_keys() -> None:
    assert isinstance(parse_plugin(Plugin(type="tools", configuration={"deny": ["x"]})), ToolsPlugin)
    chosen = parse_plugin(Plugin(type="tool_selection", configuration={"top_k": 2}))
    assert isinstance(chosen, ToolSelectionPlugin) and chosen.top_k == 2 and not chosen.fallback_to_empty
    with pytest.raises(ValidationError):
        parse_plugin(Plugin(type="tool_selection", configuration={"top_k": 0}))
    with pytest.raises(ValidationError):
        parse_plugin(Plugin(type="tools", configuration={"allow_list": ["x"]}))


async def test_static_policy_allow_and_deny_and_pinned_tool() -> None:
    body = {"tools": list(TOOLS), "tool_choice": {"type": "function", "function": {"name": "delete_file"}}}
    outcome = await select_tools(body, ToolPolicy(deny=frozenset({"send_email", "delete_file"})), None)
    assert outcome is not None and outcome.method == "static"
    assert outcome.removed_by_policy == ["send_email"]  # delete_file is what tool_choice forces
    assert [t["function"]["name"] for t in body["tools"]] == [
        "get_weather",
        "search_flights",
        "convert_currency",
        "delete_file",
    ]
    body = {"tools": list(TOOLS), "tool_choice": "auto", "parallel_tool_calls": True}
    outcome = await select_tools(body, ToolPolicy(allow=frozenset({"nothing_like_it"})), None)
    assert outcome is not None and outcome.kept == []
    assert "tools" not in body and "tool_choice" not in body and "parallel_tool_calls" not in body


async def test_semantic_selection_keeps_the_top_k_relevant_tools_in_request_order() -> None:
    embed = CountingEmbed()
    body = {"tools": list(TOOLS)}

    async def query() -> np.ndarray:
        return word_vector("search flights to a city with weather forecast")

    outcome = await select_tools(
        body, None, ToolSelectionPolicy(top_k=2, threshold=0.1), query_vector=query, embed=embed
    )
    assert outcome is not None and outcome.method == "semantic"
    assert outcome.kept == ["get_weather", "search_flights"]
    assert [t["function"]["name"] for t in body["tools"]] == ["get_weather", "search_flights"]
    assert set(outcome.scores) == {tool_text(t).split(":")[0].replace(" ", "_") for t in TOOLS}


async def test_fallback_when_nothing_reaches_the_threshold() -> None:
    async def query() -> np.ndarray:
        return word_vector("zzz qqq")

    for empty, expected in ((False, len(TOOLS)), (True, 0)):
        body = {"tools": list(TOOLS)}
        policy = ToolSelectionPolicy(top_k=2, threshold=0.99, fallback_to_empty=empty)
        outcome = await select_tools(body, None, policy, query_vector=query, embed=CountingEmbed())
        assert outcome is not None and outcome.method == "semantic_fallback"
        assert len(outcome.kept) == expected


async def test_encoder_failure_keeps_the_tools_and_reports_it() -> None:
    async def broken(texts: list[str]) -> np.ndarray:
        raise RuntimeError("encoder down")

    async def query() -> np.ndarray:
        return await broken(["q"])

    body = {"tools": list(TOOLS)}
    outcome = await select_tools(body, None, ToolSelectionPolicy(), query_vector=query, embed=broken)
    assert outcome is not None and outcome.method == "error" and "encoder down" in (outcome.error or "")
    assert len(body["tools"]) == len(TOOLS)


async def test_tool_vectors_are_cached_and_bounded() -> None:
    embed = CountingEmbed()
    cache = ToolVectorCache(capacity=3)
    await cache.vectors(["a", "b"], embed)
    await cache.vectors(["a", "b"], embed)
    assert len(embed.calls) == 1
    await cache.vectors(["c", "d", "e"], embed)
    assert len(cache) == 3


def pipeline_document(plugins: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "small"},
            "models": [{"name": "small", "backend_refs": [{"base_url": "http://127.0.0.1:9/v1"}]}],
        },
        "routing": {
            "signals": {"keywords": [{"name": "travel", "keywords": ["trip"]}]},
            "decisions": [
                {
                    "name": "travel",
                    "rules": {"type": "keyword", "name": "travel"},
                    "modelRefs": [{"model": "small"}],
                    "plugins": plugins,
                }
            ],
        },
    }


async def test_the_request_path_selects_tools_and_sets_x_tools_selected() -> None:
    plugins = [
        {"type": "tools", "configuration": {"deny": ["delete_file"]}},
        {"type": "tool_selection", "configuration": {"top_k": 2, "similarity_threshold": 0.1}},
    ]
    pipeline = RouterPipeline(
        parse_config(pipeline_document(plugins)).config, PipelineServices(embed=CountingEmbed())
    )
    request = {
        "model": "MoM",
        "messages": [{"role": "user", "content": "plan a trip: search flights and the weather forecast"}],
        "tools": TOOLS,
    }
    plan = await pipeline.route(request)
    assert plan.decision == "travel"
    assert [t["function"]["name"] for t in plan.body["tools"]] == ["get_weather", "search_flights"]
    assert plan.response_headers["x-tools-selected"] == "2"
    assert len(request["tools"]) == len(TOOLS)  # the caller's body is not rewritten in place


async def test_a_decision_without_the_plugins_forwards_every_tool() -> None:
    pipeline = RouterPipeline(
        parse_config(pipeline_document([])).config, PipelineServices(embed=CountingEmbed())
    )
    plan = await pipeline.route(
        {"model": "MoM", "messages": [{"role": "user", "content": "a trip"}], "tools": TOOLS}
    )
    assert len(plan.body["tools"]) == len(TOOLS) and plan.response_headers["x-tools-selected"] == str(
        len(TOOLS)
    )


async def test_tool_vectors_are_embedded_once_per_config_version() -> None:
    plugins = [{"type": "tool_selection", "configuration": {"top_k": 2, "similarity_threshold": 0.1}}]
    embed = CountingEmbed()
    pipeline = RouterPipeline(parse_config(pipeline_document(plugins)).config, PipelineServices(embed=embed))
    for text in ("a trip to see the weather", "a trip: search flights"):
        await pipeline.route(
            {"model": "MoM", "messages": [{"role": "user", "content": text}], "tools": TOOLS}
        )
    tool_batches = [texts for texts in embed.calls if len(texts) > 1]
    assert tool_batches == [[tool_text(t) for t in TOOLS]]  # the second request reads the cache
