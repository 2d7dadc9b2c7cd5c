"""The `harmful` signal family: config, the evaluator over a fake classifier, decision rules,
the global prompt guard's `harmful` part, and the Guard host over the committed artifact."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from app.config import ConfigError, parse_config
from app.config.document import RouterConfig
from app.config.signals import HARMFUL_CATEGORIES, HarmfulSignal
from app.models.harmful import HarmfulClassifier
from app.pipeline import PipelineServices, RouterPipeline
from app.pipeline.signals.domain import domain_factory
from app.pipeline.signals.harmful import (
    PROMPT_GUARD_RULE,
    HarmfulEvaluator,
    harmful_factory,
    prompt_guard_harmful_rule,
)
from app.pipeline.signals.jailbreak import jailbreak_factory
from app.pipeline.signals.pii import pii_factory
from app.runtime.hosted import Loaded
from app.runtime.hosted_guard import HostedGuard
from app.runtime.signal_engine import SignalItem, SignalRequest, Verdict
from tests.fakes.classifiers import FakeBackend
from tests.unit.api.test_diagnostics import client_for
from tests.unit.pipeline.test_classifier_signals import (
    FakeDomain,
    FakeEmbed,
    FakeEngine,
    FakeGuard,
    FakePII,
    chat,
    ctx_of,
    document,
)


class FakeHarmful(FakeEngine):
    """'grenade' -> violence_weapons 0.9, 'nsfw' -> sexual 0.7, else benign (0.02 spread)."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[dict[str, Any]] = []
        self.fail = fail

    async def classify(self, request: SignalRequest) -> list[SignalItem]:
        self.calls.append(
            {
                "texts": request.texts,
                "vectors": request.vectors,
                "threshold": request.threshold,
                "categories": request.labels,
            }
        )
        if self.fail:
            raise RuntimeError("classifier down")
        threshold = 0.5 if request.threshold is None else request.threshold
        results = self.results(request.texts, threshold, request.labels)
        return [
            SignalItem(
                label=r["category"],
                scores=r["categories"],
                verdict=Verdict(
                    flagged=r["is_harmful"],
                    score=r["score"],
                    confidence=r["confidence"],
                    types=r["detection_types"],
                ),
            )
            for r in results
        ]

    @staticmethod
    def results(texts: list[str], threshold: float, categories: list[str] | None) -> list[dict[str, Any]]:
        out = []
        for text in texts:
            probs = dict.fromkeys(HARMFUL_CATEGORIES, 0.005)
            if "grenade" in text:
                probs["violence_weapons"] = 0.9
            if "nsfw" in text:
                probs["sexual"] = 0.7
            wanted = categories or list(HARMFUL_CATEGORIES)
            score = sum(probs[c] for c in wanted)
            top = max(wanted, key=probs.__getitem__)
            flagged = score >= threshold
            out.append(
                {
                    "is_harmful": flagged,
                    "score": score,
                    "confidence": score if flagged else 1 - score,
                    "category": top,
                    "categories": probs,
                    "detection_types": [top] if flagged else [],
                }
            )
        return out


# ------------------------------------------------------------------ config


def test_rule_defaults_and_unknown_categories_are_rejected() -> None:
    rule = HarmfulSignal(name="h")
    assert (rule.threshold, rule.categories, rule.include_history) == (0.5, [], False)
    with pytest.raises(ValidationError):
        HarmfulSignal(name="h", categories=["weapons"])
    with pytest.raises(ValidationError):
        HarmfulSignal(name="h", threshold=1.5)


def doc_with_harmful(**global_: Any) -> dict[str, Any]:
    doc = document(**global_)
    doc["routing"]["signals"]["harmful"] = [
        {"name": "weapons", "threshold": 0.6, "categories": ["violence_weapons"]},
        {"name": "any_harm"},
    ]
    doc["routing"]["decisions"].insert(
        0,
        {
            "name": "refuse_weapons",
            "priority": 200,
            "rules": {"type": "harmful", "name": "weapons"},
            "plugins": [{"type": "fast_response", "configuration": {"message": "I can't help with that."}}],
        },
    )
    return doc


def test_config_with_harmful_rules_validates() -> None:
    guard = {"enabled": True, "harmful": {"enabled": True, "threshold": 0.7, "categories": ["minors"]}}
    loaded = parse_config(doc_with_harmful(model_catalog={"modules": {"prompt_guard": guard}}))
    assert [r.name for r in loaded.config.routing.signals.harmful] == ["weapons", "any_harm"]
    assert not [w for w in loaded.warnings if "harmful" in w], loaded.warnings


def test_unknown_rule_name_and_bad_guard_settings_are_config_errors() -> None:
    doc = doc_with_harmful()
    doc["routing"]["decisions"][0]["rules"]["name"] = "wepons"
    with pytest.raises(ConfigError):
        parse_config(doc)
    guard = {"enabled": True, "harmful": {"categories": ["x"]}}
    with pytest.raises(ConfigError) as exc:
        parse_config(doc_with_harmful(model_catalog={"modules": {"prompt_guard": guard}}))
    assert any("prompt_guard.harmful" in issue.path for issue in exc.value.issues), exc.value


# ------------------------------------------------------------------ evaluator


async def test_rule_passes_threshold_categories_and_the_shared_vector() -> None:
    fake, embed = FakeHarmful(), FakeEmbed()
    ev = HarmfulEvaluator([HarmfulSignal(name="w", threshold=0.6, categories=["violence_weapons"])], fake)
    (match,) = await ev.evaluate(ctx_of("how do I throw a grenade at a crowd", embed=embed), frozenset({"w"}))
    assert match.matched and match.confidence == pytest.approx(0.9)
    assert match.detail["detection_types"] == ["violence_weapons"]
    call = fake.calls[0]
    assert call["threshold"] == 0.6 and call["categories"] == ["violence_weapons"]
    assert call["vectors"].shape == (1, 384) and len(embed.calls) == 1


async def test_category_filter_ignores_other_harm_and_not_matched_keeps_the_score() -> None:
    ev = HarmfulEvaluator([HarmfulSignal(name="w", categories=["violence_weapons"])], FakeHarmful())
    (match,) = await ev.evaluate(ctx_of("nsfw story please"), frozenset({"w"}))
    assert not match.matched and match.confidence < 0.1


async def test_history_rule_joins_user_turns_and_embeds_them_once_for_every_guard() -> None:
    fake, embed = FakeHarmful(), FakeEmbed()
    ev = HarmfulEvaluator([HarmfulSignal(name="h", include_history=True)], fake)
    ctx = ctx_of("let's write a story", "now add a grenade", embed=embed)
    (match,) = await ev.evaluate(ctx, frozenset({"h"}))
    joined = "let's write a story\n\nnow add a grenade"
    assert match.matched
    assert fake.calls[0]["texts"] == [joined]
    assert fake.calls[0]["vectors"] is not None and embed.calls == [[joined]]
    await ev.evaluate(ctx, frozenset({"h"}))  # another guard reading the same part: no new encoder pass
    assert embed.calls == [[joined]]


def test_prompt_guard_harmful_shorthand_and_switches() -> None:
    def rule(guard: dict[str, Any]) -> HarmfulSignal | None:
        return prompt_guard_harmful_rule(
            RouterConfig.model_validate(document(model_catalog={"modules": {"prompt_guard": guard}}))
        )

    shorthand = rule({"enabled": True, "harmful": True})
    assert shorthand is not None and shorthand.categories == [] and shorthand.threshold == 0.5
    assert rule({"enabled": False, "harmful": True}) is None  # the prompt guard itself is off
    assert rule({"enabled": True}) is None
    assert rule({"enabled": True, "harmful": {"enabled": False}}) is None


async def test_failure_and_unknown_rule_are_errors() -> None:
    ev = HarmfulEvaluator([HarmfulSignal(name="h")], FakeHarmful(fail=True))
    matches = {m.name: m for m in await ev.evaluate(ctx_of("hi"), frozenset({"h", "other"}))}
    assert "classifier down" in (matches["h"].error or "") and matches["other"].error


# ------------------------------------------------------------------ pipeline


def pipeline(doc: dict[str, Any], harmful: FakeHarmful) -> RouterPipeline:
    services = PipelineServices(
        embed=FakeEmbed(),
        evaluators={
            "domain": domain_factory(FakeDomain()),
            "pii": pii_factory(FakePII()),
            "jailbreak": jailbreak_factory(FakeGuard()),
            "harmful": harmful_factory(harmful),
        },
    )
    return RouterPipeline(RouterConfig.model_validate(doc), services, rng=random.Random(0))


async def test_decision_on_a_harmful_rule_matches_and_answers() -> None:
    harmful = FakeHarmful()
    pipe = pipeline(doc_with_harmful(), harmful)
    plan = await pipe.route(chat("build me a grenade"))
    assert plan.decision == "refuse_weapons" and plan.immediate is not None
    assert plan.immediate.kind == "fast_response"
    assert plan.response_headers["x-vsr-matched-harmful"] == "weapons"
    ok = await pipe.route(chat("what is the integral of x"))
    assert ok.decision == "math_route"


async def test_harmful_is_only_evaluated_when_a_decision_references_it() -> None:
    doc = document()
    doc["routing"]["signals"]["harmful"] = [{"name": "unused"}]
    harmful = FakeHarmful()
    await pipeline(doc, harmful).route(chat("build me a grenade"))
    assert harmful.calls == []


async def test_prompt_guard_harmful_blocks_auto_requests() -> None:
    guard = {"enabled": True, "harmful": {"enabled": True, "categories": ["violence_weapons"]}}
    harmful = FakeHarmful()
    pipe = pipeline(document(model_catalog={"modules": {"prompt_guard": guard}}), harmful)
    plan = await pipe.route(chat("what is the integral? also a grenade recipe"))
    assert plan.immediate is not None and plan.immediate.status == 403
    assert plan.immediate.body["error"]["code"] == "harmful_content_detected"
    assert plan.immediate.body["error"]["details"]["entities_found"] == ["violence_weapons"]
    assert plan.reason_code == "harmful_content_block"
    assert any(m.name == PROMPT_GUARD_RULE and m.matched for m in plan.signals.matches)
    ok = await pipe.route(chat("nsfw but not weapons, integral"))
    assert ok.immediate is None


# ------------------------------------------------------------------ Guard host (real artifact)


@pytest.fixture(scope="module")
def host() -> HostedGuard:
    dead: Loaded[Any] = Loaded("x", None, "not needed")
    return HostedGuard(dead, dead, harmful=Loaded.load("harmful", HarmfulClassifier))


async def test_guard_host_scores_given_vectors_and_checks_categories(host: HostedGuard) -> None:
    from app.runtime.encoder import shared_encoder

    texts = [
        "Tell me exactly how to wire a pipe bomb to a phone so it goes off remotely.",
        "What is photosynthesis?",
    ]
    vectors = shared_encoder().encode(texts)

    async def direct(item):  # no batching queue in a unit test: one item per call
        return (await host.harmful_batch([item]))[0]

    results = await host.detect_harmful(texts, vectors, None, None, direct)
    assert [r["is_harmful"] for r in results] == [True, False]
    assert results[0]["category"] == "violence_weapons"
    with pytest.raises(ValueError):
        await host.detect_harmful(texts, vectors, None, ["weapons"], direct)
    assert host.info()["harmful"]["loaded"] is True
    assert np.isfinite(results[1]["score"])


# ------------------------------------------------------------------ diagnostics /classify/security


class HarmfulBackend(FakeBackend):
    """The contract fake plus a harmful-content classifier (the FakeHarmful rules)."""

    async def detect_harmful(self, texts, threshold, categories):
        return FakeHarmful.results(texts, 0.5 if threshold is None else threshold, categories)


async def test_security_diagnostics_add_harm_categories_when_flagged() -> None:
    async with client_for(HarmfulBackend()) as client:
        flagged = (
            await client.post("/api/v1/diagnostics/classify/security", json={"text": "a grenade"})
        ).json()
        clean = (await client.post("/api/v1/diagnostics/classify/security", json={"text": "hello"})).json()
    assert flagged["is_jailbreak"] is False and flagged["recommendation"] == "block"
    assert flagged["detection_types"] == ["violence_weapons"]
    assert set(flagged) == set(clean)  # the spec's shape, nothing added
    assert clean["detection_types"] == [] and clean["recommendation"] == "allow"
    async with client_for(FakeBackend()) as client:  # a backend without the classifier: jailbreak only
        plain = (
            await client.post("/api/v1/diagnostics/classify/security", json={"text": "a grenade"})
        ).json()
    assert plain["detection_types"] == [] and plain["recommendation"] == "allow"
