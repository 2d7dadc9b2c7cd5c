"""PII rules for dates of any kind (numeric, ISO, written, birth years) and ages.

Pure regex / arithmetic, no model and no I/O (see app/models/pii_rules.py).
"""

from __future__ import annotations

import re

from app.models.pii_proposals import (
    EntityProposal,
    text_before,
)

# --------------------------------------------------------------------------- dates

_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
    r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
)
_MONTH_RE = re.compile(r"\b" + _MONTH + r"\b")
_NUMERIC_DATE = re.compile(r"(?<![\w./:-])(\d{1,2})([/.-])(\d{1,2})\2(\d{4}|\d{2})(?![\w/-]|\.\d)")
_ISO_DATE = re.compile(
    r"(?<![\w./:-])(\d{4})([-/.])(\d{1,2})\2(\d{1,2})"
    r"(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?(?![\w/-]|\.\d)"
)
_DAY = r"(?:[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th)?"
_YEAR = r"(?:19|20)\d{2}"
_TEXT_DATES = (
    # "March 3, 2021", "Mar 3rd 2021", "March 3"
    (re.compile(r"\b" + _MONTH + r"\.?\s+" + _DAY + r"(?:,?\s+" + _YEAR + r")?\b(?!:)"), 0.85),
    # "3 March 2021", "3rd of March, 2021"
    (re.compile(r"\b" + _DAY + r"\s+(?:of\s+)?" + _MONTH + r"\.?(?:,?\s+" + _YEAR + r")?\b"), 0.85),
    # "March 2021": a month precision date, weaker
    (re.compile(r"\b" + _MONTH + r"\.?,?\s+" + _YEAR + r"\b"), 0.6),
)
_BIRTH_YEAR = re.compile(
    r"\b(?:born(?:\s+(?:in|on))?|birth\s*year|year\s+of\s+birth|dob|date\s+of\s+birth|birthday)\W{0,3}("
    + _YEAR
    + r")\b",
    re.IGNORECASE,
)


def _valid_ymd(year: int, month: int, day: int) -> bool:
    return 1 <= month <= 12 and 1 <= day <= 31 and 1900 <= year <= 2099


def _numeric_date_ok(a: str, b: str, year: str, sep: str) -> bool:
    if len(year) == 2:
        if sep != "/":  # "12-34-56", "1.2.24" are far more often versions / codes
            return False
        y = 2000
    else:
        y = int(year)
    x, z = int(a), int(b)
    return _valid_ymd(y, x, z) or _valid_ymd(y, z, x)


def looks_like_date(value: str) -> bool:
    m = _NUMERIC_DATE.fullmatch(value)
    if m and _numeric_date_ok(m.group(1), m.group(3), m.group(4), m.group(2)):
        return True
    m = _ISO_DATE.fullmatch(value)
    return bool(m and _valid_ymd(int(m.group(1)), int(m.group(3)), int(m.group(4))))


def find_dates(text: str) -> list[EntityProposal]:
    """Calendar dates with at least month precision. Deliberately not: bare years, weekdays,
    times of day, durations or relative dates ("next week"): they identify no one and would make
    ordinary questions ("what happened in 1945?") trip a PII policy."""
    out = []
    for m in _NUMERIC_DATE.finditer(text):
        if _numeric_date_ok(m.group(1), m.group(3), m.group(4), m.group(2)):
            out.append(EntityProposal("DATE_TIME", m.start(), m.end(), 0.85, "rule:date_numeric"))
    for m in _ISO_DATE.finditer(text):
        if _valid_ymd(int(m.group(1)), int(m.group(3)), int(m.group(4))):
            out.append(EntityProposal("DATE_TIME", m.start(), m.end(), 0.85, "rule:date_iso"))
    for rx, score in _TEXT_DATES:
        for m in rx.finditer(text):
            out.append(EntityProposal("DATE_TIME", m.start(), m.end(), score, "rule:date_text"))
    for m in _BIRTH_YEAR.finditer(text):
        out.append(EntityProposal("DATE_TIME", m.start(1), m.end(1), 0.7, "rule:birth_year"))
    return out


def ner_date_ok(value: str) -> bool:
    """spaCy DATE spans are kept only when they name a calendar date, for the reason above."""
    return bool(_MONTH_RE.search(value) and any(ch.isdigit() for ch in value)) or looks_like_date(value)


# --------------------------------------------------------------------------- age

_AGE_NUM = r"(?<![\w.])(\d{1,3}(?:\.\d)?)"
_AGE_RULES = (
    # "34 years old", "7-year-old", "45 yrs old", "34 y/o", "34yo"
    (
        re.compile(
            _AGE_NUM + r"[\s-]*(?:years?|yrs?|yr)[\s-]*old\b|" + _AGE_NUM + r"\s*(?:y/o|y\.o\.|yo)\b",
            re.IGNORECASE,
        ),
        0.85,
    ),
    # "aged 52", "age: 52", "at the age of 65"
    (
        re.compile(
            r"\b(?:aged|age(?:\s+of)?|age\s*[:=-])\s*" + _AGE_NUM + r"\b(?![.,]?\d|\s*(?:%|percent))",
            re.IGNORECASE,
        ),
        0.85,
    ),
    # "I just turned 40", "I'm 34." — only when the number ends the clause, so "I'm 5 minutes away"
    # and "turned 90 degrees" stay out.
    (
        re.compile(
            r"\b(?:turn(?:ed|s|ing)?|(?:i\s+am|i'm|i’m|im|(?:he|she)\s+is|he's|she's|he’s|she’s|"
            r"(?:i|he|she)\s+was|(?:we|they|you)\s+were)(?:\s+now|\s+only|\s+just)?)\s+"
            r"(\d{1,3})(?=\s*(?:[.!?;,)]|$|\n|\s+(?:and|but|now|today|tomorrow|soon|next|last|this|yesterday|"
            r"recently|so|already|too)\b))",
            re.IGNORECASE,
        ),
        0.7,
    ),
)


# "adults aged 18 or older", "under the age of 5": an age limit, not someone's age
_AGE_LIMIT_AFTER = re.compile(
    r"\s*(?:\+|-\s*\d|(?:years?\s+)?(?:or|and)\s+(?:older|over|above|up|younger|under|below|less|more))",
    re.IGNORECASE,
)
_AGE_LIMIT_BEFORE = re.compile(
    r"(?:under|over|above|below|least|most|between|from|until|till|to|minimum|maximum|min|max)\s+"
    r"(?:the\s+)?(?:age\s+of\s+|aged?\s+)?$",
    re.IGNORECASE,
)


def find_ages(text: str) -> list[EntityProposal]:
    """The entity is the number itself, so masking keeps the sentence readable."""
    out = []
    for rx, score in _AGE_RULES:
        for m in rx.finditer(text):
            idx = next(i for i in range(1, (m.lastindex or 1) + 1) if m.group(i) is not None)
            value = float(m.group(idx))
            if _AGE_LIMIT_AFTER.match(text, m.end(idx)) or _AGE_LIMIT_BEFORE.search(
                text_before(text, m.start(idx), 40)
            ):
                continue
            if 0 < value <= 125:
                out.append(EntityProposal("AGE", m.start(idx), m.end(idx), score, "rule:age"))
    return out


# --------------------------------------------------------------------------- times of day

_HOUR_WORD = r"(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_HOUR12 = r"(?:1[0-2]|0?[1-9])"
_TIMES = re.compile(
    r"(?<![\w.:])(?:"
    # "3:30pm", "7 a.m.", "11:05 PM": a 12-hour clock with its am/pm marker
    + _HOUR12
    + r"(?::[0-5]\d)?\s?(?:[ap]\.m\.|[ap]m\b)"
    # "at 7 o'clock", "five o'clock"
    + r"|(?:"
    + _HOUR12
    + r"|"
    + _HOUR_WORD
    + r")\s+o['’]?\s?clock\b"
    # "half past five", "quarter to ten"
    + r"|(?:half\s+past|quarter\s+(?:past|to))\s+(?:"
    + _HOUR_WORD
    + r"|"
    + _HOUR12
    + r")\b)",
    re.IGNORECASE,
)
# Below calendar dates (0.85) but above the default threshold (0.5): a strict policy sees it, and
# an operator can drop it alone by setting the threshold to 0.6 or allowing DATE_TIME.
TIME_SCORE = 0.55


def find_times(text: str) -> list[EntityProposal]:
    """Times of day written with a clock marker: "3:30pm", "7 a.m.", "at five o'clock",
    "half past six". A time identifies no one on its own, but with a name or place it narrows
    down where someone will be ("pick me up at 5pm"), and users expect it masked. Bare "10:30" or
    "14:05" stay out: they are as often durations, scores, ratios or verses."""
    return [
        EntityProposal("DATE_TIME", m.start(), m.end(), TIME_SCORE, "rule:time")
        for m in _TIMES.finditer(text)
    ]
