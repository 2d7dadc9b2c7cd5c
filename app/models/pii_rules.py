"""Project rules for the PII detector: what Presidio's recognizers and spaCy's small NER miss or
over-report, plus the overlap resolution that turns all candidates into one span per region.

The rule set, one import for the detector (app/models/pii.py) and its tests; the rules live
by purpose in:
- pii_proposals: `EntityProposal`, overlap resolution and the shared context helpers;
- pii_identifiers: phone numbers, credit cards, US SSNs, US driver licences, IPs, domains;
- pii_dates: dates and ages;
- pii_places: street addresses, ZIP codes, countries and states;
- pii_names: names after a cue, and the NER post-filter;
- pii_greetings: names in salutations, sign-offs and direct address;
- pii_register: knowledge questions, where public figures and nationalities are not PII;
- pii_examples: published test cards, example IBANs and fictional phone numbers, named as such.

Pure regex / arithmetic, no model and no I/O, so every rule is unit-testable on its own.
Offsets are Python ``str`` indices, i.e. Unicode code points, end exclusive.
"""

from __future__ import annotations

from app.models.pii_dates import find_ages, find_dates, find_times
from app.models.pii_examples import named_as_example
from app.models.pii_greetings import find_greeting_names
from app.models.pii_identifiers import (
    card_in_number_talk,
    find_context_phones,
    find_credit_cards,
    find_domains,
    find_driver_licenses,
    find_intl_phones,
    find_us_ssns,
    luhn_ok,
    score_phone,
)
from app.models.pii_ip import ip_is_identifying, ip_names_a_server
from app.models.pii_names import find_person_cues, keep_ner_entity
from app.models.pii_places import find_places, find_street_addresses, find_zip_codes
from app.models.pii_proposals import (
    NOT_PII,
    PRECEDENCE,
    EntityProposal,
    has_id_label_before,
    in_arithmetic,
    in_number_talk,
    resolve_overlaps,
)
from app.models.pii_register import drop_public_mentions, is_knowledge_question

__all__ = [
    "EntityProposal",
    "NOT_PII",
    "PRECEDENCE",
    "find_ages",
    "find_context_phones",
    "find_credit_cards",
    "drop_public_mentions",
    "is_knowledge_question",
    "find_dates",
    "find_greeting_names",
    "find_intl_phones",
    "find_times",
    "find_person_cues",
    "find_places",
    "find_domains",
    "find_driver_licenses",
    "find_street_addresses",
    "find_us_ssns",
    "find_zip_codes",
    "has_id_label_before",
    "in_arithmetic",
    "in_number_talk",
    "card_in_number_talk",
    "ip_is_identifying",
    "ip_names_a_server",
    "keep_ner_entity",
    "luhn_ok",
    "named_as_example",
    "resolve_overlaps",
    "score_phone",
]
