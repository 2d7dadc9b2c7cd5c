"""Published example values (test cards, example IBANs, fictional phones) named as such are not PII."""

from __future__ import annotations

import pytest

from app.models import pii_rules
from app.models.pii import PIIDetector
from app.models.pii_examples import EXAMPLE_IBANS, TEST_CARDS, is_published_example, named_as_example


@pytest.fixture(scope="module")
def detector() -> PIIDetector:
    return PIIDetector()


def _types(detector: PIIDetector, text: str) -> set[str]:
    return {e.type for e in detector.detect(text).entities}


def _mod97(iban: str) -> int:
    moved = iban[4:] + iban[:4]
    return int("".join(str(int(ch, 36)) for ch in moved)) % 97


def test_every_listed_value_is_well_formed() -> None:
    # A value that fails its own checksum would never be detected, so listing it would hide a typo.
    assert all(pii_rules.luhn_ok(card) for card in TEST_CARDS)
    assert all(_mod97(iban) == 1 for iban in EXAMPLE_IBANS)


@pytest.mark.parametrize(
    ("etype", "value", "expected"),
    [
        ("CREDIT_CARD", "4242-4242-4242-4242", True),
        ("CREDIT_CARD", "4539 1488 0343 6467", False),
        ("IBAN_CODE", "de89 3704 0044 0532 0130 00", True),
        ("IBAN_CODE", "DE75 5121 0800 1245 1261 99", False),
        ("PHONE_NUMBER", "(312) 555-0147", True),
        ("PHONE_NUMBER", "+1 312 555 0199", True),
        ("PHONE_NUMBER", "(312) 555-0247", False),
        ("PHONE_NUMBER", "07700 900461", True),
        ("PHONE_NUMBER", "+44 20 7946 0958", True),
        ("PHONE_NUMBER", "+44 20 7946 1958", False),
        ("EMAIL_ADDRESS", "4111111111111111@example.org", False),
    ],
)
def test_published_values(etype: str, value: str, expected: bool) -> None:
    assert is_published_example(etype, value) is expected


@pytest.mark.parametrize(
    "text",
    [
        "Why does the Stripe test number 4242 4242 4242 4242 always succeed in test mode?",
        "Walk me through the Luhn check on 4111 1111 1111 1111, digit by digit.",
        "Show the mod 97 steps on the sample IBAN GB29 NWBK 6016 1331 9268 19.",
        "Un exemple d'IBAN : FR76 3000 6000 0112 3456 7890 189, comment vérifier la clé ?",
        "Write a regex that accepts the fictional number (312) 555-0147 and rejects letters.",
        "My unit tests use 5555 5555 5555 4444 as a fixture; why does the gateway mock reject it?",
    ],
)
def test_an_example_named_as_one_is_not_pii(detector: PIIDetector, text: str) -> None:
    assert not {"CREDIT_CARD", "IBAN_CODE", "PHONE_NUMBER"} & _types(detector, text)


@pytest.mark.parametrize(
    ("text", "etype"),
    [
        # the usual stand-ins for a real number, with no talk of examples: still PII
        ("Please charge my card 4111 1111 1111 1111 for the order.", "CREDIT_CARD"),
        ("Wire the deposit to DE89 3704 0044 0532 0130 00 and confirm.", "IBAN_CODE"),
        ("Call me back on (312) 555-0147 after six.", "PHONE_NUMBER"),
        # claimed as someone's own, even beside a word of testing
        ("Test whether my card 4242 4242 4242 4242 still works, please.", "CREDIT_CARD"),
        ("For the sandbox, charge 4111 1111 1111 1111 twice.", "CREDIT_CARD"),
        # named as an example, but not a published value: an ordinary card stays a card
        ("Is the example card 4539 1488 0343 6467 I was given a real Visa?", "CREDIT_CARD"),
        # "example" inside an address is no talk of examples
        ("Mail ana@example.org or call +1 415-555-0132 tonight.", "PHONE_NUMBER"),
    ],
)
def test_a_stand_in_or_owned_value_stays_pii(detector: PIIDetector, text: str, etype: str) -> None:
    assert etype in _types(detector, text)


def test_only_the_named_types_are_exempt() -> None:
    text = "An example address: 4242424242424242"
    assert named_as_example(text, "CREDIT_CARD", 20, len(text))
    assert not named_as_example(text, "US_SSN", 20, len(text))
