"""PII detector 1.2.0 (issue 22 item 2): names by cue and position that 1.1.0 missed, NER
symbols and job nouns that are no names, and knowledge questions that 1.1.0 did not recognise."""

from __future__ import annotations

import pytest

from app.models import pii_rules
from app.models.pii import PIIDetector, PIIResult


@pytest.fixture(scope="module")
def detector() -> PIIDetector:
    return PIIDetector()


def _found(result: PIIResult, etype: str) -> list[str]:
    return [e.value for e in result.entities if e.type == etype]


def _cue_names(text: str) -> list[str]:
    return [text[c.start : c.end] for c in pii_rules.find_person_cues(text)]


def _slot_names(text: str) -> list[str]:
    return [text[c.start : c.end] for c in pii_rules.find_greeting_names(text)]


# --------------------------------------------------------------------------- cues


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Her name is Oksana Berezina and she starts Monday.", "Oksana Berezina"),
        ("The lease is in my sister's name Wilhelmina Drost", "Wilhelmina Drost"),
        ("Agent: What's your name? Caller: Dorotea Vance", "Dorotea Vance"),
        ("What is the name on the card? Tobiah Renner", "Tobiah Renner"),
        ('"Not again," says Korbinian.', "Korbinian"),
        ('"Hand me the map!" yelled Ottilie to Barnabas', "Barnabas"),
        ("Name: Łucja Wrześniewska\nRoom: 14", "Łucja Wrześniewska"),
    ],
)
def test_names_after_cues(text: str, name: str) -> None:
    assert name in _cue_names(text)


# --------------------------------------------------------------------------- positions


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Can I take my daughter Philippa off the joint account?", "Philippa"),
        ("Please list Rosalind K Ebbe as a beneficiary on the policy.", "Rosalind K Ebbe"),
        ("Add Torvald Mikkelsen as emergency contact", "Torvald Mikkelsen"),
        ("Yesterday Ignatius had given Clementine her keys back.", "Clementine"),
        ("The party is at Zbigniew's cousin's flat.", "Zbigniew"),
        ("Žarko, just confirming the van for Saturday.", "Žarko"),
    ],
)
def test_names_by_position(text: str, name: str) -> None:
    assert name in _slot_names(text)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("running late, sorry!\n\ncheers,\nwendeline", "wendeline"),
        ("see you at the station.\n\nwarm regards,\nmaren holt", "maren holt"),
        ("ksenia, this is about the broken heater.", "ksenia"),
        ("hello ana-maria j. ruiz,\nyour order shipped", "ana-maria j. ruiz"),
    ],
)
def test_names_in_all_lower_case_messages(text: str, name: str) -> None:
    assert name in _slot_names(text)


@pytest.mark.parametrize(
    "text",
    [
        "thanks, bye",
        "seriously, i can't believe it",
        "love pizza",
        "cheers,\nmate",
        "We hired Python as a trustee of the build.",
        "Add Python as a dependency",
    ],
)
def test_slot_words_and_plain_phrases_are_not_names(text: str) -> None:
    assert _slot_names(text) == []


# --------------------------------------------------------------------------- NER post-filter


@pytest.mark.parametrize(
    ("value", "keep"),
    [("~Q", False), ("Q", False), ("Chairperson", False), ("Spokespeople", False), ("Perpetua", True)],
)
def test_ner_person_needs_a_name_shape(value: str, keep: bool) -> None:
    assert pii_rules.keep_ner_entity("PERSON", value, value, 0) is keep


# --------------------------------------------------------------------------- knowledge register


@pytest.mark.parametrize(
    "text",
    [
        "The Clovis points found at the quarry are best understood as:",
        "Kropotkin's view of mutual aid is",
        "Agriculture spread to the northern valleys because",
        "In judging a promise, writes Korsgaard, what matters most is that",
        'Which two duties does Ross rank first in the essay he discusses in "The Right and the Good"',
        "What did the farmers of the Holocene epoch grow?",
        "Ada Brenner, Evening Courier (9 March 1961): ...The tax falls hardest on those who save.",
    ],
)
def test_knowledge_question_shapes(text: str) -> None:
    assert pii_rules.is_knowledge_question(text)


@pytest.mark.parametrize(
    "text",
    [
        "Lorenzo's car is parked outside.",
        "Can you ask Imelda to call the plumber?",
        "Tell Bruno the gate is open",
    ],
)
def test_everyday_texts_are_not_knowledge_questions(text: str) -> None:
    assert not pii_rules.is_knowledge_question(text)


def test_a_word_inside_a_full_name_is_no_domain_noun(detector: PIIDetector) -> None:
    # "Temple" would make "Who ...?" a question about religion if the name counted
    assert "Gareth Temple" in _found(
        detector.detect("Good morning, this is Mr. Gareth Temple. Who is this?"), "PERSON"
    )


def test_source_citation_and_cloze_drop_public_names(detector: PIIDetector) -> None:
    quoted = "Ada Brenner, Evening Courier (9 March 1961): ...The tax falls hardest on those who save."
    assert _found(detector.detect(quoted), "PERSON") == []
    assert _found(detector.detect("The Natufian people of the Levant are known for:"), "PERSON") == []
