"""Overflow budgets, partial tokenization, windowing and window aggregation (tokenizer only)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.runtime import limits
from app.runtime.encoder import TOKENIZER_PATH
from app.runtime.limits import (
    Segment,
    TextTokenizer,
    cut_point,
    max_rows,
    mean_rows,
    mean_unit,
    merge_spans,
    plan_input,
    resolve_budget,
    to_code_points,
    windows,
)
from app.runtime.schemas import CardLimits, ClassifyOptions, InvalidRequest, Span

LIMITS = CardLimits(max_input_tokens=256, max_scan_tokens=4096, truncate_tokens=256, max_chars_per_token=100)
# fmt: off
WORDS = [
    "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dogs", "while", "unbelievably",
    "tokenization", "héllo", "naïve", "café", "東京", "😀", "e-mail", "bob@example.com", "3.14159",
    "don't", "(parenthesised)", "internationalisation",
]
# fmt: on


@pytest.fixture(scope="module")
def tok() -> TextTokenizer:
    return TextTokenizer(TOKENIZER_PATH)


def prose(n_words: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def opts(**kw) -> ClassifyOptions:
    return ClassifyOptions.model_validate(kw)


# --------------------------------------------------------------------------- tokenizer


def test_offsets_are_code_points(tok):
    text = "Héllo 😀 wörld, 東京 na\u0308ive"
    toks = tok.tokens(text)
    pieces = [text[a:b] for a, b in toks.offsets]
    assert pieces[:2] == ["Héllo", "😀"]  # one code point for the emoji
    assert "東" in pieces and "na\u0308ive" in pieces  # combining mark kept with its base
    assert toks.complete and toks.count == tok.count(text) - tok.special_tokens


@pytest.mark.parametrize("seed", range(4))
def test_prefix_matches_full_tokenization(tok, seed):
    text = prose(3000, seed)
    full = tok.tokens(text)
    for need in (1, 100, 255, 1000):
        part = tok.prefix(text, need)
        assert not part.complete and part.count >= need
        assert part.offsets == full.offsets[: part.count]


def test_prefix_in_a_run_without_whitespace(tok):
    # base64-like blob: no word boundary, so only tokens well before the cut are trusted
    rng = random.Random(7)
    blob = "".join(rng.choice("abcdefXYZ0123456789+/") for _ in range(30_000))
    text = "lead words " + blob
    full = tok.tokens(text)
    part = tok.prefix(text, 50)
    assert part.count >= 50
    assert part.offsets == full.offsets[: part.count]


def test_prefix_of_short_text_is_complete(tok):
    text = prose(40)
    part = tok.prefix(text, 5)
    assert part.complete and part.offsets == tok.tokens(text).offsets


@settings(max_examples=60, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("ab1 \u0301-.😀é\n東")), min_size=0, max_size=400),
    st.integers(1, 60),
)
@pytest.mark.slow
def test_prefix_property(text, need):
    tok = TextTokenizer(TOKENIZER_PATH)
    old = limits._MIN_PREFIX_CHARS, limits._PREFIX_CHARS_PER_TOKEN
    limits._MIN_PREFIX_CHARS, limits._PREFIX_CHARS_PER_TOKEN = 8, 1  # force the partial path
    try:
        part = tok.prefix(text, need)
    finally:
        limits._MIN_PREFIX_CHARS, limits._PREFIX_CHARS_PER_TOKEN = old
    full = tok.tokens(text)
    assert part.offsets == full.offsets[: part.count]
    assert part.complete or part.count >= need


def test_cut_point_prefers_whitespace_then_letters():
    text = "alpha beta gamma"
    assert cut_point(text, 8) == (5, 5)  # before the space after "alpha"
    run = "x" * 3000 + "\u0301" + "y" * 10  # no whitespace; a combining mark at 3000
    for reach in (3000, 3001):
        cut, final = cut_point(run, reach)
        assert cut <= reach and run[cut].isalnum()  # never between "x" and its accent
        assert final == cut - limits.CUT_SLACK_CHARS


def test_to_code_points_from_bytes_and_utf16(tok):
    text = "a😀 héllo 東京 x"
    cps = tok.tokens(text).offsets
    utf8 = [(len(text[:a].encode()), len(text[:b].encode())) for a, b in cps]
    utf16 = [(len(text[:a].encode("utf-16-le")) // 2, len(text[:b].encode("utf-16-le")) // 2) for a, b in cps]
    assert to_code_points(text, utf8, "utf8") == cps
    assert to_code_points(text, utf16, "utf16") == cps
    assert to_code_points(text, cps, "code_point") == cps


# --------------------------------------------------------------------------- budgets


def test_budget_caps_and_validation():
    assert resolve_budget(opts(max_tokens=10_000), LIMITS).read_tokens == 256
    assert resolve_budget(opts(max_tokens=64), LIMITS).read_tokens == 64
    small = CardLimits(
        max_input_tokens=256, max_scan_tokens=4096, truncate_tokens=100, max_chars_per_token=100
    )
    assert resolve_budget(opts(overflow="truncate"), small).read_tokens == 100
    win = resolve_budget(opts(overflow="window", window={"tokens": 999, "overlap": 8}), LIMITS)
    assert (win.window_tokens, win.overlap) == (256, 8)
    with pytest.raises(InvalidRequest, match="overlap"):
        resolve_budget(opts(overflow="window", window={"tokens": 20, "overlap": 18}), LIMITS)
    with pytest.raises(InvalidRequest):
        resolve_budget(opts(max_tokens=3, overflow="reject"), LIMITS, special_tokens=3)


class _NoTokenizing(TextTokenizer):
    def prefix(self, text, need):
        raise AssertionError("a text over budget x max chars per token must fail untokenized")

    tokens = prefix


def test_reject_fails_very_long_text_untokenized():
    tok = _NoTokenizing(TOKENIZER_PATH)
    text = "a" * (64 * 100 + 1)
    plan = plan_input(0, text, resolve_budget(opts(max_tokens=64), LIMITS), tok)
    assert plan.error is not None and plan.error.code == "max_length_exceeded"
    assert plan.tokens == 0 and not plan.segments


def test_reject_and_fit(tok):
    budget = resolve_budget(opts(max_tokens=64), LIMITS)
    short = prose(20)
    plan = plan_input(0, short, budget, tok)
    assert plan.error is None and plan.tokens == tok.count(short)
    assert [(s.start, s.end, s.text) for s in plan.segments] == [(0, len(short), short)]
    long = prose(200)
    plan = plan_input(1, long, budget, tok)
    assert plan.error.code == "max_length_exceeded" and plan.tokens == 0


def test_truncate_reads_a_word_aligned_prefix(tok):
    text = prose(400, seed=3)
    plan = plan_input(0, text, resolve_budget(opts(overflow="truncate", max_tokens=64), LIMITS), tok)
    (seg,) = plan.segments
    assert plan.partial and plan.error is None
    assert text.startswith(seg.text) and seg.end < len(text)
    assert seg.tokens == plan.tokens <= 64
    assert tok.count(seg.text) == seg.tokens  # the prefix re-tokenizes to what was counted
    assert plan.tokens > 64 - 8  # only the split word is dropped


def test_window_plan_covers_text(tok):
    text = prose(1500, seed=5)
    budget = resolve_budget(opts(overflow="window", window={"tokens": 128, "overlap": 16}), LIMITS)
    plan = plan_input(0, text, budget, tok)
    full = tok.tokens(text)
    assert plan.error is None and not plan.partial
    assert plan.tokens == full.count + tok.special_tokens
    segs = plan.segments
    assert len(segs) > 1 and segs[0].start == full.offsets[0][0] and segs[-1].end == full.offsets[-1][1]
    for a, b in zip(segs, segs[1:], strict=False):
        assert b.start < a.end  # consecutive windows overlap
        assert a.start < b.start
    for seg in segs:
        assert seg.text == text[seg.start : seg.end]
        assert seg.tokens <= 128
        assert tok.count(seg.text) == seg.tokens  # word-aligned: same tokens when read alone
    assert not segs[0].cut_left and segs[0].cut_right and segs[-1].cut_left and not segs[-1].cut_right


def test_window_over_scan_budget(tok):
    budget = resolve_budget(opts(overflow="window"), LIMITS)
    plan = plan_input(0, prose(5000, seed=1), budget, tok)
    assert plan.error.code == "scan_budget_exceeded" and plan.tokens == 0 and not plan.segments
    short = plan_input(1, "short text", budget, tok)
    assert short.error is None and len(short.segments) == 1


def test_windows_keep_words_whole():
    # word ids: a 3-piece word at tokens 3..5
    word_ids = [0, 1, 2, 3, 3, 3, 4, 5, 6, 7, 8, 9]
    spans = windows(word_ids, size=5, overlap=1)
    assert spans[0] == (0, 3)  # moved back: cutting at 5 would split word 3
    for lo, hi in spans:
        assert hi - lo <= 5
        assert lo == 0 or word_ids[lo] != word_ids[lo - 1]
    covered = set().union(*(range(lo, hi) for lo, hi in spans))
    assert covered == set(range(len(word_ids)))


# --------------------------------------------------------------------------- aggregation


def test_aggregations():
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(3, 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    pooled = mean_unit(vecs, [10, 10, 1])
    assert abs(float(np.linalg.norm(pooled)) - 1.0) < 1e-5
    assert float(pooled @ vecs[0]) > float(pooled @ vecs[2]) or float(pooled @ vecs[1]) > float(
        pooled @ vecs[2]
    )
    probs = rng.dirichlet(np.ones(5), size=4)
    mean = mean_rows(probs, [1, 2, 3, 4])
    assert abs(mean.sum() - 1.0) < 1e-9 and np.allclose(mean, np.average(probs, axis=0, weights=[1, 2, 3, 4]))
    assert np.array_equal(max_rows(np.array([[0.1, 0.9], [0.8, 0.2]])), np.array([0.8, 0.9]))


def _span(label, start, end, text, p=0.9):
    return Span(label=label, start=start, end=end, text=text[start:end], probability=p)


def test_merge_spans_shifts_dedupes_and_prefers_unclipped():
    text = "Reach John Smith at js@example.com today, John Smith said."
    a = Segment(0, 0, 30, text[0:30], 10, cut_left=False, cut_right=True)
    b = Segment(0, 17, len(text), text[17:], 10, cut_left=True, cut_right=False)
    in_a = [
        _span("PERSON", 6, 16, a.text),
        _span("EMAIL_ADDRESS", 20, 30, a.text, 0.6),
    ]  # email clipped at edge
    in_b = [_span("EMAIL_ADDRESS", 3, 17, b.text, 0.95), _span("PERSON", 25, 35, b.text, 0.8)]
    email = text.index("js@example.com")
    merged = merge_spans(text, [(a, in_a), (b, in_b)])
    assert [(s.label, s.start, s.end) for s in merged] == [
        ("PERSON", 6, 16),
        ("EMAIL_ADDRESS", email, email + len("js@example.com")),
        ("PERSON", 42, 52),
    ]
    assert all(s.text == text[s.start : s.end] for s in merged)
    # the same span seen by two windows is reported once, with the higher probability
    dup = merge_spans(
        text, [(a, [_span("PERSON", 6, 16, a.text, 0.5)]), (a, [_span("PERSON", 6, 16, a.text, 0.7)])]
    )
    assert len(dup) == 1 and dup[0].probability == 0.7
