"""Recipes and entrypoints: validation (paths under recipes[i]) and routing by entrypoint
in the pipeline (no Ray, keyword-only signals: no encoder)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.config import ConfigError, parse_config
from app.config.recipes import entrypoints_of, recipe_names, recipe_routing
from app.pipeline import RouterPipeline
from app.pipeline.plan import CompletionReport


def document() -> dict[str, Any]:
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "small"},
            "models": [
                {"name": "small", "backend_refs": [{"endpoint": "127.0.0.1:8000"}]},
                {"name": "large", "backend_refs": [{"endpoint": "127.0.0.1:8001"}]},
            ],
        },
        "routing": {
            "signals": {"keywords": [{"name": "urgent", "keywords": ["urgent"]}]},
            "decisions": [
                {
                    "name": "urgent_route",
                    "rules": {"type": "keyword", "name": "urgent"},
                    "modelRefs": [{"model": "large"}],
                }
            ],
        },
        "recipes": [
            {
                "name": "coder",
                "routing": {
                    "signals": {"keywords": [{"name": "code", "keywords": ["python"]}]},
                    "decisions": [
                        {
                            "name": "code_route",
                            "rules": {"type": "keyword", "name": "code"},
                            "modelRefs": [{"model": "small"}],
                            "plugins": [{"type": "router_replay", "configuration": {"enabled": True}}],
                        }
                    ],
                },
            }
        ],
        "entrypoints": [{"model_names": ["coder-auto", "code"], "recipe": "coder"}],
    }


def rejected(mutate) -> list[tuple[str, str]]:
    doc = document()
    mutate(doc)
    with pytest.raises(ConfigError) as exc:
        parse_config(doc)
    return [(issue.path, issue.code) for issue in exc.value.issues]


def test_a_valid_document_lists_its_recipes():
    config = parse_config(document()).config
    assert recipe_names(config) == ["default", "coder"]
    assert recipe_routing(config, "default") is config.routing
    routing = recipe_routing(config, "coder")
    assert routing is not None and routing.decisions[0].name == "code_route"
    assert recipe_routing(config, "nope") is None
    assert entrypoints_of(config, "coder") == ["coder-auto", "code"]


REJECTIONS = [
    (
        "recipe decision names an undefined signal",
        lambda d: d["recipes"][0]["routing"]["decisions"][0]["rules"].update(name="urgent"),
        ("recipes[0].routing.decisions[0].rules.name", "unknown_signal"),
    ),
    (
        "recipe modelRef unknown",
        lambda d: d["recipes"][0]["routing"]["decisions"][0]["modelRefs"][0].update(model="gpt-9"),
        ("recipes[0].routing.decisions[0].modelRefs[0].model", "unknown_model"),
    ),
    (
        "duplicate recipe",
        lambda d: d["recipes"].append(copy.deepcopy(d["recipes"][0])),
        ("recipes[1].name", "duplicate_name"),
    ),
    (
        "default is reserved",
        lambda d: d["recipes"][0].update(name="default"),
        ("recipes[0].name", "reserved_name"),
    ),
    (
        "unknown recipe",
        lambda d: d["entrypoints"][0].update(recipe="cooker"),
        ("entrypoints[0].recipe", "unknown_recipe"),
    ),
    (
        "model name used twice",
        lambda d: d["entrypoints"].append({"model_names": ["code"], "recipe": "coder"}),
        ("entrypoints[1].model_names[0]", "duplicate_name"),
    ),
    (
        "collides with a provider model",
        lambda d: d["entrypoints"][0]["model_names"].append("large"),
        ("entrypoints[0].model_names[2]", "name_conflict"),
    ),
    (
        "collides with an auto name",
        lambda d: d["entrypoints"][0]["model_names"].append("MoM"),
        ("entrypoints[0].model_names[2]", "name_conflict"),
    ),
]


@pytest.mark.parametrize(("mutate", "expected"), [r[1:] for r in REJECTIONS], ids=[r[0] for r in REJECTIONS])
def test_rejections_name_their_path(mutate, expected):
    assert expected in rejected(mutate)


def test_a_recipe_name_must_be_a_slug():
    issues = rejected(lambda d: d["recipes"][0].update(name="Has Spaces"))
    assert any(path == "recipes[0].name" for path, _ in issues)


def chat(model: str, text: str) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}]}


@pytest.fixture
def pipeline() -> RouterPipeline:
    return RouterPipeline(parse_config(document()).config)


async def test_an_entrypoint_routes_by_its_recipe(pipeline):
    plan = await pipeline.route(chat("coder-auto", "write python please"))
    assert plan.auto and plan.recipe == "coder"
    assert (plan.decision, plan.selected_model) == ("code_route", "small")
    assert plan.response_headers["x-vsr-selected-recipe"] == "coder"
    # the default recipe's keyword is not evaluated for this recipe
    urgent = await pipeline.route(chat("code", "urgent: python"))
    assert urgent.decision == "code_route"
    assert {m.name for m in urgent.signals.matches} == {"code"}


async def test_mom_keeps_the_default_recipe(pipeline):
    plan = await pipeline.route(chat("MoM", "urgent python"))
    assert (plan.recipe, plan.decision, plan.selected_model) == ("default", "urgent_route", "large")
    assert plan.response_headers["x-vsr-selected-recipe"] == "default"
    explicit = await pipeline.route(chat("small", "python"))
    assert explicit.recipe is None and "x-vsr-selected-recipe" not in explicit.response_headers


async def test_replay_records_the_recipe(pipeline):
    records: list[dict[str, Any]] = []
    pipeline.services.record_replay = records.append
    plan = await pipeline.route(chat("coder-auto", "python"))
    assert plan.replay is not None  # the recipe's decision carries router_replay
    await pipeline.complete(plan, CompletionReport(status=200, model="small", response={"choices": []}))
    assert records and records[0]["recipe"] == "coder"


async def test_a_hot_reload_recompiles_the_recipes(pipeline):
    doc = document()
    doc["recipes"][0]["routing"]["decisions"][0]["modelRefs"] = [{"model": "large"}]
    await pipeline.update_config(parse_config(doc).config)
    plan = await pipeline.route(chat("coder-auto", "python"))
    assert plan.selected_model == "large"
