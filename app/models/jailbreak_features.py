"""The jailbreak guard's text features, shared with scripts/train_jailbreak.py so training
and run time compute them identically: hashed char/word n-gram tf features and the
high-precision regexes for well-known attack phrasings (name, detection type, logit bonus).
"""

from __future__ import annotations

import re
import unicodedata
import zlib

import numpy as np

# ---------------------------------------------------------------------------------------------
# Hashed n-gram features (shared with the training script so both sides hash identically)
# ---------------------------------------------------------------------------------------------

NGRAM_BITS = 18
CHAR_NGRAMS = (3, 4, 5)
HEAD_CHARS = 6000  # long inputs: score the head and the tail, where instructions usually sit
TAIL_CHARS = 2000
_MASK64 = 0xFFFFFFFFFFFFFFFF
_FNV = np.uint64(1099511628211)
_GOLDEN = 0x9E3779B97F4A7C15
_WORD = re.compile(r"\w+")
_SPACE = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """NFKC folds full-width and other look-alike forms; lower-case; one space between words."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = _SPACE.sub(" ", text).strip()
    if len(text) > HEAD_CHARS + TAIL_CHARS:
        text = text[:HEAD_CHARS] + " " + text[-TAIL_CHARS:]
    return text


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: spreads the low-entropy rolling hash over all bits."""
    h = h ^ (h >> np.uint64(30))
    h = h * np.uint64(0xBF58476D1CE4E5B9)
    h = h ^ (h >> np.uint64(27))
    h = h * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


def ngram_tf(text: str, bits: int = NGRAM_BITS) -> tuple[np.ndarray, np.ndarray]:
    """Bucket ids and sublinear term frequencies (1 + log tf) of one text's n-grams.

    Hashing (not a vocabulary) keeps the artifact a fixed-size array and the run time free of
    sklearn; deterministic hashes (no Python ``hash``) keep it stable across processes.
    """
    norm = normalize_text(text)
    if not norm:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    data = np.frombuffer((" " + norm + " ").encode("utf-8"), np.uint8).astype(np.uint64)
    parts: list[np.ndarray] = []
    for n in CHAR_NGRAMS:
        width = len(data) - n + 1
        if width <= 0:
            continue
        h = np.full(width, (n * _GOLDEN) & _MASK64, np.uint64)
        for k in range(n):
            h = h * _FNV + data[k : k + width]
        parts.append(_mix(h))
    words = _WORD.findall(norm)
    if words:
        wh = np.fromiter((zlib.crc32(w.encode("utf-8")) for w in words), np.uint64, len(words))
        parts.append(_mix(wh + np.uint64(1 << 40)))
        if len(wh) > 1:
            parts.append(_mix(wh[:-1] * _FNV + wh[1:] + np.uint64(2 << 40)))
    buckets = (np.concatenate(parts) & np.uint64((1 << bits) - 1)).astype(np.int64)
    idx, counts = np.unique(buckets, return_counts=True)
    return idx, (1.0 + np.log(counts)).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# High-precision regexes: (name, detection type, logit bonus, pattern)
# ---------------------------------------------------------------------------------------------

_I = re.IGNORECASE
JAILBREAK_REGEXES: tuple[tuple[str, str, float, re.Pattern[str]], ...] = (
    (
        "ignore_previous_instructions",
        "instruction_override",
        2.0,
        re.compile(
            r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:all\s+|any\s+|every\s+)?(?:of\s+)?"
            r"(?:the\s+|your\s+|these\s+|those\s+)?(?:previous|prior|above|earlier|preceding|initial|"
            r"original|system|safety)\s+(?:instructions?|prompts?|rules|directives?|guidelines|"
            r"commands|programming|constraints)\b",
            _I,
        ),
    ),
    (
        "reveal_system_prompt",
        "prompt_extraction",
        2.0,
        re.compile(
            r"\b(?:reveal|print|show|repeat|output|display|leak|dump|spell out|tell me)\b[^.?!\n]{0,20}"
            r"\byour\s+(?:\w+\s+){0,2}(?:prompt|instructions|system message)\b"
            r"|\b(?:repeat|print|output)\s+(?:all\s+|everything\s+|the\s+text\s+|the\s+words\s+)"
            r"(?:above|before)\b",
            _I,
        ),
    ),
    (
        "dan_persona",
        "roleplay_jailbreak",
        2.5,
        # Case-sensitive DAN: "Dan" is a common first name.
        re.compile(
            r"\bDAN\b[^\n]{0,60}\b[Dd]o [Aa]nything [Nn]ow\b"
            r"|\b(?:[Yy]ou are|[Aa]ct as|[Bb]ecome|[Pp]retend to be|[Ss]tay as)\s+(?:now\s+)?(?:a\s+)?DAN\b"
            r"|\bDAN [Mm]ode\b"
        ),
    ),
    (
        "developer_mode",
        "roleplay_jailbreak",
        2.0,
        re.compile(
            r"\b(?:developer|dev|god|jailbreak|jailbroken|unrestricted|unfiltered|uncensored|dan)\s+mode\s+"
            r"(?:is\s+)?(?:now\s+)?(?:enabled|activated|unlocked|engaged)\b"
            r"|\b(?:enable|enter|activate|switch to)\s+(?:jailbreak|unrestricted|unfiltered|uncensored|dan)"
            r"\s+mode\b",
            _I,
        ),
    ),
    (
        "unrestricted_ai",
        "roleplay_jailbreak",
        1.5,
        re.compile(
            r"\b(?:AI|assistant|chatbot|model|you)\b[^.\n]{0,60}\b(?:no|without(?:\s+any)?|free\s+(?:of|from))"
            r"\s+(?:\w+\s+){0,2}(?:restrictions|filters|censorship|content\s+polic(?:y|ies)|morals|ethics|"
            r"ethical\s+guidelines)\b",
            _I,
        ),
    ),
    (
        "disable_safety",
        "instruction_override",
        2.0,
        re.compile(
            r"\b(?:disable|turn off|deactivate|remove|bypass|ignore)\s+your\s+(?:own\s+)?"
            r"(?:safety|content|ethical|moral)\s+(?:filters?|guidelines|protocols|training|rules|polic(?:y|ies))\b"
            r"|\b(?:safety|content)\s+(?:filters?|mode)\s*[:=]\s*(?:off|disabled|false)\b",
            _I,
        ),
    ),
    (
        "fake_chat_markup",
        "prompt_injection",
        1.5,
        re.compile(r"<<SYS>>|\[/?INST\]|<\|im_start\|>\s*system|</?system>|\bSYSTEM\s+OVERRIDE\b", _I),
    ),
)
_QUOTES = "\"'`\u201c\u2018\u00ab"


def match_patterns(text: str) -> list[tuple[str, str, float]]:
    """Regexes that fire on ``text``. A match that opens right after a quote is a mention
    ("translate 'ignore previous instructions'"), not a use, and is skipped."""
    hits = []
    for name, kind, bonus, pattern in JAILBREAK_REGEXES:
        for m in pattern.finditer(text):
            if m.start() > 0 and text[m.start() - 1] in _QUOTES:
                continue
            hits.append((name, kind, bonus))
            break
    return hits
