"""Published example values: card, IBAN and phone numbers that belong to no one.

Payment networks and processors publish test card numbers (Visa's 4111 1111 1111 1111, Stripe's
4242 4242 4242 4242, ...), the IBAN registry and textbooks print example IBANs (GB82 WEST 1234 5698
7654 32), and numbering plans reserve fictional phone ranges (NANP 555-0100..0199, Ofcom's drama
numbers, ACMA's 5550/7010 blocks). A developer asking why the test card passes Luhn, or a student
checking the example IBAN's mod 97, discloses nothing; refusing them is the most common number
refusal of the project's hand-written everyday sets (fresh2, fresh3, fresh5, fresh6).

The same values are also everyone's stand-in for a real number ("charge my card 4111 1111 1111
1111" is how a PII guard is tested), so the value alone does not decide: it is dropped only when
its text names it as an example or as the subject of a check (`_EXAMPLE_TALK`) and its sentence
does not claim it as someone's own (`_OWNED`). docs/security.md, "PII that reads context".
"""

from __future__ import annotations

import re

from app.models.pii_proposals import sentence_around

# Network and processor test PANs (Visa, Mastercard, Amex, Discover, Diners, JCB, UnionPay,
# Maestro; Stripe, Braintree, Adyen, PayPal and Authorize.net documentation), digits only.
TEST_CARDS = frozenset(
    [
        "4111111111111111",
        "4242424242424242",
        "4012888888881881",
        "4000056655665556",
        "4000000000000002",
        "4000000000009995",
        "4000002500003155",
        "4000000000003220",
        "4000000000000077",
        "4005519200000004",
        "4009348888881881",
        "4012000033330026",
        "4012000077777777",
        "4217651111111119",
        "4500600000000061",
        "4444333322221111",
        "4917610000000000",
        "4988080000000000",
        "4571000000000001",
        "4917300800000000",
        "4462030000000000",
        "4007000000027",
        "4012888818888",
        "4222222222222",
        "5555555555554444",
        "5105105105105100",
        "5200828282828210",
        "5454545454545454",
        "5500000000000004",
        "2223003122003222",
        "2223000048400011",
        "378282246310005",
        "371449635398431",
        "378734493671000",
        "340000000000009",
        "341111111111111",
        "6011111111111117",
        "6011000990139424",
        "6011000400000000",
        "3056930009020004",
        "30569309025904",
        "38520000023237",
        "36227206271667",
        "3566002020360505",
        "3530111333300000",
        "6200000000000005",
        "6759649826438453",
        "6304000000000000",
        "6331101999990016",
        "5019717010103742",
    ]
)

# Example IBANs of the IBAN registry, Wikipedia and the banks' own documentation (every one
# passes mod 97; tests/unit/models/test_pii_examples.py checks), upper case without spaces.
EXAMPLE_IBANS = frozenset(
    [
        "GB82WEST12345698765432",
        "GB29NWBK60161331926819",
        "GB33BUKB20201555555555",
        "DE89370400440532013000",
        "DE44500105175407324931",
        "FR1420041010050500013M02606",
        "FR7630006000011234567890189",
        "NL91ABNA0417164300",
        "NL02ABNA0123456789",
        "ES9121000418450200051332",
        "IT60X0542811101000000123456",
        "BE68539007547034",
        "BE71096123456769",
        "CH9300762011623852957",
        "AT611904300234573201",
        "PT50000201231234567890154",
        "IE29AIBK93115212345678",
        "PL61109010140000071219812874",
        "SE4550000000058398257466",
        "DK5000400440116243",
        "NO9386011117947",
        "FI2112345600000785",
        "LU280019400644750000",
        "GR1601101250000000012300695",
        "RO49AAAA1B31007593840000",
        "SA0380000000608010167519",
        "AE070331234567890123456",
        "TR330006100519786457841326",
        "CZ6508000000192000145399",
        "HU42117730161111101800000000",
    ]
)

# Fictional phone ranges, digits only (country code dropped): NANP 555-0100..0199 after any area
# code; Ofcom's drama ranges (UK); ACMA's fictional blocks (Australia).
_FICTIONAL_PHONE = re.compile(
    r"(?:1)?\d{3}55501\d\d"  # NANP: (NPA) 555-01xx
    r"|5550(?:1\d\d)"  # NANP without area code
    r"|(?:44|0)(?:1632960\d{3}|11[3-8]4960\d{3}|1214960\d{3}|1314960\d{3}|1414960\d{3}|"
    r"1514960\d{3}|1614960\d{3}|1914980\d{3}|2079460\d{3}|2896496\d{3}|2920180\d{3}|"
    r"7700900\d{3}|8081570\d{3}|9098790\d{3}|3069990\d{3})"
    r"|(?:61|0)[2378](?:5550|7010)\d{4}"
)

# The text names the value as an example, or makes it the subject of a check or of code.
_EXAMPLE_TALK = re.compile(
    # not inside a host or an address ("ana@example.org" is no talk of examples)
    r"(?<![@.\w-])(?:tests?|testing|sample|example|examples|dummy|placeholder|fake|fictional|fictitious|"
    r"made[- ]up|sandbox|test mode|luhn|mod[- ]?97|checksum|check digits?|well[- ]known|"
    r"textbook|wikipedia|documentation|docs|stripe|braintree|adyen|regex\w*|e\.164|"
    r"libphonenumber|fixtures?|mock\w*|unit tests?|"
    # fr, de, es, pt, it, nl, ru, zh, ja
    r"exemple|essai|beispiel\w*|testkarte|ejemplo|prueba|exemplo|teste|esempio|prova|"
    r"voorbeeld|пример\w*|тестов\w*)\b(?!\.\w)"
    r"|示例|样例|测试|テスト|サンプル|例の",
    re.IGNORECASE,
)
# The sentence claims the number as someone's own, whatever else it says.
_OWNED = re.compile(
    r"\b(?:my|our|his|her|their)\s+(?:\w+\s+)?(?:card|credit card|debit card|visa|mastercard|amex|"
    r"iban|account|bank account|phone|number|mobile|cell)\b"
    r"|\b(?:charge|bill|debit|pay (?:with|from|into)|wire (?:it|the \w+|money) to)\b",
    re.IGNORECASE,
)

_EXAMPLE_TYPES = ("CREDIT_CARD", "IBAN_CODE", "PHONE_NUMBER")


def is_published_example(etype: str, value: str) -> bool:
    """The value is a published test card, example IBAN or fictional phone number."""
    if etype == "CREDIT_CARD":
        return re.sub(r"\D", "", value) in TEST_CARDS
    if etype == "IBAN_CODE":
        return re.sub(r"\s", "", value).upper() in EXAMPLE_IBANS
    if etype == "PHONE_NUMBER":
        return bool(_FICTIONAL_PHONE.fullmatch(re.sub(r"\D", "", value)))
    return False


def named_as_example(text: str, etype: str, start: int, end: int) -> bool:
    """A published example value that its text talks about as one, not as anyone's own."""
    if etype not in _EXAMPLE_TYPES or not is_published_example(etype, text[start:end]):
        return False
    return bool(_EXAMPLE_TALK.search(text)) and not _OWNED.search(sentence_around(text, start, end))
