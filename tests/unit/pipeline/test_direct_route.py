"""The front door's own route for an explicit model (app/pipeline/direct_route.py): the plan a
Router replica would make, over the live config, and no plan for an auto request."""

from __future__ import annotations

import copy
import random

import pytest

from app.common.errors import SvcError
from app.config.document import RouterConfig
from app.keys.grant import ModelGrant
from app.pipeline import ModelNotFoundError, RouterPipeline
from app.pipeline.direct_route import DirectRouter
from app.pipeline.metrics import RouterMetrics
from app.pipeline.plan import ProviderState
from tests.unit.pipeline.test_pipeline import base_document, chat


def config_of(doc: dict) -> RouterConfig:
    return RouterConfig.model_validate(doc)


def with_entrypoint(doc: dict) -> dict:
    doc = copy.deepcopy(doc)
    doc["recipes"] = [{"name": "quick", "routing": copy.deepcopy(doc["routing"])}]
    doc["entrypoints"] = [{"model_names": ["quick-auto"], "recipe": "quick"}]
    return doc


async def test_an_explicit_plan_is_the_routers_own() -> None:
    doc = base_document()
    # two backends, so the backend order depends on the rng (both sides get the same seed)
    doc["providers"]["models"][2]["backend_refs"].append({"endpoint": "127.0.0.1:8002"})
    config = config_of(doc)
    tie = ProviderState(model="backup")
    for seed in range(6):
        request = chat("urgent! fix this now", model="backup", max_tokens=5000)
        headers = {"X-Request-Id": "ignored", "traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
        router = await RouterPipeline(config, rng=random.Random(seed)).route(
            request, headers, request_id=f"r{seed}", tie=tie
        )
        direct = DirectRouter(lambda: config, RouterMetrics(), random.Random(seed)).route(
            request, headers, f"r{seed}", None, tie
        )
        assert direct is not None
        fields = {"started_at", "router_replica"}
        assert direct.model_dump(exclude=fields) == router.model_dump(exclude=fields)
        assert direct.reason_code == "model_specified" and direct.auto is False and direct.tie == tie


def test_auto_requests_are_left_to_a_router() -> None:
    config = config_of(with_entrypoint(base_document()))
    metrics = RouterMetrics()
    direct = DirectRouter(lambda: config, metrics)
    for model in ("MoM", "auto", "vllm-sr/auto", "quick-auto"):
        assert direct.route(chat("hello", model=model), {}, "r1") is None
    assert direct.route(chat("hello", model="small"), {}, "r2") is not None


def test_refusals_are_the_routers() -> None:
    config = config_of(base_document())
    direct = DirectRouter(lambda: config, RouterMetrics())
    with pytest.raises(ModelNotFoundError) as missing:
        direct.route(chat("hi", model="nope"), {}, "r1")
    assert missing.value.status == 404
    grant = ModelGrant(key_id="k1", models=["small"])
    with pytest.raises(SvcError) as refused:
        direct.route(chat("hi", model="large"), {}, "r2", grant)
    assert refused.value.status == 403 and refused.value.code == "model_not_granted"
    plan = direct.route(chat("hi", model="small"), {}, "r3", grant)
    assert plan is not None and plan.selected_model == "small"


def test_the_live_config_is_read_per_request() -> None:
    doc = base_document()
    current = {"config": config_of(doc)}
    direct = DirectRouter(lambda: current["config"], RouterMetrics())
    first = direct.routes()
    assert direct.routes() is first  # built once per version
    with pytest.raises(ModelNotFoundError):
        direct.route(chat("hi", model="fresh"), {}, "r1")
    doc["providers"]["models"].append({"name": "fresh", "backend_refs": [{"endpoint": "127.0.0.1:8003"}]})
    current["config"] = config_of(doc)  # an activation swapped the version
    plan = direct.route(chat("hi", model="fresh"), {}, "r2")
    assert plan is not None and [t.model for t in plan.candidates] == ["fresh"]
    assert direct.routes() is not first
