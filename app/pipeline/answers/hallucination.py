"""The `hallucination` detector: answer sentences the request's context does not support.

No NLI or token-level hallucination model ships offline, so this is a measured heuristic
over what the Router already runs (docs/hallucination.md has its figures and model card):

- the answer is split into sentences; the context (system/developer/tool messages, long
  user messages) into sentences too;
- each answer sentence gets `similarity`: its best cosine to a context sentence (the
  Router's MiniLM encoder, one call for the answer and the context sentences the Router's
  bounded LRU (`TextVectorCache`) does not hold yet), and `overlap`: the share of its
  content words found in the context;
- support = SIM_WEIGHT * rescaled similarity + (1 - SIM_WEIGHT) * overlap; a number the
  context does not contain caps support at NUMBER_CAP (wrong figures are the commonest
  unsupported claim a paraphrase check would miss);
- a sentence with support under the threshold is unsupported. Sentences with fewer than
  MIN_CONTENT_WORDS content words (greetings, "Sure.") are not judged.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

from app.common.stopwords import ENGLISH_STOPWORDS
from app.pipeline.vector_cache import TextVectorCache

EmbedFn = Callable[[list[str]], Awaitable[np.ndarray]]

SIM_WEIGHT = 0.2  # swept on the labelled set (0.2, 0.35, 0.5): docs/hallucination.md
SIM_FLOOR, SIM_CEIL = 0.25, 0.85  # cosine rescaled to [0, 1] over this band (MiniLM's useful range)
NUMBER_CAP = 0.3
MIN_CONTENT_WORDS = 3
MAX_CONTEXT_SENTENCES = 96  # bounds the encoder's work per answer (the first ones are embedded)
MAX_ANSWER_SENTENCES = 32
# Context sentence vectors a Router keeps (x 384 float32: ~6 MB): a few hundred contexts' worth.
CONTEXT_VECTOR_CACHE_SIZE = 4096

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\n{1,}")
_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*|\d+(?:[.,]\d+)*%?")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
# and words a claim does not rest on
STOPWORDS = ENGLISH_STOPWORDS | frozenset(
    {
        "according",
        "also",
        "based",
        "however",
        "may",
        "might",
        "must",
        "one",
        "per",
        "shall",
        "therefore",
        "thus",
        "upon",
        "via",
        "yes",
    }
)


def split_sentences(text: str) -> list[str]:
    parts = (p.strip(" \t-*•") for p in _SENTENCE.split(text or ""))
    return [p for p in parts if p]


def content_words(text: str) -> list[str]:
    words = (w.lower().strip("'-") for w in _WORD.findall(text))
    return [w for w in words if w and w not in STOPWORDS and (len(w) > 2 or w[0].isdigit())]


def numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in _NUMBER.findall(text)}


def _stem(word: str) -> str:
    """Crude suffix stripping so `founded`/`founds`/`founding` meet."""
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


@dataclass
class SentenceScore:
    text: str
    support: float
    similarity: float | None
    overlap: float
    missing_numbers: list[str] = field(default_factory=list)


@dataclass
class HallucinationResult:
    judged: list[SentenceScore]
    unsupported: list[SentenceScore]

    @property
    def lowest_support(self) -> float | None:
        return min((s.support for s in self.judged), default=None)


def score_sentence(
    sentence: str, similarity: float | None, context_stems: set[str], context_numbers: set[str]
) -> SentenceScore:
    """`similarity` None (no encoder): support is the overlap alone."""
    words = content_words(sentence)
    stems = [_stem(w) for w in words]
    overlap = sum(1 for s in stems if s in context_stems) / len(stems) if stems else 1.0
    support = overlap
    if similarity is not None:
        scaled = min(1.0, max(0.0, (similarity - SIM_FLOOR) / (SIM_CEIL - SIM_FLOOR)))
        support = SIM_WEIGHT * scaled + (1 - SIM_WEIGHT) * overlap
    missing = sorted(numbers(sentence) - context_numbers)
    if missing:
        support = min(support, NUMBER_CAP)
    shown = None if similarity is None else round(similarity, 4)
    return SentenceScore(sentence, round(support, 4), shown, round(overlap, 4), missing)


async def detect(
    answer: str,
    context: list[str],
    embed: EmbedFn | None,
    threshold: float,
    cache: TextVectorCache | None = None,
) -> HallucinationResult:
    """Score the answer's sentences against `context`; `embed` None: overlap alone (e.g. a
    preview without the encoder). `cache`: context sentence vectors of `embed`, kept across
    checks (a stream's context is checked again, a system prompt recurs across requests)."""
    sentences = [s for s in split_sentences(answer) if len(content_words(s)) >= MIN_CONTENT_WORDS]
    sentences = sentences[:MAX_ANSWER_SENTENCES]
    if not sentences:
        return HallucinationResult([], [])
    context_text = "\n".join(context)
    context_sentences = split_sentences(context_text)[:MAX_CONTEXT_SENTENCES]
    context_stems = {_stem(w) for w in content_words(context_text)}
    context_numbers = numbers(context_text)
    similarities: list[float | None] = [None] * len(sentences)
    if embed is not None and context_sentences:  # overlap covers the whole context either way
        answer_vectors, context_vectors = await _embed(sentences, context_sentences, embed, cache)
        similarities = [float(v) for v in (answer_vectors @ context_vectors.T).max(axis=1)]
    judged = [
        score_sentence(s, sim, context_stems, context_numbers)
        for s, sim in zip(sentences, similarities, strict=True)
    ]
    return HallucinationResult(judged, [s for s in judged if s.support < threshold])


async def _embed(
    sentences: list[str], context: list[str], embed: EmbedFn, cache: TextVectorCache | None
) -> tuple[np.ndarray, np.ndarray]:
    """(answer vectors, context vectors): one encoder call for the answer and the context
    sentences not in `cache`."""
    known = {t: v for t in dict.fromkeys(context) if cache is not None and (v := cache.get(t)) is not None}
    missing = [t for t in dict.fromkeys(context) if t not in known]
    vectors = np.asarray(await embed(sentences + missing), dtype=np.float32)
    if len(vectors) != len(sentences) + len(missing):
        raise RuntimeError(
            f"embedding returned {len(vectors)} vectors for {len(sentences) + len(missing)} texts"
        )
    fresh = vectors[len(sentences) :]
    if cache is not None:
        cache.put(missing, fresh)
    known.update(zip(missing, fresh, strict=True))
    return vectors[: len(sentences)], np.stack([known[t] for t in context])
