"""Knowledge-question register: when a PERSON or NRP is not personal data.

"Explain the moral philosophy of Kant", "Why did Napoleon invade Russia?", "the French
revolution's causes" and exam questions ("Which of the following ...") name public or
historical figures, authors of ideas, or nationalities in history: a PII policy protects
private people, so these mentions should not trip it. A text is in the knowledge register when

- it is framed as an exam/reading question ("which of the following", "refers to the
  following", "select the best translation"), or
- it asks about ideas, history or law (a knowledge verb such as "explain", "why did", or a
  question or cloze ending in "?" / ":", plus a domain noun such as "philosophy", "revolution",
  "treaty"), or
- it attributes an idea to someone ("Kant's categorical imperative", "Ross claims that ..."),

and nothing in it is personal: no "my/our/your <relative or acquaintance>" ("my neighbour
John Miller"), no salutation or sign-off name, no contact data (e-mail, phone, card, SSN, IBAN, licence).
Then the NER's PERSON/NRP and titled names ("Mr. Smith" in a law vignette) are dropped; names a
user discloses ("my name is ...") and greeting names are kept.

Pure regex, no model and no I/O (see app/models/pii_rules.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from app.models.pii_proposals import EntityProposal

_EXAM_FRAME = re.compile(
    r"\b(?:which\s+of\s+the\s+following|refers?\s+to\s+the\s+following|the\s+following\s+(?:passage|"
    r"excerpt|quote|quotation|information|statements?|arguments?|text|poem|speech|letter|source|key|formulas?|"
    r"propositions?|sentences?)|select\s+the\s+(?:best|correct|most)|identify\s+the\s+(?:conclusion|"
    r"antecedent|consequent|premises?|main)|(?:according\s+to|in)\s+the\s+(?:passage|excerpt|author|"
    r"quotation|source|above)|(?:best|most\s+likely)\s+(?:describes?|explains?|characteri[sz]es?|"
    r"supports?|reflects?|represents?|illustrates?|summari[sz]es?|translation|symboli[sz]ation)|"
    r"answer\s+(?:choices|options)|according\s+to\s+(?-i:[A-Z])\w*|refers\s+to\s+what|in\s+the\s+context\s+of|"
    r"most\s+likely|the\s+court\s+(?:should|will|would|must|may|is\s+likely)|"
    r"strongest\s+(?:argument|defen[cs]e|case|constitutional)|(?:probable|likely)\s+(?:result|outcome))\b"
    # a blank to fill, or a cited source "..., Detroit Free Press (3 July 1970): ...": no word
    # boundary after either, so they sit outside the \b group
    r"|_{3,}|\((?:\d{1,2}\s+)?[A-Z][a-z]+\.?\s+\d{4}\)\s*:",
    re.IGNORECASE,
)
_ASKS = re.compile(
    r"\b(?:explain|describe|discuss|summari[sz]e|analy[sz]e|compare|contrast|evaluate|outline|"
    r"why\s+(?:did|was|were|does|do|is|are)|how\s+(?:did|was|were|does|do)|what\s+(?:was|were|did|is|are)|"
    r"who\s+(?:was|were|is)|when\s+(?:did|was|were)|tell\s+me\s+about|teach\s+me|essay\s+on|"
    r"according\s+to)\b",
    re.IGNORECASE,
)
_DOMAIN = re.compile(
    r"\b(?:philosoph\w*|theor(?:y|ies|em)|doctrines?|ethics?|ethical|imperatives?|metaphysics|"
    r"epistemolog\w*|ontolog\w*|arguments?|concepts?|principles?|ideas?|ideolog\w*|thought|thinkers?|"
    r"school\s+of|revolution\w*|empires?|imperial\w*|wars?|dynast\w*|reign|centur(?:y|ies)|kingdoms?|"
    r"republic|monarch\w*|treat(?:y|ies)|constitution\w*|amendments?|court|supreme|statutes?|"
    r"legislation|jurisprudence|precedents?|ruling|rights|history|historical|historians?|ancient|"
    r"medieval|epochs?|millenni(?:um|a)|besieg\w*|sieges?|defeat\w*|annex\w*|occupation|colonial\w*|independence|invad\w+|invasion|battles?|conquest|movement|renaissance|"
    r"reformation|enlightenment|era|regime|rebellion|uprising|civili[sz]ation|religio\w*|myth\w*|"
    r"novels?|poems?|poetry|painting|symphon\w*|composer|authors?|wrote|written|scientists?|"
    r"discover\w*|invent\w*|equations?|economics|economists?|capitalism|socialism|communism|"
    r"democracy|politic\w*|president|king|queen|emperor|pope|pharaoh|reforms?|cultures?|"
    r"archaeolog\w*|prehistor\w*|neolithic|paleolithic|settlements?|migrations?|conquer\w*|"
    r"tribes?|peoples|defendants?|plaintiffs?|prosecut\w*|liab\w*|guilty|contracts?|deeds?|"
    r"lawsuit|sued?|testator|grantor|grantee|convicted|conviction|negligen\w*|moral\w*|duty|duties|"
    r"utilitarian\w*|virtues?|justice|gods?|divine|lord|sacred|scriptures?|gospels?|festivals?|rituals?|"
    r"faith|church|temples?|monks?|saints?|prophets?|founder|traditions?|deity|deities|worship|"
    r"logic|predicate|propositional|translat\w*|recit\w*|rabbin\w*|conversion|commentar\w*)\b",
    re.IGNORECASE,
)
# "Ross claims that ...", "Wellman defends the position that ...": an author and a thesis.
_ATTRIBUTION = re.compile(
    r"\b(?:argues?|argued|claims?|claimed|contends?|maintains?|asserts?|defends?|suggests?|holds?|"
    r"proposes?|denies|rejects?|insists?|cites?|calls?|believes?|believed|famously|thinks?|says?)\s+(?:that\b|the\s+"
    r"(?:view|position|claim|thesis|idea|principle|theory)\b)|\b(?:clarifies|points\s+out|identifies|defines|"
    r"distinguishes|endorses|critici[sz]es)\s|\b(?:argues|defends|proposes)\s+(?:a|an|the|we|for|against)\b|"
    # "In responding to terrorism, says Walzer, it is ...": an inverted attribution
    r",\s*(?:says|said|argues|argued|claims|claimed|writes|wrote|notes|observes|contends|insists)\s+"
    r"(?-i:[A-Z])[\w.’'-]+(?:\s+(?-i:[A-Z])[\w.’'-]+){0,2}\s*,|"
    # "the kinds of considerations he discusses in "War and Massacre"": a work and its author
    r"\bdiscuss(?:es|ed)\s+in\s+[\"“(]",
    re.IGNORECASE,
)
_IDEA_OF = re.compile(
    r"[’']s\s+(?:[\w-]+\s+){0,2}(?:theor(?:y|ies|em)|philosophy|imperative|arguments?|ethics|"
    r"critique|laws|principles?|concepts?|doctrine|paradox|thesis|hypothesis|conjecture|"
    r"equations?|dilemma|wager|razor|dialogues?|writings|teachings?|notion|conception|view|conclusion|"
    r"formulations?|thought\s+experiments?|original\s+position|objections?|proposal|article|reading|"
    r"approach|essay|book|paper)\b",
    re.IGNORECASE,
)
# An exam's cloze left open for the answer choices, with or without a colon: "The Maya derived
# their writing from the:", "X is an example of:", "Van den Haag is". A message stops on these
# words only when cut off, so the cloze marks a knowledge question without a domain noun.
_OPEN_CLOZE = re.compile(
    r"\b(?:of|to|that|is|are|was|were|by|as|from|because|the|an?|be|involves?|indicates?)\s*:?\s*$",
    re.IGNORECASE,
)
# A cloze ends mid-sentence: "Carens defends a form of", "moral disagreements involve".
_CLOZE_END = re.compile(
    r"\b(?:of|to|that|is|are|was|were|by|as|from|because|the|a|an|in|on|for|with|involves?|be)\s*$",
    re.IGNORECASE,
)
_RELATION = re.compile(
    r"\b(?:my|our|your)\s+(?:[\w-]+\s+)?(?:neighbou?rs?|friends?|boss|colleagues?|"
    r"co-?workers?|wife|husband|partner|son|daughter|mother|father|mom|mum|dad|brother|sister|aunt|"
    r"uncle|cousin|grand(?:ma|mother|pa|father|son|daughter)|landlord|landlady|tenant|room-?mate|"
    r"flatmate|girlfriend|boyfriend|fianc[eé]e?|manager|employee|client|patient|child|kids?|baby|"
    r"niece|nephew|ex|teacher|doctor|lawyer|classmate)\b",
    re.IGNORECASE,
)
# Contact data and greeting names make a text personal whatever else it asks.
# no STREET_ADDRESS: its cue-based forms also match "February 23" in a dated quotation
_PERSONAL_TYPES = frozenset(
    {"EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD", "US_SSN", "IBAN_CODE", "US_DRIVER_LICENSE"}
)
_PERSONAL_SOURCES = frozenset({"rule:greeting", "rule:mention", "rule:name_line"})
# Which findings a knowledge question drops: the NER's people and nationalities, and titled names.
# (a speaker label or "X lives in" may be a quoted dialogue or a historical figure too).
# A name line only drops under exam framing: elsewhere it makes the text personal.
_PUBLIC_SOURCES = (
    "spacy:",
    "rampart:",
    "rule:person_title",
    "rule:name_position",
    "rule:person_speech",
    "rule:name_line",
)


def _asks(text: str) -> bool:
    """A question, or a prompt left open for an answer ("... is called:", "a form of")."""
    return bool(_ASKS.search(text) or text.rstrip().endswith(("?", ":")) or _CLOZE_END.search(text))


def _is_exam(text: str) -> bool:
    """Reading/exam framing: quoted passages in it speak of "my father", "our neighbours"."""
    return bool(_EXAM_FRAME.search(text))


def is_knowledge_question(text: str) -> bool:
    """Exam framing, a question about ideas/history/law, or an idea attributed to someone."""
    if _is_exam(text) or _IDEA_OF.search(text) or _ATTRIBUTION.search(text) or _OPEN_CLOZE.search(text):
        return True
    return bool(_asks(text) and _DOMAIN.search(text))


def is_personal(text: str, candidates: Sequence[EntityProposal], exam: bool = False) -> bool:
    """Contact data; outside exam framing also a relative/acquaintance or a greeting name (an exam's
    quoted letters and speeches have those too)."""
    if any(c.type in _PERSONAL_TYPES for c in candidates):
        return True
    if exam:
        return False
    return bool(_RELATION.search(text)) or any(c.source in _PERSONAL_SOURCES for c in candidates)


def _public(c: EntityProposal, types: tuple[str, ...]) -> bool:
    return c.type in types and c.source.startswith(_PUBLIC_SOURCES)


def drop_public_mentions(text: str, candidates: list[EntityProposal]) -> list[EntityProposal]:
    """Without PERSON/NRP candidates of public figures and nationalities in a knowledge question.

    A nationality or religion in a question ("What was the Chinese technique of ...?") needs no
    domain noun: it is personal data only when said of someone, which a personal cue shows.
    """
    if not any(_public(c, ("PERSON", "NRP")) for c in candidates):
        return candidates
    if is_personal(text, candidates, exam=_is_exam(text)):
        return candidates
    # A full name is no evidence: "Mr. Steven Church" is not a question about a church. A single
    # word may be the domain noun the NER mistook for a name ("the synoptic Gospels").
    names = [c for c in candidates if _public(c, ("PERSON", "NRP")) and " " in text[c.start : c.end].strip()]
    masked = _blank(text, names)
    if is_knowledge_question(masked):
        dropped: tuple[str, ...] = ("PERSON", "NRP")
    elif _asks(masked):
        dropped = ("NRP",)
    else:
        return candidates
    return [c for c in candidates if not _public(c, dropped)]


def _blank(text: str, spans: Sequence[EntityProposal]) -> str:
    """``text`` with each span replaced by a capitalised placeholder of the same length, so a
    word inside a name cannot count as a domain noun while "according to <Name>" still reads."""
    chars = list(text)
    for c in spans:
        chars[c.start : c.end] = "X" * (c.end - c.start)
    return "".join(chars)
