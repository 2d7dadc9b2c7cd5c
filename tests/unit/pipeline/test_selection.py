"""Model selection: static/weighted modelRefs, backends, default model, no_route."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from app.common.errors import SvcError
from app.config.document import RouterConfig
from app.pipeline.selection import (
    ModelIndex,
    NoRouteError,
    candidates_for,
    order_model_refs,
    select_for_decision,
    weighted_pick,
)


def config(decisions=(), default_model=None, models=None) -> RouterConfig:
    models = models or [
        {"name": "small", "backend_refs": [{"endpoint": "10.0.0.1:8000"}]},
        {
            "name": "large",
            "provider_model_id": "org/large-70b",
            "backend_refs": [
                {
                    "base_url": "https://api.example.com/v1",
                    "api_key_env": "LARGE_KEY",
                    "extra_headers": {"x-tenant": "t1"},
                }
            ],
        },
        {
            "name": "mid",
            "external_model_ids": {"openai": "mid-alias"},
            "backend_refs": [
                {"name": "a", "endpoint": "10.0.0.2:8000", "weight": 1},
                {"name": "b", "endpoint": "10.0.0.3:8000", "weight": 3},
            ],
        },
        {"name": "nobackend"},
    ]
    return RouterConfig.model_validate(
        {
            "providers": {"defaults": {"default_model": default_model}, "models": models},
            "routing": {"decisions": list(decisions)},
        }
    )


def decision(cfg: RouterConfig, name: str):
    return next(d for d in cfg.routing.decisions if d.name == name)


def test_static_selects_first_ref_and_keeps_the_rest_as_fallbacks():
    cfg = config([{"name": "d", "modelRefs": [{"model": "large"}, {"model": "small"}]}])
    sel = select_for_decision(decision(cfg, "d"), None, ModelIndex(cfg), random.Random(0))
    assert sel.model == "large" and sel.source == "decision"
    assert sel.ref is not None and sel.ref.model == "large"
    assert [t.model for t in sel.candidates] == ["large", "small"]


def test_target_fields_come_from_provider_and_backend():
    cfg = config([{"name": "d", "modelRefs": [{"model": "large"}, {"model": "small"}]}])
    sel = select_for_decision(decision(cfg, "d"), None, ModelIndex(cfg), random.Random(0))
    large, small = sel.candidates
    assert large.upstream_model == "org/large-70b"
    assert large.chat_url == "https://api.example.com/v1/chat/completions"
    assert large.api_key_env == "LARGE_KEY"
    assert large.extra_headers == {"x-tenant": "t1"}
    assert small.upstream_model == "small"
    assert small.chat_url == "http://10.0.0.1:8000/v1/chat/completions"


def test_literal_api_key_becomes_an_auth_header():
    cfg = config(
        models=[
            {
                "name": "m",
                "backend_refs": [
                    {
                        "base_url": "https://x.example",
                        "api_key": "sk-1",
                        "auth_header": "api-key",
                        "auth_prefix": "Key",
                    }
                ],
            }
        ]
    )
    (target,) = candidates_for(["m"], ModelIndex(cfg), random.Random(0))
    assert target.extra_headers == {"api-key": "Key sk-1"}


@pytest.mark.parametrize("api_format", ["messages", "Anthropic"])
def test_literal_api_key_of_a_messages_model_is_sent_as_x_api_key(api_format):
    cfg = config(
        models=[
            {
                "name": "c",
                "api_format": api_format,
                "backend_refs": [{"base_url": "https://x.example", "api_key": "sk-1"}],
            },
            {"name": "o", "backend_refs": [{"base_url": "https://y.example", "api_key": "sk-2"}]},
            {
                "name": "pinned",
                "api_format": "messages",
                "backend_refs": [
                    {
                        "base_url": "https://z.example",
                        "api_key": "sk-3",
                        "extra_headers": {"Anthropic-Version": "2024-01-01"},
                    }
                ],
            },
            {
                "name": "custom",
                "api_format": "messages",
                "backend_refs": [
                    {"base_url": "https://w.example", "api_key": "sk-4", "auth_header": "Authorization"}
                ],
            },
        ]
    )
    index = ModelIndex(cfg)
    (messages,) = candidates_for(["c"], index, random.Random(0))
    assert messages.extra_headers == {"x-api-key": "sk-1", "anthropic-version": "2023-06-01"}
    (chat,) = candidates_for(["o"], index, random.Random(0))
    assert chat.extra_headers == {"Authorization": "Bearer sk-2"}
    (pinned,) = candidates_for(["pinned"], index, random.Random(0))  # the configured version is kept
    assert pinned.extra_headers == {"Anthropic-Version": "2024-01-01", "x-api-key": "sk-3"}
    (custom,) = candidates_for(["custom"], index, random.Random(0))  # an explicit auth_header wins
    assert custom.extra_headers == {"Authorization": "Bearer sk-4"}


def test_weighted_selection_follows_weights_with_seeded_rng():
    cfg = config(
        [
            {
                "name": "d",
                "algorithm": {"type": "weighted"},
                "modelRefs": [{"model": "small", "weight": 1}, {"model": "large", "weight": 3}],
            }
        ]
    )
    d = decision(cfg, "d")
    rng = random.Random(1234)
    firsts = Counter(order_model_refs(d, rng)[0].model for _ in range(4000))
    assert firsts["large"] / 4000 == pytest.approx(0.75, abs=0.03)
    # reproducible: the same seed draws the same sequence
    rng_a, rng_b = random.Random(7), random.Random(7)
    seq_a = [order_model_refs(d, rng_a)[0].model for _ in range(50)]
    seq_b = [order_model_refs(d, rng_b)[0].model for _ in range(50)]
    assert seq_a == seq_b and len(set(seq_a)) == 2


def test_weighted_remaining_refs_follow_in_config_order():
    cfg = config(
        [
            {
                "name": "d",
                "algorithm": {"type": "weighted"},
                "modelRefs": [
                    {"model": "small", "weight": 0},
                    {"model": "mid", "weight": 0},
                    {"model": "large", "weight": 5},
                ],
            }
        ]
    )
    refs = order_model_refs(decision(cfg, "d"), random.Random(3))
    assert [r.model for r in refs] == ["large", "small", "mid"]


def test_weighted_pick_edge_cases():
    assert weighted_pick([0, 0, 0], random.Random(0)) == 0
    assert weighted_pick([0, 2, 0], random.Random(0)) == 1
    counts = Counter(weighted_pick([1, 1], random.Random(i)) for i in range(400))
    assert set(counts) == {0, 1}


def test_static_ignores_weights():
    cfg = config(
        [{"name": "d", "modelRefs": [{"model": "small", "weight": 0}, {"model": "large", "weight": 9}]}]
    )
    assert [r.model for r in order_model_refs(decision(cfg, "d"), random.Random(0))] == ["small", "large"]


def test_several_backends_expand_into_weighted_candidates_of_one_model():
    cfg = config()
    index = ModelIndex(cfg)
    first_hosts = Counter(
        candidates_for(["mid"], index, random.Random(seed))[0].label for seed in range(2000)
    )
    assert first_hosts["mid@10.0.0.3:8000"] / 2000 == pytest.approx(0.75, abs=0.04)
    targets = candidates_for(["mid", "small"], index, random.Random(0))
    assert [t.model for t in targets] == ["mid", "mid", "small"]
    assert len({t.label for t in targets[:2]}) == 2


def test_preferred_endpoints_go_first():
    cfg = config([{"name": "d", "preferred_endpoints": ["a"], "modelRefs": [{"model": "mid"}]}])
    for seed in range(20):
        sel = select_for_decision(decision(cfg, "d"), None, ModelIndex(cfg), random.Random(seed))
        assert [t.label for t in sel.candidates] == ["mid@10.0.0.2:8000", "mid@10.0.0.3:8000"]


def test_external_model_ids_resolve_to_the_provider_model():
    index = ModelIndex(config())
    model = index.get("mid-alias")
    assert model is not None and model.name == "mid"


def test_no_decision_uses_default_model():
    cfg = config(default_model="small")
    sel = select_for_decision(None, cfg.default_model, ModelIndex(cfg), random.Random(0))
    assert sel.model == "small" and sel.source == "default_model" and sel.ref is None


def test_decision_with_unusable_models_falls_back_to_default():
    cfg = config(
        [{"name": "d", "modelRefs": [{"model": "nobackend"}, {"model": "ghost"}]}], default_model="small"
    )
    sel = select_for_decision(decision(cfg, "d"), cfg.default_model, ModelIndex(cfg), random.Random(0))
    assert sel.model == "small" and sel.source == "default_model"


def test_no_decision_and_no_default_is_no_route_400():
    cfg = config()
    with pytest.raises(NoRouteError) as info:
        select_for_decision(None, None, ModelIndex(cfg), random.Random(0))
    err = info.value
    assert isinstance(err, SvcError) and err.status == 400 and err.code == "no_route"
    assert "no default model configured" in err.body()["error"]["message"]


def test_default_model_without_backend_is_no_route():
    cfg = config(default_model="nobackend")
    with pytest.raises(NoRouteError):
        select_for_decision(None, cfg.default_model, ModelIndex(cfg), random.Random(0))


def test_duplicate_model_refs_are_listed_once():
    cfg = config([{"name": "d", "modelRefs": [{"model": "small"}, {"model": "small"}, {"model": "large"}]}])
    sel = select_for_decision(decision(cfg, "d"), None, ModelIndex(cfg), random.Random(0))
    assert [t.model for t in sel.candidates] == ["small", "large"]
