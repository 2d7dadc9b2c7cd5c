"""PII rules for structured identifiers: phone numbers, credit cards (Luhn), US SSNs, US
driver licences and domain names / URLs (IP addresses: app/models/pii_ip.py).

Pure regex / arithmetic, no model and no I/O (see app/models/pii_rules.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from app.models.pii_dates import looks_like_date
from app.models.pii_proposals import (
    EntityProposal,
    glued_to_number,
    has_id_label_before,
    in_arithmetic,
    in_number_talk,
    text_after,
    text_before,
    words_re,
    wordset,
)

# --------------------------------------------------------------------------- phone numbers

_PHONE_CONTEXT = words_re(
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
# Phone words of the other languages whose number talk is read (app/models/pii_proposals.py): a
# phone context, and a cue that a number in a calculating sentence is still a phone number.
_STRONG_PHONE_CUE_WORLD = re.compile(
    r"\b(?:téléphone\w*|appelle\w*|appeler|rappel\w*|telefon\w*|tel[eé]fono|telefone|"
    r"telefoon\w*|handynummer|anruf\w*|m[oó]vil|celular|cellulare|llam\w*|chiam\w*|"
    r"mobiel|bellen|zadzwo\w*|kom[oó]rk\w*|телефон\w*|мобильн\w*|мобільн\w*|звон\w*|позвон\w*|"
    r"дзвон\w*|подзвон\w*|هاتف\w*|جوال|موبايل|اتصل\w*|واتساب)\b"
    r"|电话|手机|致电|打给|拨打|短信|微信|電話|携帯|ケータイ|전화|휴대폰|핸드폰|카톡|फ़ोन|फोन|मोबाइल",
    re.IGNORECASE,
)
_PHONE_AFTER = re.compile(r"^\s*[-(]?\s*(?:office|fax|mobile|cell|home|work|desk|ext\b|x\d)")


def _phone_context(text: str, start: int, end: int) -> bool:
    before = text_before(text, start, 48)
    return bool(
        _PHONE_CONTEXT.search(before)
        or _STRONG_PHONE_CUE_WORLD.search(before)
        or _PHONE_AFTER.search(text_after(text, end, 12))
    )


# Words that say "this is a phone number" even in a sentence that also does arithmetic; "number"
# alone does not ("the number 2147483647 is prime").
_STRONG_PHONE_CUE = words_re(
    (
        r"phone",
        r"tel",
        r"telephone",
        r"mobile",
        r"cell",
        r"call",
        r"calling",
        r"text",
        r"sms",
        r"whatsapp",
        r"fax",
        r"dial",
        r"reach",
        r"ring",
        r"landline",
        r"hotline",
    )
)


# A figure written with thousands separators ("9 876 543 210", "1.234.567.890", "1,234,567,890").
_GROUPED_FIGURE = re.compile(r"\d{1,3}(?:([ \u00a0\u202f.,'])\d{3})(?:\1\d{3})+")


def phone_in_number_talk(text: str, start: int, end: int) -> bool:
    """A bare digit run (no separators, no +), or a figure grouped in thousands, in a sentence
    that calculates with it and says nothing of phones, in any language whose number talk is
    read: the subject of a maths question ("What is 4815162342 divided by 7?", "Сколько будет
    9 876 543 210 умножить на 12?")."""
    value = text[start:end]
    if not (value.isdigit() or _GROUPED_FIGURE.fullmatch(value)):
        return False
    before = text_before(text, start, 48)
    cued = _STRONG_PHONE_CUE.search(before) or _STRONG_PHONE_CUE_WORLD.search(before)
    return in_number_talk(text, start, end) and not cued


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
    if (
        has_id_label_before(text, start)
        or in_arithmetic(text, start, end)
        or glued_to_number(text, start, end)
    ):
        return 0.0
    if phone_in_number_talk(text, start, end):
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
    r"(?<![\w+.-])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,5}\)[ .-]?)?\d{2,12}(?:[ .-]\d{2,8}|/\d{3,8}){0,4}"
    r"(?:[ ]?(?:x|ext\.?)[ ]?\d{1,5})?(?!\w|[-.]\d)",
    re.IGNORECASE,
)


_INTL_PHONE = re.compile(
    r"(?<![\w+.-])(?:\+|00)[1-9]\d{0,2}(?:[ .\-/]?\(0\)|[ .\-/]?\(\d{1,4}\))?(?:[ .\-/]?\d{1,5}){2,6}(?![\w-]|[./]\d)"
)
_BEFORE_OPERAND = re.compile(r"[\d)=*/^<>×÷%-]\s*$")


def find_intl_phones(text: str) -> list[EntityProposal]:
    """ "+44 20 7946 0958", "+49 (0)30 1234-5678", "0044 ...", "+33 1.23.45.67.89", "+49/30/1234567":
    a country-code prefix is specific enough, whatever the grouping and separators, to need no
    phone word (phonenumbers rejects several of these layouts)."""
    out = []
    for m in _INTL_PHONE.finditer(text):
        value = m.group()
        digits = sum(ch.isdigit() for ch in value.replace("(0)", ""))
        if not 8 <= digits <= 15 or has_id_label_before(text, m.start()):
            continue
        if _BEFORE_OPERAND.search(text[max(0, m.start() - 3) : m.start()]):  # "3 +44 20" is a sum
            continue
        if value.startswith("00") and not re.match(r"00\d{1,3}[ .\-/(]", value):  # "0012345678": an ID
            continue
        score = 0.75 if value.startswith("+") else 0.65
        if _phone_context(text, m.start(), m.end()):
            score += 0.2
        out.append(EntityProposal("PHONE_NUMBER", m.start(), m.end(), score, "rule:intl_phone"))
    return out


def find_context_phones(text: str) -> list[EntityProposal]:
    out = []
    for m in _LOCAL_PHONE.finditer(text):
        digits = sum(ch.isdigit() for ch in m.group())
        if not 6 <= digits <= 15 or not _phone_context(text, m.start(), m.end()):
            continue
        # "030/1234 5678": a slash after a trunk "0" is an area code separator, not a division
        slashed_area = re.match(r"0\d{1,4}/\d", m.group()) is not None
        if has_id_label_before(text, m.start()) or (
            not slashed_area and in_arithmetic(text, m.start(), m.end())
        ):
            continue
        if phone_in_number_talk(text, m.start(), m.end()):
            continue
        if looks_like_date(m.group()) or not _phone_shaped(m.group()):
            continue
        out.append(EntityProposal("PHONE_NUMBER", m.start(), m.end(), 0.7, "rule:context_phone"))
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
_CARD_CONTEXT = words_re(
    ("card", "cards", "credit", "debit", "visa", "mastercard", "amex", "cc", "pan", "number", "maestro")
)
# What says a card is the user's own: payment words anywhere in the text ("number" is not one).
_CARD_OWNED = words_re(
    (
        r"cards?",
        r"credit",
        r"debit",
        r"visa",
        r"mastercard",
        r"amex",
        r"maestro",
        r"discover",
        r"pay\w*",
        r"paid",
        r"charged?",
        r"billing",
        r"bill",
        r"exp(?:iry|ires|iration)?",
        r"cvv",
        r"cvc",
        r"subscription",
        r"checkout",
        r"purchase\w*",
        r"order",
        r"refund\w*",
        r"bank",
    )
)


# Payment words of the other languages whose number talk is read.
_CARD_OWNED_WORLD = re.compile(
    r"\b(?:carte|cartes|karte\w*|tarjeta\w*|cart[aã]o|carta|kaart\w*|karta|kart[ıi]\w*|карт\w*|"
    r"кредит\w*|paie\w*|pag[aoó]\w*|bezahl\w*|zahlung\w*|abbuch\w*|betal\w*|płat\w*|öde\w*|оплат\w*|плат[её]ж\w*|"
    r"banque|bank\w*|banco|банк\w*|بطاق\w*|دفع|مصرف|بنك)\b"
    r"|信用卡|银行卡|付款|支付|クレジット|カード|支払|카드|결제|कार्ड|भुगतान",
    re.IGNORECASE,
)


def card_in_number_talk(text: str, start: int, end: int) -> bool:
    """A Luhn-valid number that a sentence calculates with or checks, in a text that says nothing
    of paying (in any language whose number talk is read): a number-theory question ("Is
    4111111111111111 divisible by 3?"), not a card the user disclosed."""
    lowered = text.lower()
    owned = _CARD_OWNED.search(lowered) or _CARD_OWNED_WORLD.search(lowered)
    return in_number_talk(text, start, end) and not owned


def find_credit_cards(text: str) -> list[EntityProposal]:
    out = []
    for m in _CARD.finditer(text):
        raw = m.group()
        seps = {ch for ch in raw if not ch.isdigit()}
        if len(seps) > 1:
            continue
        digits = re.sub(r"\D", "", raw)
        if not (12 <= len(digits) <= 19 and luhn_ok(digits)):
            continue
        if has_id_label_before(text, m.start()) or in_arithmetic(text, m.start(), m.end()):
            continue
        if card_in_number_talk(text, m.start(), m.end()):
            continue
        context = bool(_CARD_CONTEXT.search(text_before(text, m.start(), 48)))
        # An unknown issuer prefix is still a card when the text says so ("card 8800 ...", test
        # and private-label ranges); without a card word it is more often an account or tracking ID.
        if not _CARD_IIN.match(digits) and not (context and len(digits) == 16):
            continue
        if len(digits) < 13 and not context:
            continue
        out.append(
            EntityProposal("CREDIT_CARD", m.start(), m.end(), 0.95 if context else 0.7, "rule:card_luhn")
        )
    return out


# --------------------------------------------------------------------------- US SSN

_SSN_CONTEXT = re.compile(r"\b(?:ssn|ssns|social|soc\.?\s*sec|ss)\b")
_SSN_DASHED = re.compile(r"(?<![\w-])(\d{3})-(\d{2})-(\d{4})(?![\w-])")
_SSN_LOOSE = re.compile(r"(?<![\w.-])(\d{3})([ .]?)(\d{2})\2(\d{4})(?![\w.-])")


def _ssn_valid(area: str, group: str, serial: str) -> bool:
    # SSA never issues area 000, 666 or 900-999, group 00 or serial 0000.
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def find_us_ssns(text: str) -> list[EntityProposal]:
    """ddd-dd-dddd is specific enough on its own; other layouts need an SSN word nearby.

    Unlike Presidio we do not reject famous sample numbers (078-05-1120): a user who types one
    after "my SSN is" is still sharing something shaped like an SSN.
    """
    out: dict[tuple[int, int], EntityProposal] = {}
    for m in _SSN_DASHED.finditer(text):
        if _ssn_valid(*m.groups()) and not has_id_label_before(text, m.start()):
            ctx = bool(_SSN_CONTEXT.search(text_before(text, m.start(), 48)))
            out[m.span()] = EntityProposal("US_SSN", m.start(), m.end(), 0.95 if ctx else 0.65, "rule:ssn")
    for m in _SSN_LOOSE.finditer(text):
        area, _, group, serial = m.groups()
        if m.span() in out or not _ssn_valid(area, group, serial):
            continue
        if _SSN_CONTEXT.search(text_before(text, m.start(), 48)):
            out[m.span()] = EntityProposal("US_SSN", m.start(), m.end(), 0.85, "rule:ssn_context")
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


def find_driver_licenses(text: str) -> list[EntityProposal]:
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
        if not ok or looks_like_date(value):
            continue
        out.append(EntityProposal("US_DRIVER_LICENSE", v.start(1), v.end(1), 0.85, "rule:driver_license"))
    return out


# --------------------------------------------------------------------------- domains / URLs

# Extensions that are also ccTLDs/gTLDs; "main.py" or "README.md" is a file, not a host.
_FILE_EXTENSIONS = wordset(
    "py sh md rs pl pm zip mov cc so ps tf mk am ac in ml sc st ts lo ko js cs go rb kt bz gz "
    "xz mp sb ms ini cfg conf log txt bak tmp lock"
)
_STOPWORDS = wordset(
    "a an and are as at be but by do for go he if in is it me my no not of ok on or so that the "
    "this to up us was we yes you"
)
# Common enough that a bare "name.tld" is almost surely a host; rare gTLDs (.world, .today,
# .new) also turn up in sentences that lost the space after a full stop, so they need www/3 labels.
_COMMON_GTLDS = wordset(
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


def find_domains(text: str, suffix_of: Callable[[str], tuple[str, str]]) -> list[EntityProposal]:
    """DOMAIN_NAME for host names and URLs whose host is a name (an IP host is IP_ADDRESS's).

    ``suffix_of(host) -> (registrable_domain_label, public_suffix)`` is the public-suffix
    lookup (tldextract's bundled snapshot); it is injected so this module stays dependency-free.
    """
    out: list[EntityProposal] = []
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
            out.append(EntityProposal("DOMAIN_NAME", m.start(), end, 0.9, "rule:url"))
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
            out.append(EntityProposal("DOMAIN_NAME", m.start(1), m.end(1), score, "rule:domain"))
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
