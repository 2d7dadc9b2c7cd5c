"""Recipe routes (docs/management-api.md): list, get, PUT (create/replace, If-Match), validate, DELETE
(unreferenced, referenced, unknown, default), each PUT/DELETE one versioned config mutation,
and a PUT recipe routing an entrypoint model at once (create_app over an in-process pipeline)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.unit.management.test_management_support import Harness, base_document, error_code, etag

RECIPES = "/api/v1/config/recipes"


def coder_routing(model: str = "small", word: str = "python") -> dict[str, Any]:
    return {
        "signals": {"keywords": [{"name": "code_kw", "keywords": [word]}]},
        "decisions": [
            {
                "name": "code_route",
                "rules": {"type": "keyword", "name": "code_kw"},
                "modelRefs": [{"model": model}],
            }
        ],
    }


def document(base_url: str = "http://127.0.0.1:9/v1") -> dict[str, Any]:
    doc = base_document(base_url)
    doc["recipes"] = [
        {"name": "coder", "description": "code questions", "routing": coder_routing()},
        {"name": "spare", "routing": coder_routing("big", "rust")},
    ]
    doc["entrypoints"] = [{"model_names": ["coder-auto"], "recipe": "coder"}]
    return doc


async def preview(client, model: str, text: str) -> dict[str, Any]:
    body = {"model": model, "messages": [{"role": "user", "content": text}]}
    r = await client.post("/api/v1/routing/preview", json=body)
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


@pytest.mark.slow
async def test_list_has_default_then_named_recipes_with_entrypoints_and_the_etag():
    async with Harness(document()).client() as c:
        tag = await etag(c)
        r = await c.get(RECIPES)
    assert r.status_code == 200, r.text
    body = r.json()
    assert r.headers["etag"] == body["etag"] == tag
    assert [v["name"] for v in body["recipes"]] == ["default", "coder", "spare"]
    default, coder, spare = body["recipes"]
    assert default["default"] is True and default["decisions"] == ["math"] and default["entrypoints"] == []
    assert coder["default"] is False and coder["description"] == "code questions"
    assert coder["entrypoints"] == ["coder-auto"] and coder["decisions"] == ["code_route"]
    assert spare["entrypoints"] == [] and spare["routing"]["signals"]["keywords"][0]["keywords"] == ["rust"]
    assert body["entrypoints"] == [{"model_names": ["coder-auto"], "recipe": "coder"}]


@pytest.mark.slow
async def test_get_one_recipe_default_and_unknown():
    async with Harness(document()).client() as c:
        coder = await c.get(f"{RECIPES}/coder")
        default = await c.get(f"{RECIPES}/default")
        missing = await c.get(f"{RECIPES}/nope")
    assert coder.status_code == 200 and coder.json()["routing"] == coder_routing()
    assert coder.headers["etag"]
    assert default.json()["routing"]["decisions"][0]["name"] == "math"
    assert missing.status_code == 404 and error_code(missing) == "RECIPE_NOT_FOUND"
    assert "coder" in missing.json()["error"]["message"]


@pytest.mark.slow
async def test_put_creates_then_replaces_as_config_versions_with_if_match():
    h = Harness(document())
    async with h.client() as c:
        tag = await etag(c)
        missing = await c.put(f"{RECIPES}/writer", json={"routing": coder_routing("big", "poem")})
        created = await c.put(
            f"{RECIPES}/writer",
            json={"description": "prose", "routing": coder_routing("big", "poem")},
            headers={"If-Match": tag},
        )
        assert created.status_code == 200, created.text
        stale = await c.put(f"{RECIPES}/writer", json={"routing": coder_routing()}, headers={"If-Match": tag})
        replaced = await c.put(
            f"{RECIPES}/writer",
            json={"routing": coder_routing("small", "essay")},
            headers={"If-Match": created.headers["etag"]},
        )
        writer = (await c.get(f"{RECIPES}/writer")).json()
        versions = (await c.get("/api/v1/config/versions")).json()["versions"]
        audit = (await c.get("/api/v1/observability/audit", params={"action": "recipe.put"})).json()[
            "entries"
        ]
    assert missing.status_code == 428 and error_code(missing) == "PRECONDITION_REQUIRED"
    assert created.json()["config_version"] == 2 and created.json()["status"] == "active"
    assert stale.status_code == 412 and error_code(stale) == "CONFIG_CHANGED"
    assert stale.headers["etag"] == created.headers["etag"]
    assert replaced.status_code == 200 and replaced.json()["config_version"] == 3
    assert writer["description"] is None  # replaced whole: the new body has none
    assert writer["routing"]["signals"]["keywords"][0]["keywords"] == ["essay"]
    assert [v["source"] for v in versions[:2]] == ["api.recipe", "api.recipe"]
    assert [e["status"] for e in audit] == [428, 200, 412, 200]
    assert [r.name for r in h.management.config.recipes] == ["coder", "spare", "writer"]


async def test_put_invalid_recipe_is_400_with_paths_and_writes_nothing():
    h = Harness(document())
    async with h.client() as c:
        tag = await etag(c)
        bad = await c.put(
            f"{RECIPES}/coder", json={"routing": coder_routing("no-such-model")}, headers={"If-Match": tag}
        )
        renamed = await c.put(
            f"{RECIPES}/coder", json={"name": "other", "routing": {}}, headers={"If-Match": tag}
        )
        unknown_field = await c.put(
            f"{RECIPES}/coder", json={"routing": {}, "x": 1}, headers={"If-Match": tag}
        )
        not_slug = await c.put(f"{RECIPES}/Not_A_Slug", json={"routing": {}}, headers={"If-Match": tag})
        after = await etag(c)
    assert bad.status_code == 400 and error_code(bad) == "INVALID_CONFIG"
    paths = [r.get("path", "") for r in bad.json()["error"]["details"]["reasons"]]
    assert any(p.startswith("recipes[0].routing.decisions[0].modelRefs[0]") for p in paths), paths
    assert renamed.status_code == 400 and error_code(renamed) == "INVALID_INPUT"
    assert unknown_field.status_code == 400 and error_code(unknown_field) == "INVALID_INPUT"
    assert not_slug.status_code == 400 and error_code(not_slug) == "INVALID_CONFIG"
    assert after == tag


@pytest.mark.slow
async def test_validate_put_and_delete_without_writing():
    async with Harness(document()).client() as c:
        tag = await etag(c)
        ok = await c.post(
            f"{RECIPES}/validate", json={"name": "writer", "recipe": {"routing": coder_routing("big")}}
        )
        same = await c.post(
            f"{RECIPES}/validate",
            json={"name": "coder", "recipe": {"description": "code questions", "routing": coder_routing()}},
        )
        bad = await c.post(
            f"{RECIPES}/validate",
            json={"name": "writer", "recipe": {"routing": coder_routing("no-such-model")}},
        )
        in_use = await c.post(f"{RECIPES}/validate", json={"name": "coder", "action": "delete"})
        gone = await c.post(f"{RECIPES}/validate", json={"name": "nope", "action": "delete"})
        deletable = await c.post(f"{RECIPES}/validate", json={"name": "spare", "action": "delete"})
        malformed = await c.post(f"{RECIPES}/validate", json={"name": "writer"})
        after = await etag(c)
    body = ok.json()
    assert ok.status_code == 200 and body["valid"] is True and body["changed"] is True
    assert body["current_etag"] == tag and body["candidate_etag"] not in (None, tag)
    assert body["recipe"]["name"] == "writer" and body["recipe"]["decisions"] == ["code_route"]
    assert same.json()["valid"] is True and same.json()["changed"] is False
    assert same.json()["candidate_etag"] == tag
    invalid = bad.json()
    assert invalid["valid"] is False and invalid["candidate_etag"] is None
    # the new recipe is the third: its errors are under recipes[2]
    assert any(
        r.get("path", "").startswith("recipes[2].routing.decisions[0].modelRefs[0]")
        for r in invalid["reasons"]
    )
    assert in_use.json()["valid"] is False
    assert in_use.json()["reasons"][0]["code"] == "recipe_in_use"
    assert in_use.json()["reasons"][0]["path"] == "entrypoints[0].recipe"
    assert gone.json()["reasons"][0]["code"] == "recipe_not_found"
    assert deletable.json()["valid"] is True and deletable.json()["recipe"] is None
    assert malformed.status_code == 400 and error_code(malformed) == "INVALID_INPUT"
    assert after == tag


@pytest.mark.slow
async def test_delete_unreferenced_referenced_unknown_and_default():
    h = Harness(document())
    async with h.client() as c:
        tag = await etag(c)
        no_match = await c.delete(f"{RECIPES}/spare")
        in_use = await c.delete(f"{RECIPES}/coder", headers={"If-Match": tag})
        unknown = await c.delete(f"{RECIPES}/nope", headers={"If-Match": tag})
        default = await c.delete(f"{RECIPES}/default", headers={"If-Match": tag})
        deleted = await c.delete(f"{RECIPES}/spare", headers={"If-Match": tag})
        again = await c.get(f"{RECIPES}/spare")
        names = [v["name"] for v in (await c.get(RECIPES)).json()["recipes"]]
    assert no_match.status_code == 428
    assert in_use.status_code == 409 and error_code(in_use) == "RECIPE_IN_USE"
    assert in_use.json()["error"]["details"]["entrypoints"] == ["coder-auto"]
    assert unknown.status_code == 404 and error_code(unknown) == "RECIPE_NOT_FOUND"
    assert default.status_code == 409 and error_code(default) == "RECIPE_RESERVED"
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["config_version"] == 2
    assert again.status_code == 404 and names == ["default", "coder"]
    assert [r.name for r in h.management.config.recipes] == ["coder"]


@pytest.mark.slow
async def test_a_put_recipe_routes_its_entrypoint_model_at_once():
    with FakeUpstream(name="up") as upstream:
        h = Harness(document(upstream.base_url))
        async with h.client() as c:
            before = await preview(c, "coder-auto", "a python question")
            tag = await etag(c)
            r = await c.put(
                f"{RECIPES}/coder",
                json={"routing": coder_routing("big", "haskell")},
                headers={"If-Match": tag},
            )
            assert r.status_code == 200, r.text
            after = await preview(c, "coder-auto", "a haskell question")
            old_word = await preview(c, "coder-auto", "a python question")
            mom = await preview(c, "MoM", "a haskell question")
            chat = await c.post(
                "/v1/chat/completions",
                json={"model": "coder-auto", "messages": [{"role": "user", "content": "a haskell question"}]},
            )
    assert (before["recipe"], before["decision"], before["selected_model"]) == (
        "coder",
        "code_route",
        "small",
    )
    assert (after["recipe"], after["decision"], after["selected_model"]) == ("coder", "code_route", "big")
    assert old_word["decision"] is None
    assert mom["recipe"] == "default" and mom["decision"] is None
    assert chat.status_code == 200, chat.text
    assert chat.headers["x-vsr-selected-recipe"] == "coder"
    assert chat.headers["x-vsr-selected-model"] == "big"
    assert upstream.requests[-1].body["model"] == "big"


@pytest.mark.slow
async def test_put_default_replaces_the_top_level_routing():
    h = Harness(document())
    async with h.client() as c:
        tag = await etag(c)
        described = await c.put(
            f"{RECIPES}/default", json={"description": "x", "routing": {}}, headers={"If-Match": tag}
        )
        r = await c.put(
            f"{RECIPES}/default", json={"routing": coder_routing("big", "sql")}, headers={"If-Match": tag}
        )
        assert r.status_code == 200, r.text
        mom = await preview(c, "MoM", "an sql query")
        config = (await c.get("/api/v1/config")).json()
    assert described.status_code == 400 and error_code(described) == "INVALID_INPUT"
    assert mom["decision"] == "code_route" and mom["selected_model"] == "big"
    assert config["routing"] == coder_routing("big", "sql")
    assert copy.deepcopy(config["recipes"][0]["routing"]) == coder_routing()
