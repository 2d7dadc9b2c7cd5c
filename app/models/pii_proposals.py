"""PII candidates and what every rule shares: `EntityProposal` (one proposed entity), the overlap
resolution that turns all candidates into one span per region, and the context helpers the
rules use (the text around a match, identifier labels, arithmetic operands).

Offsets are Python ``str`` indices, i.e. Unicode code points, end exclusive.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class EntityProposal:
    """One proposed entity before thresholding and overlap resolution."""

    type: str
    start: int
    end: int
    score: float
    source: str  # "rule:<name>", "presidio:<recognizer>", "spacy:<label>" or "rampart:<kind>"


# The type of a candidate that claims a span so no looser rule reads it as something else (a
# private IP is no phone number or date), and is dropped after overlap resolution.
NOT_PII = "NOT_PII"

# Which type survives when two rule candidates (or two NER candidates) overlap: lower index wins;
# ties: higher score, longer span. Checksummed/structured formats beat loose ones (an IP is not also a phone number or a
# date), rules that needed explicit context beat rules that did not, and the statistical NER
# comes last because it is the least precise on digits and symbols.
PRECEDENCE: dict[str, int] = {
    t: i
    for i, t in enumerate(
        (
            "EMAIL_ADDRESS",
            "IBAN_CODE",  # an IBAN's digit groups can pass Luhn; a card never contains an IBAN
            "CREDIT_CARD",
            "IP_ADDRESS",
            NOT_PII,  # an address that names no one (a private IP): holds its span, never reported
            "US_DRIVER_LICENSE",
            "US_SSN",
            "DOMAIN_NAME",
            "PHONE_NUMBER",
            "STREET_ADDRESS",
            "ZIP_CODE",
            "AGE",
            "DATE_TIME",
            "PERSON",
            "ORGANIZATION",
            "GPE",
            "NRP",
        )
    )
}
_NER_SOURCES = ("spacy:", "rampart:")  # the statistical taggers


def resolve_overlaps(candidates: Iterable[EntityProposal]) -> list[EntityProposal]:
    """Keep one candidate per overlapping region, greedily by precedence, score, length."""

    def rank(c: EntityProposal) -> tuple[bool, int, float, int, int]:
        # Every rule/recognizer candidate outranks the statistical NER: a rule only fires on a
        # format or an explicit cue, while spaCy's small model guesses from capitalisation.
        return (c.source.startswith(_NER_SOURCES), PRECEDENCE[c.type], -c.score, -(c.end - c.start), c.start)

    kept: list[EntityProposal] = []
    for cand in sorted(candidates, key=rank):
        if cand.end <= cand.start:
            continue
        if all(cand.end <= k.start or cand.start >= k.end for k in kept):
            kept.append(cand)
    return sorted(kept, key=lambda c: (c.start, c.end))


# --------------------------------------------------------------------------- context helpers


def text_before(text: str, start: int, width: int) -> str:
    return text[max(0, start - width) : start].lower()


def text_after(text: str, end: int, width: int) -> str:
    return text[end : end + width].lower()


# A number directly labelled as an identifier ("order #", "invoice no.", "ISBN") is not a phone
# number, card or SSN, however well it validates.
_ID_LABEL = re.compile(
    r"(?:\border|\binvoice|\bticket|\bid|\bref(?:erence)?|\btracking|\bisbn(?:-1[03])?|\bserial|"
    r"\btransaction|\btxn|\bcase|\bsku|\bpart|\bmodel|\bversion|\bbuild|\bcommit|\bconfirmation|"
    r"\bbooking|\breservation|\bpo|\bissue|\bpr|\bpatent|\bshipment|\bparcel|\bitem|\bproduct|"
    r"\baccount|\bacct|\bcustomer|\bmember|\bemployee|\bstudent|\bpolicy|\bclaim)"
    r"(?:\s*(?:number|num|no\.?|nr\.?|id|code|is|was|:|#))*\s*[:#=-]?\s*$"
)


# An identifier a document states ("the confirmation says 4401-88702-3391"): document nouns only,
# since a person "says" a phone number too ("the customer said 212-555-0187").
_ID_STATED = re.compile(
    r"\b(?:order|invoice|ticket|confirmation|receipt|booking|reservation|tracking|shipment|parcel|"
    r"statement)\s+(?:says|said|shows|showed|reads|lists|listed)\s*:?\s*$"
)
# Digits glued by a hyphen to a capital-letter prefix are the rest of a code ("WH-2026-000451",
# "INV-2024-00017"), unless the prefix is a phone word ("TEL-"). Case-sensitive: capitals are how
# such codes are written, and "re-" or "non-" before digits is prose.
_CODE_PREFIX = re.compile(r"(?<![\w-])(?!(?:TEL|FAX|MOB|CELL|PH|PHONE)-)[A-Z]{2,5}-$")


def has_id_label_before(text: str, start: int) -> bool:
    """A label that names the number an identifier: "order #", "invoice no.", "ISBN", a document
    that states it, or a code prefix it is glued to."""
    before = text_before(text, start, 32)
    return bool(
        _ID_LABEL.search(before)
        or _ID_STATED.search(before)
        or _CODE_PREFIX.search(text[max(0, start - 7) : start])
    )


_OPERATORS = set("=*/^+<>×÷%")


def in_arithmetic(text: str, start: int, end: int) -> bool:
    """A number that is an operand ("2^31 - 1 = 2147483647", "123456789 / 3") is not an identifier."""
    if any(ch in "/*=^" for ch in text[start:end]):
        return True
    left = text[max(0, start - 4) : start].rstrip()
    right = text[end : end + 4].lstrip()
    return bool((left and left[-1] in _OPERATORS) or (right and right[0] in _OPERATORS))


_DECIMAL_BEFORE = re.compile(r"\d\.$")
_DECIMAL_AFTER = re.compile(r"^\.\d")


def glued_to_number(text: str, start: int, end: int) -> bool:
    """The digits continue a number around them: a decimal part after ("0920 03137 0" in a
    table's "1.0920 03137 0.49498"), a decimal point before, or, for a match that is itself a
    figure (it holds a "." or ","), a thousands group before ("498.9126.37" in "19751,498.9126.37").
    A table of figures run together is not a contact detail; a phone number never starts after
    "1." or ends before ".4". A comma alone separates fields ("Jane Doe,2125550187,42"), so a
    bare digit run between commas stays a phone."""
    before = text[max(0, start - 2) : start]
    if _DECIMAL_BEFORE.search(before) or _DECIMAL_AFTER.match(text[end : end + 2]):
        return True
    figure = any(ch in ".," for ch in text[start:end])
    return figure and before[-1:] == "," and before[:1].isdigit()


# Number talk: a digit run that a sentence calculates with, converts, factors or checks is the
# question's subject, not a contact detail or a card the user disclosed ("What is 4815162342
# divided by 7?", "Is 4111111111111111 divisible by 3?", "5551234567 nanoseconds").
_NUMBER_TALK = re.compile(
    r"\b(?:divid\w*|divisib\w*|divisors?|multipl\w*|times|plus|minus|sum|products?|digits?|primes?|"
    r"semiprimes?|factor\w*|remainders?|modulo|mod|convert\w*|binary|hex\w*|decimal|octal|round\w*|"
    r"square|roots?|cube|percent\w*|average|mean|median|luhn|checksums?|check digit|even or odd|"
    r"integers?|representable|float\w*|overflow|exponent\w*|scientific notation|calculat\w*|comput\w*|"
    r"gcd|lcm|fibonacci|sort\w*|subtract\w*|add(?:ed)?|arithmetic|bits?|bytes?|"
    r"(?:nano|micro|milli)?seconds|minutes|hours|days|years|km|kilometres?|kilometers?|miles|"
    r"revenue|population|dollars|euros?|yen|odometer|magnitude)\b",
    re.IGNORECASE,
)
# The same talk in the other languages of the project's traffic (docs/security.md, "PII that reads
# context"): only words that mean arithmetic and little else ("moins", "más", "per", "mal" are
# everyday words too, so they are left out), and the usual "how much is" of each language.
_NUMBER_TALK_WORLD = re.compile(
    r"\b(?:"
    # fr, es, pt, it ("division" and "calcul" are English words too, with other meanings)
    r"divisé\w*|divisible|divisão|divisione|diviso|dividid[oa]s?|dividir|multiplié\w*|multiplicad[oa]|"
    r"moltiplicat[oa]|soustrai\w*|soustraction|sottra\w*|subtrai\w*|chiffres|cifre|d[ií]gitos|"
    r"calculez|calcule[rz]?|calcula[rs]?|calcola\w*|combien (?:font|fait)|cu[aá]nto es|quanto (?:é|fa)|"
    r"binaire|binario|bin[aá]rio|"
    # de, nl, pl, tr ("berechnen" is also "to charge": left out)
    r"geteilt|dividier\w*|multiplizier\w*|subtrahier\w*|teilbar|quersumme|ziffern|ausrechnen|rechne|"
    r"wie viel ist|gedeeld|deelbaar|vermenigvuldig\w*|hoeveel is|podzielon[aey] przez|podzielna|"
    r"pomn[oó][zż]\w*|odejm\w*|oblicz\w*|ile to jest|çarp\w*|bölün\w*|hesapla\w*|"
    # ru, uk ("делиться" / "поділитися" are "to share": only the "by" forms)
    r"умнож\w*|помнож\w*|делится на|делить на|разделить на|делённое|деленное|делимост\w*|"
    r"ділиться на|поділити на|вычисл\w*|обчисл\w*|посчитай|порахуй|сколько будет|скільки буде|"
    r"цифр[аыу]?|цифрами|"
    # ar
    r"اضرب|مضروب|اقسم|مقسوم|قسمة|احسب|ناقص"
    r")\b",
    re.IGNORECASE,
)
# Scripts without spaces between words (zh, ja), whose vowel signs break `\b` (hi), and ko.
_NUMBER_TALK_UNSPACED = re.compile(
    r"乘以|除以|加上|减去|等于多少|计算|位数|质数|素数|整除|余数|二进制|十六进制|"
    r"掛け|割っ|割る|足す|計算|桁|二進|"
    r"곱하기|나누기|더하기|빼기|계산|자릿수|이진수|"
    r"गुणा|भाग दें|भाग दे|जोड़|घटा|गणना"
)
_SENTENCE_END = re.compile(r"[.!?\n](?:\s|$)|[。！？]")  # a CJK full stop needs no space after it


def sentence_around(text: str, start: int, end: int) -> str:
    """The sentence holding text[start:end] (split at . ! ? or a line break)."""
    left = max((m.end() for m in _SENTENCE_END.finditer(text, 0, start)), default=0)
    right = _SENTENCE_END.search(text, end)
    return text[left : right.start() + 1 if right else len(text)]


def in_number_talk(text: str, start: int, end: int) -> bool:
    """The number is what its sentence calculates with (see _NUMBER_TALK), in any language."""
    sentence = sentence_around(text, start, end)
    return any(p.search(sentence) for p in (_NUMBER_TALK, _NUMBER_TALK_WORLD, _NUMBER_TALK_UNSPACED))


# Capital letters a name may start with: ASCII, Latin-1 and Latin Extended-A/B ("Šárka",
# "Łukasz", "Živković"), for regex character classes.
UPPER = "A-ZÀ-ÖØ-Þ" + "".join(ch for ch in map(chr, range(0x100, 0x250)) if ch.isupper())


def wordset(words: str) -> frozenset[str]:
    return frozenset(words.split())


def words_re(words: Iterable[str]) -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(words) + r")\b")
