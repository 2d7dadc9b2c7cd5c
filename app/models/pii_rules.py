"""Project rules for the PII detector: what Presidio's recognizers and spaCy's small NER miss or
over-report, plus the overlap resolution that turns all candidates into one span per region.

Pure regex / arithmetic, no model and no I/O, so every rule is unit-testable on its own.
Offsets are Python ``str`` indices, i.e. Unicode code points, end exclusive.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = [
    "Candidate",
    "PRECEDENCE",
    "find_ages",
    "find_context_phones",
    "find_credit_cards",
    "find_dates",
    "find_person_cues",
    "find_places",
    "find_domains",
    "find_driver_licenses",
    "find_street_addresses",
    "find_us_ssns",
    "find_zip_codes",
    "has_id_label_before",
    "in_arithmetic",
    "ip_is_identifying",
    "keep_ner_entity",
    "luhn_ok",
    "resolve_overlaps",
    "score_phone",
]


@dataclass(frozen=True)
class Candidate:
    """One proposed entity before thresholding and overlap resolution."""

    type: str
    start: int
    end: int
    score: float
    source: str  # "rule:<name>", "presidio:<recognizer>" or "spacy:<label>"


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
_NER_SOURCES = "spacy:"


def resolve_overlaps(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Keep one candidate per overlapping region, greedily by precedence, score, length."""

    def rank(c: Candidate) -> tuple[bool, int, float, int, int]:
        # Every rule/recognizer candidate outranks the statistical NER: a rule only fires on a
        # format or an explicit cue, while spaCy's small model guesses from capitalisation.
        return (c.source.startswith(_NER_SOURCES), PRECEDENCE[c.type], -c.score, -(c.end - c.start), c.start)

    kept: list[Candidate] = []
    for cand in sorted(candidates, key=rank):
        if cand.end <= cand.start:
            continue
        if all(cand.end <= k.start or cand.start >= k.end for k in kept):
            kept.append(cand)
    return sorted(kept, key=lambda c: (c.start, c.end))


# --------------------------------------------------------------------------- context helpers


def _before(text: str, start: int, width: int) -> str:
    return text[max(0, start - width) : start].lower()


def _after(text: str, end: int, width: int) -> str:
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


def has_id_label_before(text: str, start: int) -> bool:
    return bool(_ID_LABEL.search(_before(text, start, 32)))


_OPERATORS = set("=*/^+<>×÷%")


def in_arithmetic(text: str, start: int, end: int) -> bool:
    """A number that is an operand ("2^31 - 1 = 2147483647", "123456789 / 3") is not an identifier."""
    if any(ch in "/*=^" for ch in text[start:end]):
        return True
    left = text[max(0, start - 4) : start].rstrip()
    right = text[end : end + 4].lstrip()
    return bool((left and left[-1] in _OPERATORS) or (right and right[0] in _OPERATORS))


def _wordset(words: str) -> frozenset[str]:
    return frozenset(words.split())


def _words_re(words: Iterable[str]) -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(words) + r")\b")


# --------------------------------------------------------------------------- phone numbers

_PHONE_CONTEXT = _words_re(
    (
        r"phone",
        r"phones",
        r"tel",
        r"telephone",
        r"mobile",
        r"cell",
        r"cellphone",
        r"call",
        r"calling",
        r"called",
        r"text",
        r"sms",
        r"whatsapp",
        r"fax",
        r"reach",
        r"ring",
        r"dial",
        r"contact",
        r"landline",
        r"hotline",
        r"desk",
        r"office",
        r"number",
        r"ph",
        r"mob",
        r"answering",
        r"messages?",
        r"texting",
        r"signal",
        r"telegram",
        r"viber",
    )
)
_PHONE_AFTER = re.compile(r"^\s*[-(]?\s*(?:office|fax|mobile|cell|home|work|desk|ext\b|x\d)")


def _phone_context(text: str, start: int, end: int) -> bool:
    return bool(_PHONE_CONTEXT.search(_before(text, start, 48)) or _PHONE_AFTER.search(_after(text, end, 12)))


_EXTENSION = re.compile(r"\s*(?:x|ext\.?|extension)\s*\d{1,5}$", re.IGNORECASE)


def _phone_shaped(value: str) -> bool:
    """Rejects runs of small numbers ("2 3 4 5 6 7 8 9 10") and decimal columns ("2.20 9.11 10.07")
    that phonenumbers' lenient matcher accepts."""
    value = _EXTENSION.sub("", value)
    groups = re.findall(r"\d+", value)
    if sum(len(g) == 1 for g in groups) > 1:
        return False
    return value.startswith("+") or not ("." in value and " " in value)


def score_phone(text: str, start: int, end: int) -> float:
    """Re-score a phonenumbers match (Presidio gives every match a flat 0.4).

    Formatted numbers (separators or a + country code) are rarely anything else; a bare digit run
    is often an ID, so it needs phone context or stays just at the default threshold.
    """
    value = text[start:end]
    if has_id_label_before(text, start) or in_arithmetic(text, start, end):
        return 0.0
    if sum(ch.isdigit() for ch in value) < 7 or not _phone_shaped(value):
        return 0.0
    digits = sum(ch.isdigit() for ch in value)
    formatted = value.startswith("+") or any(ch in value for ch in " -.()")
    # 7-8 digits without an area/country code ("086 7133") are as often house or unit numbers
    score = (0.6 if digits >= 9 or value.startswith("+") else 0.45) if formatted else 0.5
    if _phone_context(text, start, end):
        score += 0.3
    return min(score, 0.95)


# Local numbers (no country code, non-US layouts) that phonenumbers cannot validate for the
# regions we scan; accepted only next to a phone word ("call me at 480 6764").
# "34 33 96-Office" is fine ("-" before a word), "12-34-5678-9" is not; no group crosses a line break.
_LOCAL_PHONE = re.compile(
    r"(?<![\w+.-])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,5}\)[ .-]?)?\d{2,12}(?:[ .-]\d{2,8}){0,4}"
    r"(?:[ ]?(?:x|ext\.?)[ ]?\d{1,5})?(?!\w|[-.]\d)",
    re.IGNORECASE,
)


def find_context_phones(text: str) -> list[Candidate]:
    out = []
    for m in _LOCAL_PHONE.finditer(text):
        digits = sum(ch.isdigit() for ch in m.group())
        if not 6 <= digits <= 15 or not _phone_context(text, m.start(), m.end()):
            continue
        if has_id_label_before(text, m.start()) or in_arithmetic(text, m.start(), m.end()):
            continue
        if _looks_like_date(m.group()) or not _phone_shaped(m.group()):
            continue
        out.append(Candidate("PHONE_NUMBER", m.start(), m.end(), 0.7, "rule:context_phone"))
    return out


# --------------------------------------------------------------------------- credit cards


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


# Issuer prefixes and lengths (Visa, Mastercard incl. 2-series, Amex, Discover, JCB, Diners,
# Maestro, UnionPay). Presidio's recognizer misses 19-digit Visa, 2-series Mastercard and Maestro.
_CARD_IIN = re.compile(r"^(?:4|5[0-8]|2[2-7]|3[0346789]|6|2131|1800|0604)")
_CARD = re.compile(r"(?<![\w-])\d(?:[ -]?\d){11,18}(?![\w-])")
_CARD_CONTEXT = _words_re(
    ("card", "cards", "credit", "debit", "visa", "mastercard", "amex", "cc", "pan", "number", "maestro")
)


def find_credit_cards(text: str) -> list[Candidate]:
    out = []
    for m in _CARD.finditer(text):
        raw = m.group()
        seps = {ch for ch in raw if not ch.isdigit()}
        if len(seps) > 1:
            continue
        digits = re.sub(r"\D", "", raw)
        if not (12 <= len(digits) <= 19 and _CARD_IIN.match(digits) and luhn_ok(digits)):
            continue
        if has_id_label_before(text, m.start()) or in_arithmetic(text, m.start(), m.end()):
            continue
        context = bool(_CARD_CONTEXT.search(_before(text, m.start(), 48)))
        if len(digits) < 13 and not context:
            continue
        out.append(Candidate("CREDIT_CARD", m.start(), m.end(), 0.95 if context else 0.7, "rule:card_luhn"))
    return out


# --------------------------------------------------------------------------- US SSN

_SSN_CONTEXT = re.compile(r"\b(?:ssn|ssns|social|soc\.?\s*sec|ss)\b")
_SSN_DASHED = re.compile(r"(?<![\w-])(\d{3})-(\d{2})-(\d{4})(?![\w-])")
_SSN_LOOSE = re.compile(r"(?<![\w.-])(\d{3})([ .]?)(\d{2})\2(\d{4})(?![\w.-])")


def _ssn_valid(area: str, group: str, serial: str) -> bool:
    # SSA never issues area 000, 666 or 900-999, group 00 or serial 0000.
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def find_us_ssns(text: str) -> list[Candidate]:
    """ddd-dd-dddd is specific enough on its own; other layouts need an SSN word nearby.

    Unlike Presidio we do not reject famous sample numbers (078-05-1120): a user who types one
    after "my SSN is" is still sharing something shaped like an SSN.
    """
    out: dict[tuple[int, int], Candidate] = {}
    for m in _SSN_DASHED.finditer(text):
        if _ssn_valid(*m.groups()) and not has_id_label_before(text, m.start()):
            ctx = bool(_SSN_CONTEXT.search(_before(text, m.start(), 48)))
            out[m.span()] = Candidate("US_SSN", m.start(), m.end(), 0.95 if ctx else 0.65, "rule:ssn")
    for m in _SSN_LOOSE.finditer(text):
        area, _, group, serial = m.groups()
        if m.span() in out or not _ssn_valid(area, group, serial):
            continue
        if _SSN_CONTEXT.search(_before(text, m.start(), 48)):
            out[m.span()] = Candidate("US_SSN", m.start(), m.end(), 0.85, "rule:ssn_context")
    return list(out.values())


# --------------------------------------------------------------------------- US driver licence

# "driver's license" may be followed straight by the number; a bare "license"/"DL" needs a
# number label ("license no. ...") or a licence-shaped code ("license D1234567") so "license key
# ABCD-1234" and "MIT license 2.0" stay out.
_DL_LABEL = re.compile(
    r"(?:driver'?s?|driving|drivers)\s+licen[cs]e()|(?:\bDL|\bD\.L\.|\blicen[cs]e)"
    r"(?=\s*(?:number|num|no\.?|nr\.?|#|:)|[ \t]+[A-Z]{1,2}\d{5,12}\b)",
    re.IGNORECASE,
)
_DL_VALUE = re.compile(
    r"(?:\s*(?:number|num|no\.?|nr\.?|id|#|is|was|:|=|-)(?!\w))*\s*[:#]?\s*"
    r"([A-Za-z0-9](?:[A-Za-z0-9-]{3,18})[A-Za-z0-9])(?![\w-])"
)


def find_driver_licenses(text: str) -> list[Candidate]:
    """State formats range from 1 letter + 7 digits to 13 digits, so only "licence ... <id>"
    counts; a bare alphanumeric token is far more often a product code."""
    out = []
    for m in _DL_LABEL.finditer(text):
        v = _DL_VALUE.match(text, m.end())
        if not v:
            continue
        value = v.group(1)
        digits = sum(ch.isdigit() for ch in value)
        # Mostly digit-heavy; a few states issue letter codes, accepted only in capitals after
        # the full "driver's license" cue.
        if m.group(1) is not None:  # after "driver's license": any code-like token in capitals
            ok = (value.isupper() and (digits >= 1 or len(value) >= 6)) or digits >= 4
        else:
            ok = digits >= 4
        if not ok or _looks_like_date(value):
            continue
        out.append(Candidate("US_DRIVER_LICENSE", v.start(1), v.end(1), 0.85, "rule:driver_license"))
    return out


# --------------------------------------------------------------------------- IP addresses

_NETMASK_OCTETS = {"0", "128", "192", "224", "240", "248", "252", "254", "255"}


def ip_is_identifying(value: str) -> bool:
    """Unspecified, loopback, broadcast and netmask values (0.0.0.0, 127.0.0.1, ::1,
    255.255.255.0) name no host."""
    import ipaddress

    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        return True  # Presidio's regex accepted it; leave the call to the recognizer
    if ip.is_unspecified or ip.is_loopback or ip.is_multicast:
        return False
    if ip.version == 6 and sum(1 for h in value.split(":") if h) < 3:  # "b[::2]", "fe80::1"
        return False
    octets = value.split(".")
    return not (len(octets) == 4 and octets[0] == "255" and all(o in _NETMASK_OCTETS for o in octets))


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


def _looks_like_date(value: str) -> bool:
    m = _NUMERIC_DATE.fullmatch(value)
    if m and _numeric_date_ok(m.group(1), m.group(3), m.group(4), m.group(2)):
        return True
    m = _ISO_DATE.fullmatch(value)
    return bool(m and _valid_ymd(int(m.group(1)), int(m.group(3)), int(m.group(4))))


def find_dates(text: str) -> list[Candidate]:
    """Calendar dates with at least month precision. Deliberately not: bare years, weekdays,
    times of day, durations or relative dates ("next week"): they identify no one and would make
    ordinary questions ("what happened in 1945?") trip a PII policy."""
    out = []
    for m in _NUMERIC_DATE.finditer(text):
        if _numeric_date_ok(m.group(1), m.group(3), m.group(4), m.group(2)):
            out.append(Candidate("DATE_TIME", m.start(), m.end(), 0.85, "rule:date_numeric"))
    for m in _ISO_DATE.finditer(text):
        if _valid_ymd(int(m.group(1)), int(m.group(3)), int(m.group(4))):
            out.append(Candidate("DATE_TIME", m.start(), m.end(), 0.85, "rule:date_iso"))
    for rx, score in _TEXT_DATES:
        for m in rx.finditer(text):
            out.append(Candidate("DATE_TIME", m.start(), m.end(), score, "rule:date_text"))
    for m in _BIRTH_YEAR.finditer(text):
        out.append(Candidate("DATE_TIME", m.start(1), m.end(1), 0.7, "rule:birth_year"))
    return out


def ner_date_ok(value: str) -> bool:
    """spaCy DATE spans are kept only when they name a calendar date, for the reason above."""
    return bool(_MONTH_RE.search(value) and any(ch.isdigit() for ch in value)) or _looks_like_date(value)


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


def find_ages(text: str) -> list[Candidate]:
    """The entity is the number itself, so masking keeps the sentence readable."""
    out = []
    for rx, score in _AGE_RULES:
        for m in rx.finditer(text):
            idx = next(i for i in range(1, (m.lastindex or 1) + 1) if m.group(i) is not None)
            value = float(m.group(idx))
            if _AGE_LIMIT_AFTER.match(text, m.end(idx)) or _AGE_LIMIT_BEFORE.search(
                _before(text, m.start(idx), 40)
            ):
                continue
            if 0 < value <= 125:
                out.append(Candidate("AGE", m.start(idx), m.end(idx), score, "rule:age"))
    return out


# --------------------------------------------------------------------------- domains / URLs

# Extensions that are also ccTLDs/gTLDs; "main.py" or "README.md" is a file, not a host.
_FILE_EXTENSIONS = _wordset(
    "py sh md rs pl pm zip mov cc so ps tf mk am ac in ml sc st ts lo ko js cs go rb kt bz gz "
    "xz mp sb ms ini cfg conf log txt bak tmp lock"
)
_STOPWORDS = _wordset(
    "a an and are as at be but by do for go he if in is it me my no not of ok on or so that the "
    "this to up us was we yes you"
)
# Common enough that a bare "name.tld" is almost surely a host; rare gTLDs (.world, .today,
# .new) also turn up in sentences that lost the space after a full stop, so they need www/3 labels.
_COMMON_GTLDS = _wordset(
    "com org net edu gov mil int info biz io co ai app dev xyz online site tech store cloud "
    "blog shop me tv ly gg"
)
_HOST = r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9-]{0,23}[a-z0-9]"
_DOMAIN = re.compile(r"(?<![\w@./:-])(" + _HOST + r")(?![\w@-]|\.[a-z0-9])", re.IGNORECASE)
_URL = re.compile(
    r"(?<![\w@])(?:(?:https?|ftp)://|www\.)[^\s<>\"'`]+",
    re.IGNORECASE,
)
_URL_TRAILING = ".,;:!?)]}'\""


def find_domains(text: str, suffix_of: Callable[[str], tuple[str, str]]) -> list[Candidate]:
    """DOMAIN_NAME for host names and URLs whose host is a name (an IP host is IP_ADDRESS's).

    ``suffix_of(host) -> (registrable_domain_label, public_suffix)`` is the public-suffix
    lookup (tldextract's bundled snapshot); it is injected so this module stays dependency-free.
    """
    out: list[Candidate] = []
    for m in _URL.finditer(text):
        raw = m.group()
        end = m.end()
        while raw and raw[-1] in _URL_TRAILING:
            if raw[-1] == ")" and raw.count("(") >= raw.count(")"):
                break
            raw, end = raw[:-1], end - 1
        host = re.sub(r"^(?:[a-z]+://)?(?:[^@/]*@)?", "", raw, flags=re.IGNORECASE)
        host = re.split(r"[/:?#]", host, maxsplit=1)[0].lower()
        if _host_ok(host, suffix_of, strict=False):
            out.append(Candidate("DOMAIN_NAME", m.start(), end, 0.9, "rule:url"))
    taken = [(c.start, c.end) for c in out]
    for m in _DOMAIN.finditer(text):
        if any(s <= m.start() < e for s, e in taken):
            continue
        host = m.group(1)
        tld = host.rsplit(".", 1)[1]
        if tld != tld.lower():  # "ASP.NET", "end.It": a host is almost never typed with a cased TLD
            continue
        score = _host_score(host.lower(), suffix_of)
        if score:
            out.append(Candidate("DOMAIN_NAME", m.start(1), m.end(1), score, "rule:domain"))
    return out


def _host_ok(host: str, suffix_of: Callable[[str], tuple[str, str]], strict: bool) -> bool:
    if not host or re.fullmatch(r"[\d.]+", host) or ":" in host:
        return False
    name, suffix = suffix_of(host)
    return bool(name and suffix) and not (strict and name.isdigit())


def _host_score(host: str, suffix_of: Callable[[str], tuple[str, str]]) -> float:
    labels = host.split(".")
    if any(label.isdigit() for label in labels) or not _host_ok(host, suffix_of, strict=True):
        return 0.0
    tld = labels[-1]
    if len(labels) == 2 and (tld in _FILE_EXTENSIONS or (labels[0] in _STOPWORDS and tld in _STOPWORDS)):
        return 0.0
    if labels[0] == "www" or len(labels) >= 3 or tld in _COMMON_GTLDS or len(tld) == 2:
        return 0.85
    return 0.45


# --------------------------------------------------------------------------- street addresses

_CORE_SUFFIX = (
    r"Streets?|St|Avenues?|Ave|Av|Roads?|Rd|Boulevards?|Blvd|Lanes?|Ln|Drives?|Dr|Courts?|Ct|Places?|Pl|"
    r"Terraces?|Ter|Ways?|Parkways?|Pkwy|Circles?|Cir|Highway|Hwy|Squares?|Sq|Trails?|Trl|Crescent|Cres|"
    r"Close|Alley|Aly|Plaza|Plz|Expressway|Expy|Freeway|Fwy|Turnpike|Tpke|Route|Rte"
)
# The rest of the USPS street-suffix list (Publication 28, singular or plural). Only after a
# capitalised name, and scored lower than the core list: "10 Bonus Points" is rare but possible.
_MORE_SUFFIX = "|".join(
    f"{w}s?"
    for w in sorted(
        _wordset(
            "Row Loop Path Pike Walk Mews Grove Garden Gdns Hill Height Hts Crossing Crossroad Xing Point Pt "
            "Ridge Park Pass Passage Glen Green Cove Common Creek View Vista Estate Ranch Run Landing Meadow "
            "Harbor Harbour Hollow Junction Knoll Manor Mill Orchard Pine Port Shore Spring Station Summit "
            "Valley Village Well Wood Branch Bridge Brook Burg Bypass Camp Canyon Cape Causeway Center Centre "
            "Cliff Club Corner Course Crest Curve Dale Dam Divide Extension Fall Ferry Field Flat Ford Forest "
            "Forge Fork Fort Gateway Haven Inlet Island Isle Key Lake Light Loaf Lock Lodge Mall Mission "
            "Motorway Mount Mountain Neck Oval Overpass Plain Prairie Radial Ramp Rapid Rest River Shoal "
            "Skyway Spur Stream Stravenue Throughway Trace Track Trafficway Tunnel Underpass Union Viaduct "
            "Ville Wall"
        )
    )
)
_NUMBER = r"\d{1,6}[A-Za-z]?(?:-\d{1,5}[A-Za-z]?)?"
_CAP_WORD = r"(?:[A-Z][\w'’.-]*|\d{1,3}(?:st|nd|rd|th))"
_DIRECTION = r"(?:N|S|E|W|NE|NW|SE|SW|North|South|East|West|N\.|S\.|E\.|W\.|N\.E\.|N\.W\.|S\.E\.|S\.W\.)"
_UNIT = (
    r"(?:,?[ \t]*(?i:apt\.?|apartment|suite|ste\.?|unit|fl\.?|floor|room|rm\.?|bldg\.?|building|dept\.?|"
    r"#)[ \t]*#?[ \t]*[A-Za-z]?\d[\w-]{0,5})"
)
_STREET_HEAD = r"(?<![\w#.,$€£-])" + _NUMBER + r"[ \t]+(?:" + _CAP_WORD + r"[ \t]+){1,4}?"
_STREET_TAIL = r")\b\.?(?:[ \t]+" + _DIRECTION + r"(?!\w))?" + _UNIT + r"?"
_US_STREET = re.compile(_STREET_HEAD + r"(?:" + _CORE_SUFFIX + _STREET_TAIL)
_US_STREET_MORE = re.compile(_STREET_HEAD + r"(?:" + _MORE_SUFFIX + _STREET_TAIL)
_STOP = r"(?:the|a|an|of|on|in|to|up|down|into|from|and|or|my|our|your|his|her|their|at|for|by|with|more)"
# Typed in lower case, common in chat: "i live at 123 main st apt 4". Core suffixes only, two name words
# at most, and below the default threshold unless an address cue precedes ("1 decimal place").
_US_STREET_LOWER = re.compile(
    r"(?<![\w#.,$€£-])" + _NUMBER + r"[ \t]+(?:(?!" + _STOP + r"\b)[a-z][a-z'’-]+[ \t]+){1,2}(?:street|st|"
    r"avenue|ave|road|rd|boulevard|blvd|lane|ln|drive|dr|court|ct|place|pl|terrace|way|parkway|pkwy)\b\.?"
    r"(?:[ \t]+(?:n|s|e|w|ne|nw|se|sw)\b)?" + _UNIT + r"?"
)
# "Jakobstrasse 89", "Olmstraat 69", "Kaarikatu 32", "ul. Zamkowa 33"
_EU_STREET = re.compile(
    r"\b(?:ul\.\s+)?[A-ZÀ-ÖØ-Þ][\w'’-]{2,}?(?:strasse|straße|str\.|weg|gasse|allee|platz|damm|straat|laan|"
    r"gracht|plein|kade|vej|gade|gatan|vägen|väg|veien|vegen|gata|katu|tie|kuja|utca|ulica|cesta|"
    r"steig)[ \t]+\d{1,5}[a-zA-Z]?\b"
)
# "Avenida Noruega 42", "Rue de la Paix 5", "Via Roma 10"
_ROMANCE_STREET = re.compile(
    r"\b(?:Avenida|Avda\.|Av\.|Calle|C/|Carrer|Rua|Travessa|Largo|Via|Viale|Piazza|Corso|Paseo|Plaza|Rue|"
    r"Chemin|Quai|Impasse|Allée)[ \t]+(?:(?:de|del|la|le|les|du|des|da|do|dos|das|di|della|d'|l')[ \t]*)*"
    r"[A-ZÀ-Ö][\w'’.-]*(?:[ \t]+[A-ZÀ-Ö][\w'’.-]*){0,3},?[ \t]+\d{1,5}[a-zA-Z]?\b"
)
# "82 rue Beauvau", "12 avenue des Champs-Élysées"
_FRENCH_STREET = re.compile(
    r"(?<![\w.-])\d{1,5}(?:[ \t]?(?:bis|ter))?,?[ \t]+(?:rue|avenue|av\.|boulevard|bd|place|chemin|allée|"
    r"impasse|quai|route|cours)[ \t]+(?:(?:de|du|des|la|le|les|d'|l')[ \t]*)*[A-ZÀ-Ö][\w'’-]*"
    r"(?:[ \t]+[A-ZÀ-Ö][\w'’-]*){0,3}"
)
_PO_BOX = re.compile(
    r"\b(?:P\.?\s?O\.?\s?Box|Post(?:al)?\s+Office\s+Box|Postbox|Postboks|Postfach|Apartado)\s+\d{1,6}\b",
    re.IGNORECASE,
)
# Right after an explicit address cue, suffix-less forms count too: "lives at Na Kopci 278",
# "my address is 14 Kungsgatan".
_ADDRESS_CUE = re.compile(
    r"\b(?:address(?:\s+is)?|live[sd]?\s+(?:at|on)|living\s+at|located\s+at|moved\s+to|"
    r"sen[dt]\s+(?:it\s+|them\s+|this\s+)?to|ship(?:ped)?\s+(?:it\s+)?to|deliver(?:ed)?\s+(?:it\s+)?to|"
    r"meet\s+(?:me|you|us)\s+at|taxi\s+to|return(?:ed)?\s+(?:it\s+)?to)\s*[:,-]?\s*",
    re.IGNORECASE,
)
_CUED_STREET = re.compile(
    r"\d{1,6}[A-Za-z]?[ \t]+[A-ZÀ-Þ][\w'’.-]+(?:[ \t]+[A-ZÀ-Þ][\w'’.-]*){0,3}(?:[ \t]+\d{1,5}[a-zA-Z]?\b)?"
    r"|[A-ZÀ-Þ][\w'’.-]+(?:[ \t]+[A-ZÀ-Þa-z][\w'’.-]*){0,3}?[ \t]+\d{1,5}[a-zA-Z]?\b"
)
# A unit on its own line or after a comma ("...\n Apt. 296\n ...", ", Suite 500")
_UNIT_LINE = re.compile(
    r"(?:^|(?<=[\n,]))[ \t>]*((?:Apt\.?|Apartment|Suite|Ste\.?)[ \t]*#?[ \t]*\d{1,5}[A-Za-z]?)\b",
    re.MULTILINE,
)
# "the corner of 5th Avenue and Main Street", "intersection of Elm St and Oak Ave"
_STREET_NAME = r"(?:\d{1,3}(?:st|nd|rd|th)|[A-Z][\w'’.-]*)(?:[ \t]+[A-Z][\w'’.-]*){0,3}"
_CORNER = re.compile(
    r"\b(?i:corner|intersection|junction)\s+of\s+(" + _STREET_NAME + r"\s+(?:and|&)\s+" + _STREET_NAME + r")"
)
_ADDRESS_CONTEXT = _words_re(
    ("address", "live", "lives", "living", "located", "moved", "ship", "deliver", "at")
)


# "Chapter 3 Green Light", "Season 2 Park Avenue": the number belongs to the word before it.
_NOT_STREET_LEAD = re.compile(
    r"\b(?:chapter|ch|section|sec|page|p|pp|part|step|level|season|episode|ep|volume|vol|book|figure|fig|"
    r"table|grade|class|gate|platform|track|bus|flight|exit|version|verse|act|scene|top|item|"
    r"question|problem|exercise|lesson|unit|rule|article|paragraph|line|row|column|size|day|week|year)"
    r"\.?\s*$",
    re.IGNORECASE,
)


def find_street_addresses(text: str) -> list[Candidate]:
    """Street line plus unit ("221B Baker Street", "123 Main St, Apt 4"). City, state and ZIP are
    left to GPE / ZIP_CODE, matching the reference router's separate types."""
    out = []
    for rx, score in (
        (_US_STREET, 0.8),
        (_US_STREET_MORE, 0.6),
        (_US_STREET_LOWER, 0.45),
        (_EU_STREET, 0.75),
        (_ROMANCE_STREET, 0.75),
        (_FRENCH_STREET, 0.75),
        (_PO_BOX, 0.8),
    ):
        for m in rx.finditer(text):
            if m.group()[0].isdigit() and _NOT_STREET_LEAD.search(_before(text, m.start(), 16)):
                continue
            s = score
            if _ADDRESS_CONTEXT.search(_before(text, m.start(), 32)):
                s = min(s + 0.15, 0.95)
            out.append(Candidate("STREET_ADDRESS", m.start(), m.end(), s, "rule:street_address"))
    for m in _UNIT_LINE.finditer(text):
        out.append(Candidate("STREET_ADDRESS", m.start(1), m.end(1), 0.6, "rule:unit"))
    for m in _CORNER.finditer(text):
        end = m.end(1)
        if text[end - 1] == "." and len(m.group(1).split()[-1]) > 4:  # sentence stop, not "St."
            end -= 1
        out.append(Candidate("STREET_ADDRESS", m.start(1), end, 0.7, "rule:corner"))
    for cue in _ADDRESS_CUE.finditer(text):
        m = _CUED_STREET.match(text, cue.end())
        if m:
            out.append(Candidate("STREET_ADDRESS", m.start(), m.end(), 0.65, "rule:cued_street"))
    return out


# --------------------------------------------------------------------------- ZIP codes

_STATE_ABBR = sorted(
    _wordset(
        "AL AK AZ AR CA CO CT DE DC FL GA HI ID IL IN IA KS KY LA ME MD MA MI MN MS MO MT NE NV NH NJ NM NY "
        "NC ND OH OK OR PA RI SC SD TN TX UT VT VA WA WV WI WY PR GU VI AS MP"
    )
)
_STATE_NAMES = (
    "Alabama|Alaska|Arizona|Arkansas|California|Colorado|Connecticut|Delaware|Florida|Georgia|Hawaii|"
    "Idaho|Illinois|Indiana|Iowa|Kansas|Kentucky|Louisiana|Maine|Maryland|Massachusetts|Michigan|"
    "Minnesota|Mississippi|Missouri|Montana|Nebraska|Nevada|New Hampshire|New Jersey|New Mexico|"
    "New York|North Carolina|North Dakota|Ohio|Oklahoma|Oregon|Pennsylvania|Rhode Island|"
    "South Carolina|South Dakota|Tennessee|Texas|Utah|Vermont|Virginia|Washington|West Virginia|"
    "Wisconsin|Wyoming|Puerto Rico|District of Columbia"
)
# "Washington, DC 20500", "Austin, Texas 78701", "Springfield IL 62701". Abbreviations that are
# also words/labels (ID, IN, OR, ME, OK, HI, AS) need the comma/newline so "user ID 12345" stays out.
_ZIP_AFTER_STATE = re.compile(
    r"(?:(?:,|\n)[ \t]*(?:" + "|".join(_STATE_ABBR) + r"|" + _STATE_NAMES + r")\.?|"
    r"\b[A-Z][a-z]+[ \t]+(?:"
    + "|".join(a for a in _STATE_ABBR if a not in {"ID", "IN", "OR", "ME", "OK", "HI", "AS"})
    + r")|\b(?:"
    + _STATE_NAMES
    + r"))[\s,]+(\d{5}(?:-\d{4})?)(?![\w-])"
)
# With an explicit label any common postal layout counts: US, UK, Canada, NL, "533 41", "5000-047".
_ZIP_LABELLED = re.compile(
    r"\b(?:zip|zipcode|zip\s+code|postal\s+code|post\s*code|postcode|plz)\b(?:\s*(?:is|was|number|no\.?|#))?"
    r"\s*[:#=-]?\s*("
    r"\d{5}(?:-\d{4})?|[A-Z]{1,2}\d[A-Z\d]?\s?\d[A-Z]{2}|[A-Z]\d[A-Z]\s?\d[A-Z]\d|\d{4}\s?[A-Z]{2}|"
    r"\d{3}\s\d{2}|\d{4}-\d{3}|\d{2}-\d{3}|\d{3,4}"
    r")(?![\w-])",
    re.IGNORECASE,
)


def find_zip_codes(text: str) -> list[Candidate]:
    """A 5-digit number is a ZIP only after a state or a zip/postal label."""
    out = []
    for m in _ZIP_AFTER_STATE.finditer(text):
        out.append(Candidate("ZIP_CODE", m.start(1), m.end(1), 0.85, "rule:zip_state"))
    for m in _ZIP_LABELLED.finditer(text):
        out.append(Candidate("ZIP_CODE", m.start(1), m.end(1), 0.9, "rule:zip_label"))
    return out


# --------------------------------------------------------------------------- names and places

_NAME_WORD = r"[A-ZÀ-Þ][\w'’-]+"
_NAME = _NAME_WORD + r"(?:[ \t]+(?:" + _NAME_WORD + r"|[A-Z]\.?(?=[ \t])))*"
_PERSON_CUES = (
    # "my name is Ana Smith", "Name: John A. Doe", "she named him Scott". Only the cue ignores case.
    re.compile(
        r"\b(?i:my\s+name\s+is|my\s+name's|name\s*:|i\s+am\s+called|(?:he|she|they)\s+(?:is|are|was)\s+called|"
        r"named(?:\s+(?:him|her|them|it))?|call\s+me)[ \t]+(" + _NAME + r")"
    ),
    # "Mr. John Smith", "Dr Chen": the title is not part of the name
    re.compile(r"\b(?:Mr|Mrs|Ms|Miss|Mx|Dr|Prof)\.?[ \t]+(" + _NAME + r")"),
)
# Users who never capitalise: "my name is john smith"
_LOWER_NAME_CUE = re.compile(r"\bmy\s+name\s+is\s+([a-z][\w'’-]+(?:[ \t]+[a-z][\w'’-]+)?)")
_NOT_A_NAME = _wordset(
    "not the a an and but so just still also really very called from in at on here there back now this that "
    "too going trying unknown irrelevant private secret hidden nothing i im is was"
)


def find_person_cues(text: str) -> list[Candidate]:
    """Names after an explicit cue. spaCy's small model misses many non-English names; a cue like
    "my name is" is how users actually disclose them."""
    out = []
    for rx in (*_PERSON_CUES, _LOWER_NAME_CUE):
        for m in rx.finditer(text):
            words = m.group(1).split()[:4]
            while words and words[-1].lower().rstrip(".") in _NOT_A_NAME:
                words.pop()
            if not words or words[0].lower() in _NOT_A_NAME:
                continue
            # words are separated by single spaces/tabs in the text, so the span is recoverable
            end = m.start(1) + len(words[0])
            for w in words[1:]:
                end = text.index(w, end) + len(w)
            score = 0.7 if rx is _LOWER_NAME_CUE else 0.85
            out.append(Candidate("PERSON", m.start(1), end, score, "rule:person_cue"))
    return out


_COUNTRIES = (
    "Afghanistan|Albania|Algeria|Andorra|Angola|Antigua and Barbuda|Argentina|Armenia|Australia|Austria|"
    "Azerbaijan|Bahamas|Bahrain|Bangladesh|Barbados|Belarus|Belgium|Belize|Benin|Bhutan|Bolivia|"
    "Bosnia and Herzegovina|Botswana|Brazil|Brunei|Bulgaria|Burkina Faso|Burundi|Cabo Verde|Cape Verde|"
    "Cambodia|Cameroon|Canada|Central African Republic|Chad|Chile|China|Colombia|Comoros|Congo|Costa Rica|"
    "Croatia|Cuba|Cyprus|Czech Republic|Czechia|Denmark|Djibouti|Dominica|Dominican Republic|Ecuador|Egypt|"
    "El Salvador|Equatorial Guinea|Eritrea|Estonia|Eswatini|Ethiopia|Fiji|Finland|France|Gabon|Gambia|"
    "Georgia|Germany|Ghana|Greece|Greenland|Grenada|Guatemala|Guinea|Guinea-Bissau|Guyana|Haiti|Honduras|"
    "Hong Kong|Hungary|Iceland|India|Indonesia|Iran|Iraq|Ireland|Israel|Italy|Ivory Coast|Jamaica|Japan|"
    "Jordan|Kazakhstan|Kenya|Kiribati|Kosovo|Kuwait|Kyrgyzstan|Laos|Latvia|Lebanon|Lesotho|Liberia|Libya|"
    "Liechtenstein|Lithuania|Luxembourg|Madagascar|Malawi|Malaysia|Maldives|Mali|Malta|Marshall Islands|"
    "Mauritania|Mauritius|Mexico|Micronesia|Moldova|Monaco|Mongolia|Montenegro|Morocco|Mozambique|Myanmar|"
    "Namibia|Nauru|Nepal|Netherlands|New Zealand|Nicaragua|Niger|Nigeria|North Korea|North Macedonia|"
    "Norway|Oman|Pakistan|Palau|Palestine|Panama|Papua New Guinea|Paraguay|Peru|Philippines|Poland|"
    "Portugal|Puerto Rico|Qatar|Romania|Russia|Rwanda|Saint Kitts and Nevis|Saint Lucia|Samoa|San Marino|"
    "Saudi Arabia|Senegal|Serbia|Seychelles|Sierra Leone|Singapore|Slovakia|Slovenia|Solomon Islands|"
    "Somalia|South Africa|South Korea|South Sudan|Spain|Sri Lanka|Sudan|Suriname|Sweden|Switzerland|Syria|"
    "Taiwan|Tajikistan|Tanzania|Thailand|Timor-Leste|Togo|Tonga|Trinidad and Tobago|Tunisia|Turkey|"
    "Türkiye|Turkmenistan|Tuvalu|Uganda|Ukraine|United Arab Emirates|United Kingdom|"
    "United States of America|United States|Uruguay|Uzbekistan|Vanuatu|Vatican City|Venezuela|Vietnam|"
    "Yemen|Zambia|Zimbabwe|England|Scotland|Wales|Northern Ireland|USA|UAE"
)
# Countries and US states, capitalised as names. spaCy's small model often tags them ORG or
# PERSON out of context ("We moved here from Cyprus"), or misses them in lists and addresses.
_PLACES = re.compile(r"(?<![\w-])(?:" + _COUNTRIES + r"|" + _STATE_NAMES + r")(?![\w-])")


def find_places(text: str) -> list[Candidate]:
    return [Candidate("GPE", m.start(), m.end(), 0.85, "gazetteer:place") for m in _PLACES.finditer(text)]


# --------------------------------------------------------------------------- NER post-filter

# Acronyms of PII *kinds*, units and tech terms that spaCy's small model tags as ORG/PERSON/GPE
# ("my SSN is ...", "32 MB of cache", "the SAT").
_NOT_NAMES = _wordset(
    """ssn ssns iban ip dob zip pin cvv cvc url email e-mail id api json sql http https atm iso utc gmt
    bic swift ein itin dl tel fax sms otp ok faq pdf csv usb cpu gpu ram ssd hdd os ui ux cli sdk ide
    kb mb gb tb pb kib mib gib tib ghz mhz khz hz kg km cm mm ms ns mph rpm dpi fps sat act gpa gre gmat
    toefl ielts lol omg btw fyi asap eta tbd tba ai ml llm nlp gpt ean upc gtin isbn sku imei vin"""
)
# Software, languages and platforms: spaCy's small model calls them PERSON ("Git", "Ubuntu"), ORG
# ("Kubernetes") or GPE ("Linux", "Python"), and they fill LLM prompts. Companies are not listed:
# "I work at Google" is an employer, which is what ORGANIZATION is for.
_TECH_TERMS = _wordset(
    """python java javascript typescript kotlin swift rust golang c++ c# ruby perl php scala haskell elixir
    erlang clojure lua matlab julia fortran cobol mysql postgresql postgres sqlite mongodb redis kafka
    spark hadoop elasticsearch kubernetes k8s docker helm terraform ansible jenkins git github gitlab
    bitbucket linux ubuntu debian fedora centos windows macos ios android chrome chromium firefox safari
    excel powerpoint outlook kindle dropbox slack jira confluence notion figma photoshop react angular vue
    svelte django flask fastapi rails node nodejs npm yarn pip conda numpy pandas pytorch tensorflow keras
    scikit-learn jupyter vscode vim emacs bash zsh powershell html css yaml xml markdown latex graphql grpc
    tcp udp dns ssh ssl tls aws azure gcp nginx chatgpt gpt-4 claude gemini llama bert wordpress shopify
    unity unreal blender arduino raspberry earth moon mars jupiter saturn venus mercury
    select from where limit join inner outer group order having union values insert update delete create
    drop alter index null distinct count"""
)
# Prompts open with imperatives that the NER, seeing a capital letter, takes for a name.
_IMPERATIVES = _wordset(
    """ignore revert solve unzip zip write explain translate summarize summarise list create make give tell
    show find fix convert calculate compute generate describe compare draft rewrite edit check run install
    update delete remove add open close save print read debug refactor implement build deploy merge rebase
    commit push pull clone plot sort parse format optimize optimise simplify evaluate define outline suggest
    recommend imagine pretend act help answer continue proofread paraphrase classify extract rank rate
    review analyze analyse test verify validate"""
)
_VERSIONISH = re.compile(r"v?\d+(?:\.\d+)+")
# "Node.js", "np.sqrt(x)", "os.path": code identifiers, not names.
_CODEISH = re.compile(r"[()\[\]{}=*<>|\\;`$^]|\b\w+\.[a-z_]\w*\b|\w_\w")


def keep_ner_entity(label: str, value: str, text: str = "", start: int = 0) -> bool:
    """Drop spaCy entities that are obviously not names of people/places/organisations.

    ``text``/``start`` locate the entity so a sentence-initial imperative ("Revert this commit")
    can be told from a name.
    """
    stripped = value.strip().strip("¿¡\"'“”‘’")
    if not stripped or not any(ch.isalpha() for ch in stripped):
        return False
    if "\n" in stripped:  # spans across lines are address/signature fragments glued together
        return False
    if label == "DATE_TIME":
        return ner_date_ok(stripped)
    lower = stripped.lower()
    if lower in _NOT_NAMES or lower in _TECH_TERMS or "@" in stripped or "://" in stripped:
        return False
    toks = lower.split()
    if all(tok in _TECH_TERMS or tok in _NOT_NAMES for tok in toks):
        return False
    if stripped.islower() and toks[0] in _TECH_TERMS:  # "git cherry-pick", "docker compose"
        return False
    if _CODEISH.search(stripped) or any(_VERSIONISH.fullmatch(tok) for tok in stripped.split()):
        return False
    tokens = stripped.split()
    if tokens[0].lower() in _IMPERATIVES and _sentence_initial(text, start):
        return False
    # In normally cased text a lower-case "name" is a word ("git cherry-pick"); users who never
    # capitalise ("my name is john smith") keep their entities, and nationalities are often typed
    # lower-case ("great norwegian food").
    if stripped.islower() and (len(stripped) <= 3 or (label != "NRP" and any(ch.isupper() for ch in text))):
        return False
    has_digit = any(ch.isdigit() for ch in stripped)
    if label in ("PERSON", "GPE", "NRP") and has_digit:
        return False
    # "Q4", "F1", "A3": short letter+digit codes are never organisations worth flagging
    return not (has_digit and len(stripped) <= 3)


def _sentence_initial(text: str, start: int) -> bool:
    head = text[:start].rstrip(" \t\"'“‘(*-")
    return not head or head[-1] in ".!?:;\n"
