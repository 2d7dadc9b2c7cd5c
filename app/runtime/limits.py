"""Long inputs: read budgets, overflow (`reject` | `truncate` | `window`), windowing and the
aggregation of window answers (docs/model-runtime.md, "Long inputs").

Units. Budgets count tokens of the model's tokenizer with its special tokens ([CLS]/[SEP]
for MiniLM) included once per forward. Offsets are Unicode code points, end exclusive: the
`tokenizers` Python binding already reports offsets as ``str`` indices, which are code
points, so no conversion is needed for it; `to_code_points` converts UTF-8 byte or UTF-16
offsets that other tokenizers report.

Reading only as far as needed. A 1 MB paste must not be tokenized whole to read 256 tokens:
`TextTokenizer.prefix` tokenizes a growing prefix, cut before a word boundary (a whitespace
character: the tokens before it are final) or, in a run without whitespace, before a letter
or digit, keeping only the tokens that end 1,024 characters before the cut (the word that
holds the cut may tokenize differently once the rest of it is seen). Under `reject`, a text
longer than budget x `max_chars_per_token` fails before any tokenization.

Windows. The token sequence is split into windows of `window.tokens` (specials included)
that share `overlap` tokens; window edges move back to word starts so each window's text
re-tokenizes to the same tokens. Each window is a substring of the input (the heads read
text as well as vectors) and its answers are aggregated: vectors -> token-weighted mean,
re-normalised; label probabilities -> token-weighted mean; label scores -> max (a jailbreak
anywhere flags the text); spans -> union shifted to input offsets, overlapping spans merged.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from app.runtime.schemas import (
    MAX_LENGTH_EXCEEDED,
    SCAN_BUDGET_EXCEEDED,
    CardLimits,
    ClassifyOptions,
    InvalidRequest,
    ItemError,
    Span,
)

DEFAULT_OVERLAP = 32
CUT_SLACK_CHARS = 1024  # tokens this far before a cut inside a word-run are final
_MIN_PREFIX_CHARS = 4096
_PREFIX_CHARS_PER_TOKEN = 8  # first guess; natural text averages 4-5 characters a token


# --------------------------------------------------------------------------- tokenization


@dataclass(frozen=True)
class TokenSlice:
    """Content tokens (no special tokens) of a text or of its beginning."""

    offsets: list[tuple[int, int]]  # code point offsets into the text, end exclusive
    word_ids: list[int | None]
    complete: bool  # True when the whole text was tokenized

    @property
    def count(self) -> int:
        return len(self.offsets)


class TextTokenizer:
    """Counting and offset tokenizer (no truncation, no padding). Thread-safe: it is never
    reconfigured after construction."""

    def __init__(self, tokenizer_path: Path, max_chars_per_token: int | None = None) -> None:
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(tokenizer_path))
        self._tok.no_truncation()
        self._tok.no_padding()
        self.special_tokens = self._tok.num_special_tokens_to_add(False)
        if max_chars_per_token is None:
            # WordPiece maps a longer word to one [UNK]; whitespace belongs to no token.
            spec = json.loads(Path(tokenizer_path).read_text()).get("model", {})
            max_chars_per_token = int(spec.get("max_input_chars_per_word") or 100)
        self.max_chars_per_token = max_chars_per_token

    def count(self, text: str) -> int:
        """Tokens of the whole text, special tokens included."""
        return len(self._tok.encode(text, add_special_tokens=True).ids)

    def tokens(self, text: str) -> TokenSlice:
        enc = self._tok.encode(text, add_special_tokens=False)
        return TokenSlice(list(enc.offsets), list(enc.word_ids), complete=True)

    def pieces(self, text: str) -> list[tuple[str, int, int]]:
        """(token, start, end) of each content token: the vocabulary's piece (`##` marks a
        continuation) and its code point offsets into the original text, end exclusive."""
        enc = self._tok.encode(text, add_special_tokens=False)
        return [(piece, int(a), int(b)) for piece, (a, b) in zip(enc.tokens, enc.offsets, strict=True)]

    def prefix(self, text: str, need: int) -> TokenSlice:
        """At least `need` leading content tokens, or all of them (`complete`), tokenizing
        only a prefix of a long text."""
        n = len(text)
        reach = max(need * _PREFIX_CHARS_PER_TOKEN, _MIN_PREFIX_CHARS)
        while reach < n:
            cut, final_before = cut_point(text, reach)
            enc = self._tok.encode(text[:cut], add_special_tokens=False)
            kept = sum(1 for _, end in enc.offsets if end <= final_before)
            if kept >= need:
                return TokenSlice(list(enc.offsets[:kept]), list(enc.word_ids[:kept]), complete=False)
            reach *= 2
        return self.tokens(text)


def cut_point(text: str, reach: int) -> tuple[int, int]:
    """Where to cut `text` near `reach` and up to where the prefix's tokens are final."""
    low = max(1, reach - CUT_SLACK_CHARS)
    for pos in range(min(reach, len(text) - 1), low - 1, -1):
        if text[pos].isspace():
            return pos, pos
    for pos in range(min(reach, len(text) - 1), 0, -1):
        # Before a letter or digit: never between a base character and its combining marks.
        if text[pos].isalnum():
            return pos, pos - CUT_SLACK_CHARS
    return reach, reach - CUT_SLACK_CHARS


def to_code_points(
    text: str, offsets: Sequence[tuple[int, int]], unit: Literal["code_point", "utf8", "utf16"]
) -> list[tuple[int, int]]:
    """Convert tokenizer offsets to code point offsets (Python ``str`` indices).

    `code_point`: already code points (the `tokenizers` Python binding, spaCy, Python regex).
    `utf8`: byte offsets (Rust/C++ tokenizers working on bytes). `utf16`: code units (JavaScript,
    Java). An offset inside a character maps to that character's start.
    """
    if unit == "code_point":
        return [(int(a), int(b)) for a, b in offsets]
    widths = [len(ch.encode("utf-8")) if unit == "utf8" else (2 if ord(ch) > 0xFFFF else 1) for ch in text]
    bounds = np.concatenate([[0], np.cumsum(widths, dtype=np.int64)])

    def convert(pos: int) -> int:
        return int(np.searchsorted(bounds, pos, side="right") - 1)

    return [(convert(a), convert(b) if b in bounds else convert(b) + 1) for a, b in offsets]


# --------------------------------------------------------------------------- budgets


@dataclass(frozen=True)
class Budget:
    overflow: Literal["reject", "truncate", "window"]
    read_tokens: int  # one forward's tokens, specials included
    window_tokens: int
    overlap: int
    scan_tokens: int


def resolve_budget(options: ClassifyOptions, limits: CardLimits, special_tokens: int = 2) -> Budget:
    """Apply the card's limits to the request's options (token counts include the
    `special_tokens` every forward adds). InvalidRequest on a window that cannot advance."""
    read = min(options.max_tokens or limits.max_input_tokens, limits.max_input_tokens)
    if options.overflow == "truncate":
        read = min(read, limits.truncate_tokens)
    if read <= special_tokens:
        raise InvalidRequest(f"options.max_tokens must exceed the {special_tokens} special tokens")
    window = options.window
    size = min(window.tokens if window and window.tokens else read, limits.max_input_tokens)
    room = size - special_tokens
    default_overlap = min(DEFAULT_OVERLAP, room // 4)
    overlap = window.overlap if window and window.overlap is not None else default_overlap
    if options.overflow == "window" and (room < 1 or overlap >= room):
        raise InvalidRequest(
            f"options.window: overlap ({overlap}) must be smaller than the window's {room} content "
            f"tokens (window.tokens {size} less {special_tokens} special tokens)"
        )
    return Budget(options.overflow, read, size, overlap, limits.max_scan_tokens)


@dataclass
class Segment:
    """A piece of one input the model reads in one forward row."""

    item: int
    start: int  # code point offsets of the piece in the input
    end: int
    text: str
    tokens: int  # specials included
    cut_left: bool = False  # the piece starts/ends inside the input (window edges)
    cut_right: bool = False


@dataclass
class InputPlan:
    """What to read of one input: its segments, or the error that fails it."""

    item: int
    segments: list[Segment] = field(default_factory=list)
    tokens: int = 0  # tokens read (usage)
    partial: bool = False
    error: ItemError | None = None


def plan_input(item: int, text: str, budget: Budget, tok: TextTokenizer) -> InputPlan:
    specials = tok.special_tokens
    room = budget.read_tokens - specials
    if budget.overflow == "reject":
        if len(text) > budget.read_tokens * tok.max_chars_per_token:
            return _fail(
                item, MAX_LENGTH_EXCEEDED, f"input exceeds the budget of {budget.read_tokens} tokens"
            )
        toks = tok.prefix(text, room + 1)
        if toks.count > room:
            return _fail(
                item,
                MAX_LENGTH_EXCEEDED,
                f"input has more than {budget.read_tokens} tokens (overflow reject)"
                if not toks.complete
                else f"input has {toks.count + specials} tokens; the budget is {budget.read_tokens}",
            )
        return _whole(item, text, toks.count + specials)

    if budget.overflow == "truncate":
        toks = tok.prefix(text, room + 1)
        if toks.count <= room:
            return _whole(item, text, toks.count + specials)
        keep = _align_back(toks.word_ids, room, low=1)
        end = toks.offsets[keep - 1][1]
        seg = Segment(item, 0, end, text[:end], keep + specials, cut_right=True)
        return InputPlan(item, [seg], keep + specials, partial=True)

    # window
    if len(text) > budget.scan_tokens * tok.max_chars_per_token:
        return _fail(
            item, SCAN_BUDGET_EXCEEDED, f"input exceeds the scan budget of {budget.scan_tokens} tokens"
        )
    toks = tok.prefix(text, budget.scan_tokens - specials + 1)
    if toks.count + specials > budget.scan_tokens:
        return _fail(
            item, SCAN_BUDGET_EXCEEDED, f"input has more than {budget.scan_tokens} tokens (scan budget)"
        )
    if toks.count <= room:
        return _whole(item, text, toks.count + specials)
    segments = []
    for lo, hi in windows(toks.word_ids, budget.window_tokens - specials, budget.overlap):
        start, end = toks.offsets[lo][0], toks.offsets[hi - 1][1]
        segments.append(
            Segment(item, start, end, text[start:end], hi - lo + specials, lo > 0, hi < toks.count)
        )
    return InputPlan(item, segments, toks.count + specials)


def windows(word_ids: Sequence[int | None], size: int, overlap: int) -> list[tuple[int, int]]:
    """Token index ranges [lo, hi) of at most `size` tokens, consecutive ones sharing at
    least `overlap` tokens, edges moved back to word starts where the window allows."""
    n = len(word_ids)
    out: list[tuple[int, int]] = []
    lo = 0
    while True:
        hi = min(lo + size, n)
        if hi < n:
            hi = _align_back(word_ids, hi, low=lo + 1)
        out.append((lo, hi))
        if hi >= n:
            return out
        lo = _align_back(word_ids, max(hi - overlap, lo + 1), low=lo + 1)


def _align_back(word_ids: Sequence[int | None], pos: int, low: int) -> int:
    """Move a cut at token `pos` back to the start of the word it splits (not below `low`);
    a word longer than the room keeps the hard cut."""
    if pos >= len(word_ids):
        return pos
    k = pos
    while k > low and word_ids[k] is not None and word_ids[k] == word_ids[k - 1]:
        k -= 1
    if word_ids[k] is not None and k > 0 and word_ids[k] == word_ids[k - 1]:
        return pos
    return k


def _whole(item: int, text: str, tokens: int) -> InputPlan:
    return InputPlan(item, [Segment(item, 0, len(text), text, tokens)], tokens)


def _fail(item: int, code: str, message: str) -> InputPlan:
    return InputPlan(item, error=ItemError(code=code, message=message))


# --------------------------------------------------------------------------- aggregation


def mean_unit(vectors: np.ndarray, weights: Sequence[float]) -> np.ndarray:
    """Token-weighted mean of unit vectors, re-normalised to unit length."""
    pooled = np.average(np.asarray(vectors, np.float32), axis=0, weights=np.asarray(weights, np.float64))
    norm = float(np.linalg.norm(pooled))
    return (pooled / norm if norm > 1e-12 else pooled).astype(np.float32)


def mean_rows(rows: np.ndarray, weights: Sequence[float]) -> np.ndarray:
    """Token-weighted mean of probability rows; still sums to 1."""
    out = np.average(np.asarray(rows, np.float64), axis=0, weights=np.asarray(weights, np.float64))
    return out / out.sum()


def max_rows(rows: np.ndarray) -> np.ndarray:
    return np.asarray(rows, np.float64).max(axis=0)


def merge_spans(text: str, pieces: Sequence[tuple[Segment, Sequence[Span]]]) -> list[Span]:
    """Union of the spans found in each window, in input offsets.

    A span touching a window edge that cuts the input may be a clipped entity ("Smith" of
    "John Smith"); it yields to any overlapping span found clear of an edge. Overlapping spans
    then resolve to one per region, preferring the longer, then the more probable one
    (identical spans from two windows merge, keeping the higher probability).
    """
    candidates: list[tuple[bool, int, int, str, float]] = []
    for seg, spans in pieces:
        for span in spans:
            start, end = span.start + seg.start, span.end + seg.start
            clipped = (seg.cut_left and span.start == 0) or (seg.cut_right and span.end >= len(seg.text))
            candidates.append((clipped, start, end, span.label, span.probability))
    candidates.sort(key=lambda c: (c[0], -(c[2] - c[1]), -c[4], c[1]))
    kept: list[tuple[int, int, str, float]] = []
    for _, start, end, label, prob in candidates:
        clash = [k for k in kept if k[0] < end and start < k[1]]
        if not clash:
            kept.append((start, end, label, prob))
            continue
        for i, k in enumerate(kept):
            if (k[0], k[1], k[2]) == (start, end, label) and prob > k[3]:
                kept[i] = (start, end, label, prob)
    kept.sort()
    return [Span(label=label, start=s, end=e, text=text[s:e], probability=p) for s, e, label, p in kept]
