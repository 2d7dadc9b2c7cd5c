"""The plugins API (docs/plugins.md): registry, descriptors, bindings, previews; permissions
when auth is on; preview is the default mode, probe explicit, nothing persisted."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.api.plugins.plugin_previews import PREVIEWS
from app.api.plugins.plugins_registry import PREVIEW_TYPES
from app.config.plugins import PLUGIN_MODELS
from app.config.routing import REFERENCE_ONLY_PLUGIN_TYPES
from tests.unit.management.test_management_support import Harness, base_document, error_code, with_auth
from tests.unit.pipeline.test_tool_selection import TOOLS, CountingEmbed

USER = {"role": "user", "content": "search flights to a city with weather forecast"}


def plugin_document() -> dict[str, Any]:
    document = base_document()
    document["routing"]["decisions"][0]["plugins"] = [
        {"type": "tools", "configuration": {"deny": ["delete_file"]}},
        {"type": "tool_selection", "configuration": {"top_k": 2, "similarity_threshold": 0.1}},
        {"type": "system_prompt", "configuration": {"system_prompt": "Be exact."}, "enabled": False},
        {"type": "rag", "configuration": {"top_k": 3, "vector_store_id": "vs_missing"}},
        {"type": "hallucination", "configuration": {}},
        {"type": "response_jailbreak", "configuration": {"action": "block", "threshold": 0.7}},
    ]
    document["recipes"] = [
        {"name": "travel", "routing": copy.deepcopy(document["routing"])},
    ]
    document["recipes"][0]["routing"]["decisions"][0]["name"] = "trips"
    return document


@pytest.fixture
def harness() -> Harness:
    return Harness(plugin_document(), embed=CountingEmbed())


@pytest.mark.slow
async def test_the_registry_lists_every_known_type_with_its_operations(harness: Harness) -> None:
    async with harness.client() as client:
        answer = (await client.get("/api/v1/plugins")).json()["plugins"]
    by_type = {p["type"]: p for p in answer}
    assert set(by_type) == set(PLUGIN_MODELS) | set(REFERENCE_ONLY_PLUGIN_TYPES)
    assert by_type["tool_selection"]["applied"] and by_type["rag"]["applied"]
    assert not by_type["image_gen"]["applied"]
    assert by_type["tool_selection"]["bindings_url"] == "/api/v1/plugins/tool_selection/bindings"
    assert {o["name"] for o in by_type["tool_selection"]["operations"]} == {"bindings", "preview", "probe"}
    assert {o["name"] for o in by_type["system_prompt"]["operations"]} == {"bindings", "preview"}
    storage = {o["url"] for o in by_type["response_cache"]["operations"] if o["name"] == "storage"}
    assert storage and all(u.startswith("/api/v1/storage/") for u in storage)
    memory = [o["url"] for o in by_type["memory"]["operations"] if o["name"] == "storage"]
    assert memory == ["/api/v1/storage/memories"]
    for replayed in ("router_replay", "shadow_dispatch"):
        urls = [o["url"] for o in by_type[replayed]["operations"] if o["name"] == "observability"]
        assert urls == ["/api/v1/observability/replays"]
    assert by_type["semantic-cache"]["alias_of"] == "response_cache"
    assert {p["phase"] for p in answer} == {"request", "response", "storage", "observability"}


@pytest.mark.slow
async def test_a_descriptor_carries_its_schema_and_unknown_types_are_404(harness: Harness) -> None:
    async with harness.client() as client:
        typed = (await client.get("/api/v1/plugins/tool_selection")).json()
        untyped = (await client.get("/api/v1/plugins/image_gen")).json()
        missing = await client.get("/api/v1/plugins/teleport")
    assert set(typed["configuration_schema"]["properties"]) >= {
        "top_k",
        "similarity_threshold",
        "fallback_to_empty",
    }
    assert untyped["configuration_schema"]["additionalProperties"] is True
    assert missing.status_code == 404 and error_code(missing) == "NOT_FOUND"
    assert set(missing.json()["error"]) >= {"code", "message", "timestamp"}


@pytest.mark.slow
async def test_bindings_by_scope(harness: Harness) -> None:
    async with harness.client() as client:
        every = (await client.get("/api/v1/plugins/tool_selection/bindings")).json()
        scoped = (
            await client.get("/api/v1/plugins/tool_selection/bindings", params={"recipe": "travel"})
        ).json()
        disabled = (
            await client.get("/api/v1/plugins/system_prompt/bindings", params={"decision": "math"})
        ).json()
        rag = (await client.get("/api/v1/plugins/rag/bindings", params={"recipe": "default"})).json()
        none = (await client.get("/api/v1/plugins/fast_response/bindings")).json()
        no_recipe = await client.get("/api/v1/plugins/rag/bindings", params={"recipe": "nope"})
        no_decision = await client.get("/api/v1/plugins/rag/bindings", params={"decision": "nope"})
    assert [(b["recipe"], b["decision"]) for b in every["bindings"]] == [
        ("default", "math"),
        ("travel", "trips"),
    ]
    assert [(b["recipe"], b["decision"]) for b in scoped["bindings"]] == [("travel", "trips")]
    first = every["bindings"][0]
    assert (
        first["declared_enabled"] and first["reachability"] == "configured" and not first["runtime_inspected"]
    )
    assert [d["name"] for d in first["dependencies"]] == ["embedding"]
    assert disabled["bindings"][0]["declared_enabled"] is False
    assert disabled["bindings"][0]["reachability"] == "disabled"
    assert rag["bindings"][0]["reachability"] == "configured"  # rag is applied (app/pipeline/rag.py)
    assert [d["name"] for d in rag["bindings"][0]["dependencies"]] == ["vector_store"]
    assert none["bindings"] == [] and none["runtime_inspected"] is False
    assert no_recipe.status_code == 404 and error_code(no_recipe) == "RECIPE_NOT_FOUND"
    assert no_decision.status_code == 404 and error_code(no_decision) == "NOT_FOUND"


async def preview(client: Any, plugin_type: str, body: dict[str, Any]) -> Any:
    return await client.post(f"/api/v1/plugins/{plugin_type}/preview", json=body)


@pytest.mark.slow
async def test_configuration_previews_default_to_preview_and_persist_nothing(harness: Harness) -> None:
    sample = {"messages": [USER], "max_tokens": 9000, "logprobs": True}
    async with harness.client() as client:
        before = (await client.get("/api/v1/config/versions")).json()
        prompt = (
            await preview(client, "system_prompt", {"binding": {"decision": "math"}, "request": sample})
        ).json()
        params = await preview(
            client,
            "request_params",
            {"configuration": {"blocked_params": ["logprobs"], "max_tokens_limit": 512}, "request": sample},
        )
        headers = await preview(
            client,
            "header_mutation",
            {
                "configuration": {"add": [{"name": "x-team", "value": "a"}], "delete": ["x-drop"]},
                "headers": {"X-Drop": "1"},
            },
        )
        fast = (await preview(client, "fast_response", {"configuration": {"message": "closed"}})).json()
        after = (await client.get("/api/v1/config/versions")).json()
    assert before == after
    assert prompt["mode"] == "preview" and prompt["persisted"] is False and prompt["backend_calls"] == 0
    assert prompt["enabled"] is False and prompt["result"]["messages"][0] == {
        "role": "system",
        "content": "Be exact.",
    }
    assert params.status_code == 200
    assert (
        params.json()["result"]["request"]["max_tokens"] == 512
        and "logprobs" not in params.json()["result"]["request"]
    )
    assert headers.json()["result"] == {"headers": {"x-team": "a"}, "removed": ["x-drop"]}
    assert fast["selection_status"] == "not_required" and fast["selection_method"] == "fast_response"
    assert "selected_model" not in fast
    assert fast["result"]["response"]["choices"][0]["message"]["content"] == "closed"


@pytest.mark.slow
async def test_tool_previews_need_a_binding_and_probe_is_explicit(harness: Harness) -> None:
    sample = {"messages": [USER], "tools": TOOLS}
    embed: CountingEmbed = harness.parts.embed  # type: ignore[assignment]  # the fixture's fake
    async with harness.client() as client:
        candidate = await preview(client, "tools", {"configuration": {"deny": ["x"]}, "request": sample})
        static = (await preview(client, "tools", {"binding": {"decision": "math"}, "request": sample})).json()
        unprobed = (
            await preview(client, "tool_selection", {"binding": {"decision": "math"}, "request": sample})
        ).json()
        assert embed.calls == []  # preview mode never calls the encoder
        probed = (
            await preview(
                client,
                "tool_selection",
                {"binding": {"decision": "math"}, "request": sample, "mode": "probe"},
            )
        ).json()
        no_probe = await preview(client, "system_prompt", {"binding": {"decision": "math"}, "mode": "probe"})
    assert candidate.status_code == 400 and error_code(candidate) == "INVALID_INPUT"
    assert (
        static["result"]["removed_by_policy"] == ["delete_file"] and static["result"]["tools_selected"] == 4
    )
    assert unprobed["result"]["method"] == "requires_probe" and unprobed["backend_calls"] == 0
    assert probed["mode"] == "probe" and probed["persisted"] is False and probed["backend_calls"] == 2
    assert probed["result"]["kept"] == ["get_weather", "search_flights"]
    assert no_probe.status_code == 400


@pytest.mark.slow
async def test_probe_without_an_encoder_and_rag_probe_are_503(harness: Harness) -> None:
    bare = Harness(plugin_document())
    async with bare.client() as client:
        no_encoder = await preview(
            client,
            "tool_selection",
            {"binding": {"decision": "math"}, "request": {"messages": [USER]}, "mode": "probe"},
        )
    async with harness.client() as client:
        rag_probe = await preview(client, "rag", {"binding": {"decision": "math"}, "mode": "probe"})
        rag = (
            await preview(
                client,
                "rag",
                {
                    "binding": {"decision": "math"},
                    "supplied_context": ["Doc A."],
                    "request": {"messages": [USER]},
                },
            )
        ).json()
    assert no_encoder.status_code == 503 and error_code(no_encoder) == "MODEL_NOT_LOADED"
    # the harness has no storage service: the probe cannot search
    assert rag_probe.status_code == 503 and error_code(rag_probe) == "SERVICE_UNAVAILABLE"
    assert "Doc A." in rag["result"]["injected_context"] and rag["result"]["messages"][0]["role"] == "system"


@pytest.mark.slow
async def test_answer_check_previews_apply_the_policy_and_probes_run_the_detectors(harness: Harness) -> None:
    math = {"decision": "math"}
    async with harness.client() as client:
        risky = await preview(client, "response_jailbreak", {"binding": math, "conditions": {"score": 0.9}})
        calm = await preview(client, "response_jailbreak", {"binding": math, "conditions": {"score": 0.2}})
        unsupported = await preview(
            client, "hallucination", {"binding": math, "conditions": {"unsupported_sentences": 2}}
        )
        no_conditions = await preview(client, "hallucination", {"binding": math})
        candidate = await preview(
            client, "hallucination", {"configuration": {}, "conditions": {"support": 0.1}}
        )
        probed = await preview(
            client,
            "hallucination",
            {
                "binding": math,
                "mode": "probe",
                "answer": "The Louvre opened its glass pyramid entrance in 1989, designed by the architect Pei.",
                "supplied_context": ["The Eiffel Tower is a wrought-iron tower in Paris, completed in 1889."],
            },
        )
        no_answer = await preview(client, "hallucination", {"binding": math, "mode": "probe"})
    assert risky.status_code == 200 and risky.json()["result"]["action"] == "block"
    assert risky.json()["backend_calls"] == 0 and risky.json()["persisted"] is False
    assert calm.json()["result"]["outcome"]["flagged"] is False
    assert unsupported.json()["result"]["outcome"]["flagged"] is True
    assert unsupported.json()["result"]["action"] == "header"
    assert no_conditions.status_code == 400 and candidate.status_code == 400  # binding required
    body = probed.json()
    assert probed.status_code == 200, body
    assert body["mode"] == "probe" and body["backend_calls"] == 1
    assert body["result"]["outcome"]["check"] == "hallucination", body
    assert body["result"]["outcome"]["flagged"] is True, body["result"]["outcome"]
    assert no_answer.status_code == 400


def test_every_previewable_type_has_a_preview() -> None:
    # context_compression's preview is its own route (routes/compression.py)
    assert set(PREVIEWS) == PREVIEW_TYPES - {"context_compression"}


@pytest.mark.slow
async def test_bad_bindings_are_404_and_bad_bodies_400(harness: Harness) -> None:
    async with harness.client() as client:
        no_decision = await preview(client, "tools", {"binding": {"decision": "nope"}})
        no_recipe = await preview(client, "tools", {"binding": {"recipe": "nope", "decision": "math"}})
        not_bound = await preview(client, "fast_response", {"binding": {"decision": "math"}})
        unknown = await preview(client, "teleport", {"configuration": {}})
        both = await preview(client, "system_prompt", {"configuration": {}, "binding": {"decision": "math"}})
        bad = await preview(client, "system_prompt", {"configuration": {"system_prompt": ""}})
        no_preview = await preview(client, "pii", {"configuration": {}})
    assert no_decision.status_code == 404 and no_recipe.status_code == 404 and not_bound.status_code == 404
    assert unknown.status_code == 404
    assert {both.status_code, bad.status_code, no_preview.status_code} == {400}


async def test_permissions_when_auth_is_on() -> None:
    tokens = {
        "mode": "bearer",
        "tokens": [
            {"name": "cfg", "token_env": "T_CFG", "permissions": ["config.read"]},
            {"name": "data", "token_env": "T_DATA", "permissions": ["data.read"]},
        ],
    }
    h = Harness(with_auth(plugin_document(), tokens), environ={"T_CFG": "cfg-tok", "T_DATA": "data-tok"})
    rag = {"binding": {"decision": "math"}, "supplied_context": ["x"]}
    tools = {"binding": {"decision": "math"}, "request": {"tools": TOOLS}}
    async with h.client() as anonymous, h.client("cfg-tok") as cfg, h.client("data-tok") as data:
        assert (await anonymous.get("/api/v1/plugins")).status_code == 401
        assert (await preview(anonymous, "tools", tools)).status_code == 401
        assert (await cfg.get("/api/v1/plugins")).status_code == 200
        assert (await data.get("/api/v1/plugins")).status_code == 403
        assert (await preview(cfg, "tools", tools)).status_code == 200
        assert (await preview(data, "tools", tools)).status_code == 403
        denied = await preview(cfg, "rag", rag)
        assert denied.status_code == 403 and error_code(denied) == "FORBIDDEN"
        assert (await preview(data, "rag", rag)).status_code == 200
