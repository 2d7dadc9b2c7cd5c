"""A number an identifier's label names is no phone number: a document that states it ("the
receipt shows ...") or a capital-letter code prefix it is glued to ("RC-2031-557120"). A person who
says a number, and a phone word as the prefix, still mark a phone number (PII 1.5.0)."""

from __future__ import annotations

import pytest

from app.models.pii import PIIDetector
from app.models.pii_proposals import has_id_label_before


@pytest.fixture(scope="module")
def detector() -> PIIDetector:
    return PIIDetector()


def _types(detector: PIIDetector, text: str) -> set[str]:
    return {e.type for e in detector.detect(text).entities}


@pytest.mark.parametrize(
    ("text", "number", "labelled"),
    [
        ("The receipt shows 3309-71245-8820", "3309", True),
        ("and the booking said: 6120-44871-0093", "6120", True),
        ("Release RC-2031-557120", "2031", True),
        ("Call TEL-212-555-0187", "212", False),
        ("The customer said 212-555-0187", "212", False),
        ("pre-2031 models", "2031", False),  # a lowercase prefix is prose
    ],
)
def test_document_statements_and_code_prefixes_label_a_number(text: str, number: str, labelled: bool) -> None:
    assert has_id_label_before(text, text.index(number)) is labelled


def test_a_stated_identifier_and_a_prefixed_code_are_no_phone_numbers(detector: PIIDetector) -> None:
    text = (
        "The receipt shows 3309-71245-8820 but the statement lists 3309-71254-8820; "
        "and batch RC-2031-557120 comes after RC-2031-557119. Which digits were swapped?"
    )
    assert "PHONE_NUMBER" not in _types(detector, text)


@pytest.mark.parametrize(
    "text",
    [
        "The customer said 212-555-0187 is her cell, please call her back.",
        "Front desk: TEL-212-555-0187, ask for Dana.",
        "Invoice INV-2024-000173 is paid; reach Jan on +44 20 7946 0958.",
    ],
)
def test_phone_numbers_beside_the_rule_are_still_found(detector: PIIDetector, text: str) -> None:
    assert "PHONE_NUMBER" in _types(detector, text)
