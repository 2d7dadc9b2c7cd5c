"""The preference, complexity, language and modality signal families (app/pipeline/signals/),
on the real encoder and language model; texts written for these tests, not taken from any
training data."""

from __future__ import annotations

import asyncio

import pytest

from app.config.semantic_signals import ComplexitySignal, LanguageSignal, ModalitySignal, PreferenceSignal
from app.pipeline.signals import BUILTIN_EVALUATORS
from app.pipeline.signals.base import SignalContext
from app.pipeline.signals.complexity import ComplexityEvaluator
from app.pipeline.signals.language import LanguageEvaluator
from app.pipeline.signals.modality import ModalityEvaluator
from app.pipeline.signals.preference import PreferenceEvaluator


def ctx(content, embed=None) -> SignalContext:
    return SignalContext([{"role": "user", "content": content}], embed=embed)


def test_the_families_are_built_in():
    assert {"preference", "complexity", "language", "modality"} <= BUILTIN_EVALUATORS.keys()


# ------------------------------------------------------------------ language

SENTENCES = {
    "en": [
        "Can you help me plan a birthday party for my daughter?",
        "What are the side effects of taking ibuprofen every day?",
        "Please summarize the main arguments of this essay.",
        "How do I change the oil in a 2015 Honda Civic?",
        "Write a short story about a lighthouse keeper.",
    ],
    "fr": [
        "Peux-tu m'aider à préparer un entretien d'embauche ?",
        "Quels sont les meilleurs endroits à visiter en Bretagne ?",
        "Explique-moi comment fonctionne la photosynthèse.",
        "J'ai besoin d'une recette de gâteau sans gluten.",
        "Comment résilier mon abonnement téléphonique ?",
    ],
    "de": [
        "Kannst du mir erklären, wie eine Wärmepumpe funktioniert?",
        "Ich suche ein gutes Buch über die Geschichte Roms.",
        "Wie schreibe ich eine Kündigung für meine Wohnung?",
        "Was sollte ich bei einer Wanderung in den Alpen mitnehmen?",
        "Bitte übersetze diesen Absatz ins Englische.",
    ],
    "es": [
        "¿Cuál es la mejor manera de aprender a tocar la guitarra?",
        "Necesito ideas para una cena vegetariana para seis personas.",
        "Explícame la diferencia entre un virus y una bacteria.",
        "¿Cómo puedo mejorar mi currículum para conseguir trabajo?",
        "Recomiéndame algunas películas de ciencia ficción.",
    ],
    "it": [
        "Come posso coltivare i pomodori sul balcone?",
        "Spiegami la differenza tra il debito e il deficit pubblico.",
        "Vorrei organizzare un viaggio in Sicilia a settembre.",
        "Quali esercizi sono utili per il mal di schiena?",
        "Scrivi una poesia sull'autunno.",
    ],
    "pt": [
        "Como faço para abrir uma conta bancária em Portugal?",
        "Quais são os sintomas da gripe e como tratá-la?",
        "Me ajude a escrever um e-mail para o meu chefe.",
        "Qual é a história da cidade do Rio de Janeiro?",
        "Preciso de dicas para estudar para o vestibular.",
    ],
    "ru": [
        "Как приготовить настоящий украинский борщ?",
        "Объясни, пожалуйста, теорию относительности простыми словами.",
        "Какие документы нужны для получения визы?",
    ],
    "zh": ["请帮我写一封求职信。", "北京有哪些值得参观的博物馆？", "如何提高英语口语水平？"],
    "ja": ["明日の天気はどうなりますか？", "おすすめの日本の小説を教えてください。"],
}


def test_language_identification_on_prompts_in_nine_languages():
    evaluator = LanguageEvaluator([LanguageSignal(name=code) for code in SENTENCES])
    asyncio.run(evaluator.warm_up())
    assert evaluator._detector is not None
    total = correct = 0
    for code, texts in SENTENCES.items():
        for text in texts:
            total += 1
            correct += evaluator._detector.detect(text)[0] == code
    assert total >= 36
    assert correct / total >= 0.95


async def test_a_language_rule_matches_its_language_above_its_threshold():
    evaluator = LanguageEvaluator([LanguageSignal(name="fr"), LanguageSignal(name="EN", threshold=0.9)])
    french = await evaluator.evaluate(
        ctx("Bonjour, pouvez-vous m'aider à réserver un hôtel à Lyon ?"), frozenset({"fr", "en"})
    )
    by_name = {m.name: m for m in french}
    assert by_name["fr"].matched and by_name["fr"].detail["detected"] == "fr"
    assert not by_name["en"].matched and by_name["en"].confidence == 0.0
    # two letters say nothing reliable: below the default threshold, no rule matches
    (short,) = await evaluator.evaluate(ctx("ok"), frozenset({"fr"}))
    assert not short.matched


# ------------------------------------------------------------------ modality


async def modalities(content) -> set[str]:
    evaluator = ModalityEvaluator(
        [ModalitySignal(name=n) for n in ("text", "image", "audio", "code", "image_generation")]
    )
    matches = await evaluator.evaluate(
        ctx(content), frozenset({"text", "image", "audio", "code", "image_generation"})
    )
    return {m.name for m in matches if m.matched}


async def test_modality_reads_parts_code_and_picture_requests():
    image = [
        {"type": "text", "text": "What breed is this dog?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]
    assert await modalities(image) == {"image"}
    audio = [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]
    assert await modalities(audio) == {"audio"}
    assert await modalities("Why does this fail?\n```python\nprint(undefined_name)\n```") == {"text", "code"}
    assert "code" in await modalities("Write a function in Rust that parses a CSV line")
    assert "code" in await modalities("def add(a, b):\n    return a + b\nwhat does this do?")
    assert await modalities("Draw a picture of a fox sleeping under a tree") == {"text", "image_generation"}
    assert await modalities("What is the tallest mountain in Africa?") == {"text"}


# ------------------------------------------------------------------ preference

ROUTES = [
    PreferenceSignal(
        name="coding",
        description="writing, fixing or explaining computer programs and code",
        examples=["why does my Python script raise a KeyError", "how do I sort an array in Java"],
    ),
    PreferenceSignal(
        name="travel",
        description="planning trips: flights, hotels, itineraries and things to do at a destination",
        examples=["find me a cheap flight to Lisbon", "a good hotel near the Louvre"],
    ),
    PreferenceSignal(
        name="cooking",
        description="recipes, ingredients and how to cook a meal",
        examples=["how do I make pancakes without eggs"],
    ),
]


@pytest.mark.parametrize(
    "query, route",
    [
        ("My JavaScript loop never ends, what is wrong with it?", "coding"),
        ("What should I see during three days in Kyoto?", "travel"),
        ("How long do I roast a chicken at 200 degrees?", "cooking"),
        ("Is there a train from Milan to Zurich in the morning?", "travel"),
    ],
)
async def test_the_best_described_route_alone_matches(minilm_embed, query, route):
    evaluator = PreferenceEvaluator(ROUTES, minilm_embed)
    matches = await evaluator.evaluate(ctx(query, minilm_embed), frozenset(r.name for r in ROUTES))
    assert [m.name for m in matches if m.matched] == [route]
    assert all(m.detail["best_preference"] == route for m in matches)


async def test_no_route_matches_a_request_none_describes(minilm_embed):
    evaluator = PreferenceEvaluator(ROUTES, minilm_embed)  # the default threshold
    matches = await evaluator.evaluate(
        ctx("What year did the Berlin wall fall?", minilm_embed), frozenset({"coding", "travel", "cooking"})
    )
    assert not any(m.matched for m in matches)


# ------------------------------------------------------------------ complexity

HARDNESS = ComplexitySignal(
    name="reasoning",
    threshold=0.05,
    hard={
        "candidates": [
            "prove that the square root of two is irrational",
            "derive the closed form of this recurrence and analyse its complexity",
            "design a distributed consensus protocol that tolerates byzantine faults",
            "solve this differential equation step by step and justify each step",
        ]
    },
    easy={
        "candidates": [
            "what is the capital of France",
            "say hello",
            "what time is it in London",
            "translate thank you into Spanish",
        ]
    },
)


@pytest.mark.parametrize(
    "query, level",
    [
        ("Prove that there are infinitely many prime numbers.", "hard"),
        ("Show by induction that the sum of the first n odd numbers is n squared.", "hard"),
        ("What is the capital of Italy?", "easy"),
        ("hi there!", "easy"),
    ],
)
async def test_complexity_levels_by_prototypes(minilm_embed, query, level):
    evaluator = ComplexityEvaluator([HARDNESS], minilm_embed)
    names = frozenset(f"reasoning:{lvl}" for lvl in ("hard", "medium", "easy"))
    matches = await evaluator.evaluate(ctx(query, minilm_embed), names)
    assert [m.name for m in matches if m.matched] == [f"reasoning:{level}"]
    assert {m.detail["level"] for m in matches} == {level}


async def test_a_complexity_condition_without_a_level_is_an_error_not_a_match(minilm_embed):
    evaluator = ComplexityEvaluator([HARDNESS], minilm_embed)
    (match,) = await evaluator.evaluate(ctx("prove it", minilm_embed), frozenset({"reasoning"}))
    assert not match.matched and match.error is not None


def test_complexity_cut_points_and_remote_pairs_are_checked():
    assert HARDNESS.cut_points() == (0.05, -0.05)
    explicit = HARDNESS.model_copy(update={"hard_above": 0.2, "easy_below": 0.0})
    assert explicit.cut_points() == (0.2, 0.0)
    with pytest.raises(ValueError, match="remote score backend"):
        ComplexitySignal.model_validate({**HARDNESS.model_dump(), "hard_below": 0.1})
    with pytest.raises(ValueError, match="go together"):
        ComplexitySignal.model_validate({**HARDNESS.model_dump(), "hard_above": 0.1})
    assert ComplexitySignal.model_validate({**HARDNESS.model_dump(), "threshold": "0.2"}).threshold == 0.2


# ------------------------------------------------------------------ configuration


def _config(signals: dict, conditions: list[dict]) -> dict:
    return {
        "version": "v0.3",
        "providers": {"models": [{"name": "m", "backend_refs": [{"base_url": "http://127.0.0.1:9"}]}]},
        "routing": {
            "signals": signals,
            "decisions": [
                {
                    "name": "d",
                    "rules": {"operator": "AND", "conditions": conditions},
                    "modelRefs": [{"model": "m"}],
                }
            ],
        },
    }


def test_decisions_use_the_four_families_by_their_rule_names():
    from app.config import parse_config

    signals = {
        "preferences": [{"name": "coding", "description": "programming help"}],
        "complexity": [HARDNESS.model_dump(exclude_none=True)],
        "language": [{"name": "de"}],
        "modality": [{"name": "image"}],
    }
    conditions = [
        {"type": "preference", "name": "coding"},
        {"type": "complexity", "name": "reasoning:hard"},
        {"type": "language", "name": "de"},
        {"type": "modality", "name": "image"},
    ]
    parsed = parse_config(_config(signals, conditions))
    assert parsed.config.routing.signals.language[0].name == "de"


@pytest.mark.parametrize(
    "signals, path",
    [
        ({"modality": [{"name": "smell"}]}, "routing.signals.modality.0.name"),
        ({"language": [{"name": "english"}]}, "routing.signals.language.0.name"),
        ({"preferences": [{"name": "p"}]}, "routing.signals.preferences.0.description"),
    ],
)
def test_malformed_rules_are_rejected_with_their_path(signals, path):
    from app.config import ConfigError, parse_config

    with pytest.raises(ConfigError) as exc:
        parse_config(_config(signals, [{"type": "keyword", "name": "k"}]))
    assert any(path in str(issue.path).replace("[", ".").replace("]", "") for issue in exc.value.issues), (
        exc.value.issues
    )
