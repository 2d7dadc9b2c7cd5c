"""Durable facts in a user's turn, by rules (no model: measured on tests/unit/data, see
docs/memories.md for precision and recall).

A fact is a first-person statement that will still be true in a later conversation: a name,
a preference, where the user works or lives, a diet or allergy, an explicit "remember that".
Questions, requests ("I want to write ...") and hypotheticals ("if I were ...") are not
facts. Each fact is rewritten in the third person ("I prefer tea" -> "The user prefers
tea."), which is what a later system message can say to any model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_FACT_CHARS = 200
MAX_FACTS_PER_TURN = 8

_SENTENCES = re.compile(r"(?<=[.!?;])\s+|\n+|,?\s+\band\s+(?=(?:I|I'm|my|please)\b)", re.IGNORECASE)
_SKIP = re.compile(
    r"^\s*(?:if|when|what|how|why|who|where|do|does|did|can|could|would|should|is|are|imagine|"
    r"translate|write|say|rephrase|summari[sz]e|correct|repeat|spell)\b",
    re.I,
)
_NAME = r"([A-Z][\w'-]+(?: [A-Z][\w'-]+)?)"
_PHRASE = r"(.{2,160}?)"

# (category, pattern, third-person template: {0} is the captured phrase)
_RULES: list[tuple[str, re.Pattern[str], str]] = [
    ("name", re.compile(rf"\b(?i:my name is) {_NAME}"), "The user's name is {0}."),
    ("name", re.compile(rf"\b(?i:call me|I go by) {_NAME}"), "The user's name is {0}."),
    (
        "remember",
        re.compile(rf"\b(?:please )?(?:remember|note|keep in mind) that {_PHRASE}$", re.I),
        "The user asked to remember: {0}.",
    ),
    (
        "allergy",
        re.compile(rf"\bI(?:'m| am) (?:severely |very )?(allergic to {_PHRASE})$", re.I),
        "The user is {0}.",
    ),
    (
        "diet",
        re.compile(
            r"\bI(?:'m| am) (?:a )?(vegan|vegetarian|pescatarian|lactose intolerant|gluten[- ]free|"
            r"diabetic|coeliac|celiac)\b",
            re.I,
        ),
        "The user is {0}.",
    ),
    (
        "preference",
        re.compile(
            rf"\bI (?:really |strongly |always |usually )?(prefer|like|love|enjoy|hate|dislike|"
            rf"don't like|do not like) {_PHRASE}$",
            re.I,
        ),
        "The user {0} {1}.",
    ),
    (
        "work",
        re.compile(rf"\bI(?:'m| am)? ?(?:currently )?(work(?:ing)? (?:at|for|on|as|in)) {_PHRASE}$", re.I),
        "The user {0} {1}.",
    ),
    (
        "location",
        re.compile(rf"\bI ?(live|am based|'m based|grew up) in {_PHRASE}$", re.I),
        "The user {0} in {1}.",
    ),
    (
        "location",
        re.compile(rf"\bI(?:'m| am) (?:originally )?from {_PHRASE}$", re.I),
        "The user is from {0}.",
    ),
    ("language", re.compile(rf"\bI ?(speak|am learning|'m learning) {_PHRASE}$", re.I), "The user {0} {1}."),
    ("age", re.compile(r"\bI(?:'m| am) (\d{1,3}) years old\b", re.I), "The user is {0} years old."),
    (
        "about",
        re.compile(
            rf"\bmy (favou?rite [a-z ]{{2,30}}|birthday|time ?zone|pronouns|native language|"
            rf"(?:wife|husband|partner|son|daughter|dog|cat)(?:'s name)?|job|role|team|company) "
            rf"(?:is|are) {_PHRASE}$",
            re.I,
        ),
        "The user's {0} is {1}.",
    ),
]
_VERBS = {
    "prefer": "prefers",
    "like": "likes",
    "love": "loves",
    "enjoy": "enjoys",
    "hate": "hates",
    "dislike": "dislikes",
    "don't like": "does not like",
    "do not like": "does not like",
    "speak": "speaks",
    "am learning": "is learning",
    "'m learning": "is learning",
    "live": "lives",
    "am based": "is based",
    "'m based": "is based",
    "grew up": "grew up",
}
_REQUEST_OBJECTS = re.compile(r"^(?:to|it when you|that you|you to|if|when)\b", re.I)
_PRONOUNS = [
    (re.compile(r"\bmy\b", re.I), "their"),
    (re.compile(r"\bI'm\b"), "they are"),
    (re.compile(r"\bI am\b"), "they are"),
    (re.compile(r"\bme\b", re.I), "them"),
    (re.compile(r"\bI\b"), "they"),
]


@dataclass(frozen=True)
class Fact:
    category: str
    text: str


def _third_person(phrase: str) -> str:
    for pattern, replacement in _PRONOUNS:
        phrase = pattern.sub(replacement, phrase)
    return phrase.strip().rstrip(".!;, ")


def _fact(category: str, template: str, groups: tuple[str, ...]) -> Fact | None:
    parts = [g.strip() for g in groups if g is not None]
    if category in ("preference", "work", "language", "location") and len(parts) == 2:
        verb = parts[0].lower()
        if category == "preference" and _REQUEST_OBJECTS.match(parts[1]):
            return None  # "I like it when you ..." / "I prefer to ..." asks for something now
        if category == "work":  # "work at", "working on" -> "works at", "works on"
            parts[0] = "works " + verb.split()[-1]
        else:
            parts[0] = _VERBS.get(verb, verb)
    parts = [_third_person(p) if i == len(parts) - 1 else p for i, p in enumerate(parts)]
    if not parts[-1]:
        return None
    text = template.format(*parts)
    return Fact(category, text[:MAX_FACT_CHARS])


def extract_facts(turn: str) -> list[Fact]:
    """The durable facts of one user turn, in order, without repeats."""
    facts: list[Fact] = []
    for sentence in _SENTENCES.split(turn or ""):
        sentence = sentence.strip()
        if not sentence or sentence.endswith("?") or _SKIP.match(sentence):
            continue
        sentence = sentence.rstrip(".!;, ")
        for category, pattern, template in _RULES:
            match = pattern.search(sentence)
            if match is None:
                continue
            fact = _fact(category, template, match.groups())
            if fact is not None and fact not in facts:
                facts.append(fact)
            break
        if len(facts) >= MAX_FACTS_PER_TURN:
            break
    return facts
