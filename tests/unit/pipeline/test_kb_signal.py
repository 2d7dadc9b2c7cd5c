"""The `kb` signal family: rules scored against knowledge bases of the management store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.config.errors import ConfigError
from app.config.loader import parse_config
from app.config.signals import KnowledgeBaseSignal
from app.pipeline.signals.base import SignalContext
from app.pipeline.signals.kb import KnowledgeBaseEvaluator, KnowledgeBaseFeed
from app.pipeline.signals.kb_data import KbEntry
from app.state.shared_store import ManagementStoreSettings
from app.storage.knowledge_bases import KnowledgeBaseService, KnowledgeBaseStore, open_kb_store
from tests.unit.storage.test_knowledge_bases import GatedEmbed, fake_embed

BILLING = ["refund my last invoice", "why was my card charged twice", "update the billing address"]
TECH = ["the app crashes on start", "cannot log in after the update", "error 500 when saving"]


def kb_entries(texts: list[str], label: str) -> list[KbEntry]:
    return [KbEntry(text=t, label=label) for t in texts]


async def service_with_kb() -> KnowledgeBaseService:
    service = KnowledgeBaseService(KnowledgeBaseStore(), embed=fake_embed)
    await service.create("support", None, kb_entries(BILLING, "billing") + kb_entries(TECH, "tech"))
    await service.drain()
    return service


def rule(**fields: Any) -> KnowledgeBaseSignal:
    return KnowledgeBaseSignal(**{"name": "r", "kb": "support", "threshold": 0.9, **fields})


async def judge(evaluator: KnowledgeBaseEvaluator, text: str, names: set[str]) -> dict[str, Any]:
    ctx = SignalContext([{"role": "user", "content": text}], embed=fake_embed)
    return {m.name: m for m in await evaluator.evaluate(ctx, frozenset(names))}


@pytest.mark.parametrize("method", ["max", "knn"])
async def test_the_nearest_label_is_the_value_and_labels_filter(method: str) -> None:
    service = await service_with_kb()
    feed = KnowledgeBaseFeed(service.store, refresh_s=0)
    rules = [
        rule(name="any", method=method, top_k=1),
        rule(name="tech_only", labels=["tech"], method=method, top_k=1),
    ]
    evaluator = KnowledgeBaseEvaluator(rules, feed)
    billing = await judge(evaluator, BILLING[1], {"any", "tech_only"})
    assert billing["any"].matched and billing["any"].detail["label"] == "billing"
    assert billing["any"].confidence == pytest.approx(1.0, abs=1e-5)
    assert billing["any"].detail["nearest_text"] == BILLING[1]
    assert not billing["tech_only"].matched and billing["tech_only"].error is None
    tech = await judge(evaluator, TECH[0], {"tech_only"})
    assert tech["tech_only"].matched and tech["tech_only"].detail["label"] == "tech"
    unrelated = await judge(evaluator, "a poem about the sea", {"any"})
    assert not unrelated["any"].matched  # the fake's random vectors are far from every exemplar


async def test_an_unknown_or_pending_base_does_not_match_and_warns() -> None:
    service = await service_with_kb()
    evaluator = KnowledgeBaseEvaluator(
        [rule(name="ghost", kb="nope")], KnowledgeBaseFeed(service.store, refresh_s=0)
    )
    ghost = (await judge(evaluator, BILLING[0], {"ghost"}))["ghost"]
    assert not ghost.matched and ghost.error is None and "nope" in ghost.detail["warning"]
    without_store = KnowledgeBaseEvaluator([rule()], None)
    errored = (await judge(without_store, BILLING[0], {"r"}))["r"]
    assert errored.error and not errored.matched


async def test_an_update_serves_the_previous_version_until_active() -> None:
    service = await service_with_kb()
    feed = KnowledgeBaseFeed(service.store, refresh_s=0)
    evaluator = KnowledgeBaseEvaluator([rule()], feed)
    assert (await judge(evaluator, BILLING[0], {"r"}))["r"].detail["label"] == "billing"
    gated = GatedEmbed()
    service.embed = gated
    await service.update("support", None, kb_entries(BILLING, "money") + kb_entries(TECH, "tech"))
    pending = (await judge(evaluator, BILLING[0], {"r"}))["r"]
    assert pending.matched and pending.detail["label"] == "billing"  # the active version still serves
    gated.release()
    await service.drain()
    assert (await judge(evaluator, BILLING[0], {"r"}))["r"].detail["label"] == "money"


def document(conditions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "m"},
            "models": [{"name": "m", "backend_refs": [{"base_url": "http://127.0.0.1:9/v1"}]}],
        },
        "routing": {
            "signals": {"kb": [{"name": "support_billing", "kb": "support", "labels": ["billing"]}]},
            "decisions": [
                {
                    "name": "d",
                    "priority": 1,
                    "rules": {"operator": "AND", "conditions": conditions},
                    "modelRefs": [{"model": "m"}],
                }
            ],
        },
    }


def test_config_accepts_kb_rules_and_rejects_an_unknown_rule_with_its_path() -> None:
    good = parse_config(document([{"type": "kb", "name": "support_billing"}])).config
    assert good.routing.signals.kb[0].method == "max"
    with pytest.raises(ConfigError) as bad:
        parse_config(document([{"type": "kb", "name": "nope"}]))
    assert [i.path for i in bad.value.issues] == ["routing.decisions[0].rules.conditions[0].name"]


async def test_a_router_feed_reads_what_an_ingress_wrote_to_the_file_store(tmp_path: Path) -> None:
    settings = ManagementStoreSettings()
    ingress = KnowledgeBaseService(open_kb_store(settings, "app", tmp_path), embed=fake_embed)
    feed = KnowledgeBaseFeed(open_kb_store(settings, "app", tmp_path), refresh_s=0)
    evaluator = KnowledgeBaseEvaluator([rule()], feed)
    assert "warning" in (await judge(evaluator, TECH[2], {"r"}))["r"].detail
    await ingress.create("support", None, kb_entries(BILLING, "billing") + kb_entries(TECH, "tech"))
    await ingress.drain()
    found = (await judge(evaluator, TECH[2], {"r"}))["r"]
    assert found.matched and found.detail["label"] == "tech"
