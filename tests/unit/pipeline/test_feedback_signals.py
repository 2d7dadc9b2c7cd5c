"""The fact_check and user_feedback signal families (app/pipeline/signals/fact_check.py,
user_feedback.py) on the real encoder; prompts written for these tests, apart from the
training data (app/models/data/) and the training script's held-out list."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from app.api.app import StaticConfigView
from app.api.diagnostics import diagnostics_router
from app.api.diagnostics_service import Diagnostics
from app.config.document import RouterConfig
from app.config.semantic_signals import FactCheckSignal, UserFeedbackSignal
from app.models.feedback import FEEDBACK_LABELS, detect_feedback
from app.pipeline.signals.base import SignalContext
from app.pipeline.signals.fact_check import FactCheckEvaluator
from app.pipeline.signals.user_feedback import UserFeedbackEvaluator, follows_answer
from app.runtime.encoder import shared_encoder
from tests.fakes.classifiers import FakeBackend

ANSWERED = [
    {"role": "user", "content": "What is the capital of Australia?"},
    {"role": "assistant", "content": "Sydney."},
]

FEEDBACK = {
    "satisfied": [
        "thanks!",
        "Perfect, that's exactly what I needed",
        "great, that worked",
        "Thank you so much, this helped a lot",
        "awesome 👍",
        "got it, makes sense now",
        "cool thanks",
        "That fixed it, cheers",
    ],
    "wrong_answer": [
        "That's wrong, it's Canberra",
        "No, that's not correct",
        "your code doesn't work",
        "You made a mistake in the second step",
        "that is incorrect, Paris is not in Belgium",
        "nope",
        "This is false.",
        "It still doesn't compile",
    ],
    "need_clarification": [
        "I don't understand",
        "what do you mean by eigenvector?",
        "Can you explain that in simpler terms?",
        "I'm confused, why did you divide by two?",
        "could you elaborate on the last point?",
        "huh?",
        "What does that mean?",
        "I still don't get it",
    ],
    "want_different": [
        "try again",
        "make it shorter",
        "Can you give me another example?",
        "something else please",
        "That's not what I asked for",
        "rephrase it in a more formal tone",
        "give me other options",
        "redo it with bullet points",
    ],
    "none": [
        "What is the capital of Peru?",
        "Write a poem about the sea",
        "Now do the same for Germany",
        "How about the population of Canada?",
        "Explain recursion",
        "And what about Python 3.12?",
        "Can you also add unit tests?",
        "ok",
    ],
}


def test_feedback_on_forty_follow_up_turns():
    total = correct = 0
    for label, texts in FEEDBACK.items():
        for text in texts:
            total += 1
            got, _ = detect_feedback(text, follows_answer=True)
            correct += (got or "none") == label
    assert correct / total >= 0.9


def test_a_turn_that_opens_a_conversation_is_never_feedback():
    assert detect_feedback("Can you explain that in simpler terms?", follows_answer=False) == (None, 0.0)
    assert not follows_answer(
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "thanks"}]
    )
    assert follows_answer([*ANSWERED, {"role": "user", "content": "thanks"}])


async def test_a_user_feedback_rule_matches_its_label_after_an_answer():
    evaluator = UserFeedbackEvaluator([UserFeedbackSignal(name=label) for label in FEEDBACK_LABELS])
    ctx = SignalContext([*ANSWERED, {"role": "user", "content": "That's wrong, it's Canberra."}])
    matches = await evaluator.evaluate(ctx, frozenset(FEEDBACK_LABELS))
    assert [m.name for m in matches if m.matched] == ["wrong_answer"]
    assert all(m.detail["feedback"] == "wrong_answer" for m in matches)


# ------------------------------------------------------------------ fact_check

FACTUAL = [
    "Who discovered penicillin?",
    "What is the population of Brazil?",
    "When was the Magna Carta signed?",
    "What is the speed of sound in water?",
    "Which river is the longest in Europe?",
    "How does a nuclear reactor generate electricity?",
    "What were the causes of the French Revolution?",
    "Is coffee bad for your heart?",
]
NOT_FACTUAL = [
    "Write a sonnet about my old bicycle.",
    "Rewrite this sentence so it sounds friendlier: send the report now.",
    "Write a Python class for a bank account with deposit and withdraw methods.",
    "Give me five names for a board game cafe.",
    "What is 48 divided by 6?",
    "Pretend to be a detective and interrogate me.",
    "hi there, how's it going?",
    "Should I wear the red dress or the blue one to the party?",
]


async def test_fact_check_on_prompts_it_never_saw(minilm_embed):
    evaluator = FactCheckEvaluator([FactCheckSignal(name="needs_fact_check")])
    correct = 0
    for text, wanted in [*((t, True) for t in FACTUAL), *((t, False) for t in NOT_FACTUAL)]:
        ctx = SignalContext([{"role": "user", "content": text}], embed=minilm_embed)
        (match,) = await evaluator.evaluate(ctx, frozenset({"needs_fact_check"}))
        assert 0.0 <= match.confidence <= 1.0 and match.error is None
        correct += match.matched == wanted
    assert correct / (len(FACTUAL) + len(NOT_FACTUAL)) >= 0.8


async def test_both_fact_check_labels_are_complementary(minilm_embed):
    rules = [FactCheckSignal(name="needs_fact_check"), FactCheckSignal(name="no_fact_check_needed")]
    ctx = SignalContext([{"role": "user", "content": "Who wrote War and Peace?"}], embed=minilm_embed)
    matches = {
        m.name: m for m in await FactCheckEvaluator(rules).evaluate(ctx, frozenset(r.name for r in rules))
    }
    assert matches["needs_fact_check"].confidence + matches[
        "no_fact_check_needed"
    ].confidence == pytest.approx(1.0)
    assert matches["needs_fact_check"].matched != matches["no_fact_check_needed"].matched


async def test_without_an_encoder_the_fact_check_errs_instead_of_failing_the_request():
    evaluator = FactCheckEvaluator([FactCheckSignal(name="needs_fact_check")])
    (match,) = await evaluator.evaluate(
        SignalContext([{"role": "user", "content": "Who won?"}]), frozenset({"needs_fact_check"})
    )
    assert not match.matched and match.error is not None


def test_labels_outside_the_families_are_rejected():
    with pytest.raises(ValueError):
        FactCheckSignal(name="maybe")
    with pytest.raises(ValueError):
        UserFeedbackSignal(name="angry")


# ------------------------------------------------------------------ diagnostics routes

DIAG = "/api/v1/diagnostics/classify"


class EncoderBackend(FakeBackend):
    """The classifier fakes plus the graph encoder's `embed` (the Embedding deployment's)."""

    async def embed(self, texts: list[str]) -> np.ndarray:
        await self._enter("embed", texts=texts)
        return shared_encoder().encode(list(texts))


def diagnostics_client(backend: FakeBackend | None) -> httpx.AsyncClient:
    app = FastAPI()
    config = StaticConfigView(RouterConfig.model_validate({}))
    app.include_router(diagnostics_router(Diagnostics(backend, config)))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://diag")


async def test_the_fact_check_route_reads_the_head_on_the_graphs_encoder():
    async with diagnostics_client(EncoderBackend()) as client:
        factual = await client.post(f"{DIAG}/fact-check", json={"text": "Who discovered penicillin?"})
        creative = await client.post(
            f"{DIAG}/fact-check", json={"text": "Write a sonnet about my old bicycle."}
        )
        blank = await client.post(f"{DIAG}/fact-check", json={"text": "  "})
    assert factual.status_code == 200, factual.text
    body = factual.json()
    assert body["needs_fact_check"] is True and body["label"] == "needs_fact_check"
    assert sum(body["probabilities"].values()) == pytest.approx(1.0, abs=1e-3)
    assert creative.json()["label"] == "no_fact_check_needed"
    assert blank.status_code == 400 and blank.json()["error"]["code"] == "INVALID_INPUT"


class NoEncoderBackend(FakeBackend):
    embed = None  # type: ignore[assignment]  # a backend of the older shape: no encoder to read


async def test_without_an_encoder_the_fact_check_route_is_503():
    async with diagnostics_client(NoEncoderBackend()) as client:
        response = await client.post(f"{DIAG}/fact-check", json={"text": "Who won the 1998 world cup?"})
    assert response.status_code == 503 and response.json()["error"]["code"] == "MODEL_NOT_LOADED"


async def test_the_user_feedback_route():
    async with diagnostics_client(None) as client:  # rules: no model needed
        wrong = await client.post(f"{DIAG}/user-feedback", json={"text": "That's wrong, it's Canberra"})
        first = await client.post(
            f"{DIAG}/user-feedback", json={"text": "thanks!", "options": {"follows_answer": False}}
        )
    assert wrong.status_code == 200, wrong.text
    assert wrong.json()["feedback"] == "wrong_answer" and wrong.json()["is_feedback"] is True
    assert first.json() == {**first.json(), "feedback": "none", "is_feedback": False, "confidence": 0.0}
