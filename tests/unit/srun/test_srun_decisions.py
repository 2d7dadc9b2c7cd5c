"""The decision model without HTTP: question validation, answer shapes, calibration maps,
nested states, read budgets, spans in code points."""

from __future__ import annotations

import numpy as np
import pytest

from app.runtime.schemas import InvalidRequest
from app.srun.calibration import Calibration, choice_probs, label_probs, noul_prob, score_probs, span_probs
from app.srun.catalog import DECISION_MODEL, load
from app.srun.decisions import DecisionModel
from app.srun.questions import QuestionError, parse_question
from app.srun.schemas import RejectedInput

SUPPORT = {
    "type": "choice",
    "instructions": "Which team?",
    "criteria": {
        "billing": "Invoices, charges, refunds or payment methods",
        "technical": "An error message, a crash or a bug",
        "shipping": "Delivery status, tracking or the shipping address",
    },
}


@pytest.fixture(scope="module")
def model() -> DecisionModel:
    loaded = load(DECISION_MODEL)
    assert isinstance(loaded, DecisionModel)
    return loaded


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"type": "choice", "criteria": {"a": "x"}}, "questions.q"),
        (
            {"type": "choice", "criteria": {"a": "x", "b": "y"}, "choices": [{"key": "a"}, {"key": "b"}]},
            "either",
        ),
        ({"type": "choice", "criteria": {"a": "x", "b": "y"}, "levels": ["x", "y"]}, "questions.q.levels"),
        ({"type": "score", "criteria": ["only one"]}, "levels"),
        ({"type": "score", "levels": [str(i) for i in range(11)]}, "11 levels"),
        ({"type": "noul", "criteria": {"maybe": "x"}}, "questions.q.criteria"),
        ({"type": "noul", "choices": [{"key": "yes", "description": "x"}]}, "'false' or 'true'"),
        ({"type": "set", "criteria": {}}, "0 labels"),
        ({"type": "span", "labels": [{"key": "a"}, {"key": "a"}]}, "duplicate"),
        ({"type": "vote"}, "questions.q.type"),
        ({"type": {"a": 1}}, "questions.q.type"),  # an object is no type name (was a 500)
        ("not an object", "must be an object"),
        ({"type": "choice", "criteria": {"a": "x", "b": "y"}, "threshold": 2}, "questions.q.threshold"),
    ],
)
def test_invalid_questions_name_the_field(raw, field):
    with pytest.raises(QuestionError) as err:
        parse_question("q", raw)
    assert field in err.value.message


def test_both_forms_read_the_same_options():
    crit = parse_question("q", {"type": "set", "criteria": {"a": "first", "b": "second"}})
    listed = parse_question(
        "q",
        {
            "type": "set",
            "labels": [{"key": "a", "description": "first"}, {"key": "b", "description": "second"}],
        },
    )
    assert crit.options() == listed.options() == [("a", "first"), ("b", "second")]
    score = parse_question("q", {"type": "score", "criteria": ["low", "high"]})
    assert score.options() == [("0", "low"), ("1", "high")]


# --------------------------------------------------------------------------- calibration maps


def test_calibration_maps_are_probabilities():
    cal = Calibration.load()
    probs, abstain = choice_probs(np.array([0.6, 0.1, 0.05]), cal)
    assert probs.sum() == pytest.approx(1.0) and 0 < abstain < 1 and int(np.argmax(probs)) == 0
    _, abstain_low = choice_probs(np.array([0.02, 0.01, 0.0]), cal)
    assert abstain_low > abstain  # nothing fits: more mass on abstaining
    assert score_probs(np.array([0.1, 0.5]), cal).sum() == pytest.approx(1.0)
    assert noul_prob(0.6, 0.1, cal) > 0.5 > noul_prob(0.1, 0.6, cal)
    assert noul_prob(None, 0.6, cal) == pytest.approx(1 - noul_prob(0.6, None, cal))
    assert np.all(
        (label_probs(np.array([0.5, 0.1]), cal) >= 0) & (label_probs(np.array([0.5, 0.1]), cal) <= 1)
    )
    span = span_probs(np.array([[0.5, 0.1], [0.1, 0.2]]), np.array([[0.3, 0.1], [0.0, 0.1]]), cal)
    assert span.shape == (2, 2) and np.all((span >= 0) & (span <= 1))


def test_committed_artifact_is_trained():
    cal = Calibration.load()
    assert cal.version != "untrained"
    assert 0 < cal.thresholds["span"] < 1 and 0 < cal.thresholds["set"] < 1


# --------------------------------------------------------------------------- answers


async def test_choice_answer_follows_the_state(model):
    billing = await model.decide(
        {"state": "You charged my card twice, refund one payment.", "questions": {"q": SUPPORT}}
    )
    crash = await model.decide(
        {"state": "The app crashes with error 0x80 when I open it.", "questions": {"q": SUPPORT}}
    )
    assert billing.answers["q"].choice == "billing"
    assert crash.answers["q"].choice == "technical"
    answer = billing.answers["q"]
    assert sum(answer.probabilities.values()) == pytest.approx(1.0, abs=1e-4)
    assert answer.confidence <= max(answer.probabilities.values())
    assert billing.thresholds["q"] == 0.0


async def test_off_topic_state_abstains_more(model):
    on = await model.decide({"state": "Where is my parcel? Tracking is stuck.", "questions": {"q": SUPPORT}})
    off = await model.decide(
        {"state": "What is a good recipe for banana bread?", "questions": {"q": SUPPORT}}
    )
    assert off.answers["q"].abstain_probability > on.answers["q"].abstain_probability


async def test_threshold_can_withhold_a_choice(model):
    question = {**SUPPORT, "threshold": 1.0}
    out = await model.decide({"state": "Where is my parcel?", "questions": {"q": question}})
    assert out.answers["q"].choice is None and out.thresholds["q"] == 1.0


async def test_invalid_question_is_answered_while_others_are(model):
    out = await model.decide(
        {
            "state": "refund please",
            "questions": {"good": SUPPORT, "bad": {"type": "score", "criteria": ["one"]}},
        }
    )
    assert out.answers["good"].choice == "billing"
    assert out.answers["bad"].error == "invalid_question" and "questions.bad" in out.answers["bad"].message
    assert "bad" not in out.thresholds


async def test_no_valid_question_is_a_request_error(model):
    with pytest.raises(InvalidRequest, match="no valid question"):
        await model.decide({"state": "x", "questions": {"bad": {"type": "noul"}}})
    with pytest.raises(InvalidRequest):
        await model.decide({"state": "x", "questions": {"q": SUPPORT}, "options": {"max_tokens": 1}})
    with pytest.raises(RejectedInput) as err:
        await model.decide(
            {"state": "x", "questions": {"q": SUPPORT}, "videos": ["data:video/mp4;base64,AA"]}
        )
    assert err.value.reason == "modality_not_supported"


async def test_set_and_span_shapes(model):
    state = "The app is too expensive and the pages load slowly. I use it on my iPhone in Madrid."
    out = await model.decide(
        {
            "state": state,
            "questions": {
                "t": {
                    "type": "set",
                    "criteria": {
                        "price": "the price, cost or plans",
                        "speed": "speed, slowness, lag",
                        "security": "passwords, hacking, privacy",
                    },
                    "threshold": 0.5,
                },
                "s": {
                    "type": "span",
                    "criteria": {"place": "a city or country", "device": "a phone or device name"},
                    "threshold": 0.0,
                },
            },
        }
    )
    selected = out.sets["t"].selected
    assert selected == [k for k, p in out.sets["t"].probabilities.items() if p >= 0.5]
    assert {f"t.{k}" for k in ("price", "speed", "security")} <= set(out.answers)
    spans = out.spans["s"]
    assert spans, "threshold 0 keeps the best non-overlapping candidates"
    for span in spans:
        assert state[span.start : span.end] == span.text and span.label in {"place", "device"}
    assert all(a.end <= b.start for a, b in zip(spans, spans[1:], strict=False))
    assert out.answers["s"].noul == pytest.approx(max(s.probability for s in spans), abs=1e-6)


async def test_span_offsets_count_code_points(model):
    state = "Ich habe ein 📱 iPhone in München gekauft."
    out = await model.decide(
        {
            "state": state,
            "questions": {"s": {"type": "span", "criteria": {"place": "a city"}, "threshold": 0.0}},
        }
    )
    for span in out.spans["s"]:
        assert state[span.start : span.end] == span.text


async def test_nested_states_and_usage(model):
    out = await model.decide(
        {
            "state": "refund my charge",
            "questions": {"q": SUPPORT},
            "states": {
                "a": {"state": "the parcel is lost", "questions": {"q": SUPPORT}},
                "b": {"state": "nothing", "questions": {"bad": {"type": "set"}}},
            },
        }
    )
    assert out.states["a"].answers["q"].choice == "shipping"
    assert out.states["b"].answers["bad"].error == "invalid_question"
    assert (
        out.usage.tokens
        == sum(s.usage.tokens for s in out.states.values())
        + (await model.decide({"state": "refund my charge", "questions": {"q": SUPPORT}})).usage.tokens
    )


async def test_long_state_reads_the_budget_only(model):
    out = await model.decide(
        {"state": "word " * 1000, "questions": {"q": SUPPORT}, "options": {"max_tokens": 20}}
    )
    assert out.usage.tokens == 20 and out.usage.tokens_lower_bound is True


async def test_option_vectors_are_cached_across_requests(model):
    calls: list[int] = []

    async def encode(texts):
        calls.append(len(texts))
        return model.forward(texts)

    question = {
        "type": "choice",
        "criteria": {"alpha-cache": "first unusual option", "beta-cache": "second one"},
    }
    await model.decide({"state": "one", "questions": {"q": question}}, encode)
    await model.decide({"state": "two", "questions": {"q": question}}, encode)
    assert calls == [3, 1]  # the second request encodes its state only
