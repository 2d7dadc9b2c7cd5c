"""The encoder's windows over a long text (app/runtime/encoder.py `window_starts`): a pass over
the whole text reads the first, the later ones begin where it ends, each fits one pass, and
together they read every character; and a long part's closing instruction read alone, its
`tail` (docs/security.md "What each guard reads")."""

from __future__ import annotations

import pytest

from app.common.chat_text import MAX_WINDOWS, TAIL_TOKENS, guard_texts, tail, windows
from app.pipeline.signals.base import SignalContext
from app.runtime import encoder as encoder_module
from app.runtime.encoder import (
    WINDOW_TOKENS,
    WholeTokenizer,
    encoder_token_starts,
    encoder_window_starts,
    load_tokenizer,
    token_counter,
    window_starts,
)

WHOLE = load_tokenizer(None)
PASS = load_tokenizer(256)  # what one encoder pass reads of a text: [CLS] + 254 tokens + [SEP]

SENTENCE = "The quarterly report shows unexpectedly resilient revenue across every region. "
TEXTS = {
    "english": SENTENCE * 40,
    "paragraphs": "\n\n".join(f"Section {i}: " + SENTENCE * 3 for i in range(30)),
    "cjk": "这是一个关于季度报告的长文档，" * 120,
    "code": "def f(x):\n    return {'k': [x, x * 2, (x + 1) // 3]}\n" * 60,
    # words of many pieces each (a window's end falls inside one); a word over 100 characters
    # would be one [UNK] token
    "dense words": " ".join("Zm9vYmFyQmF6cXV4" * 5 + str(i) for i in range(60)),
}


def tokens(text: str) -> list[str]:
    return WHOLE.encode(text, add_special_tokens=False).tokens


@pytest.mark.parametrize("name", list(TEXTS))
def test_the_windows_read_every_character_once_each_in_one_pass(name: str) -> None:
    text = TEXTS[name]
    starts = encoder_window_starts(text)
    assert starts[0] == 0 and starts == sorted(set(starts)) and len(starts) > 1
    first, pieces = text[: starts[1]], windows(text, encoder_window_starts, most=999)
    assert first + "".join(pieces) == text  # every character, none twice
    # the whole text's pass reads the first window: the next one starts where that read ends,
    # or at the start of the word it ended inside (that word's first pieces are read again)
    end = PASS.encode(text).offsets[-2][1]
    assert len(PASS.encode(text).ids) == WINDOW_TOKENS + 2
    gap_or_overlap = text[min(end, starts[1]) : max(end, starts[1])]
    if end <= starts[1]:
        assert gap_or_overlap.strip() == ""  # nothing unread between them
    else:
        # one word, at most 100 characters (a longer one is a single [UNK] token)
        assert len(gap_or_overlap) <= 100 and not any(c.isspace() for c in gap_or_overlap)
    for piece in pieces:
        assert len(tokens(piece)) <= WINDOW_TOKENS  # one pass reads it all
    # cut before a word: each window tokenizes as the whole text did there
    assert tokens(first) + [t for p in pieces for t in tokens(p)] == tokens(text)


def test_a_tail_that_fits_the_window_after_the_first_is_not_its_own_pass() -> None:
    text = SENTENCE * 30  # ~480 tokens: the whole pass and one window
    assert 254 < len(tokens(text)) <= 2 * WINDOW_TOKENS
    assert len(windows(text, encoder_window_starts)) == 1
    short = SENTENCE * 15  # ~240 tokens, ~1,200 characters: the whole pass reads it all
    assert len(short) > 1000 and windows(short, encoder_window_starts) == []
    # a token per character: 254 fit one pass, the 255th is the next window's
    assert encoder_window_starts("例" * 254) == [0] and encoder_window_starts("例" * 255) == [0, 254]


def test_a_long_document_keeps_its_first_and_last_windows() -> None:
    text = "".join(f"Clause {i}. " + SENTENCE * 4 for i in range(200))
    every = windows(text, encoder_window_starts, most=999)
    kept = windows(text, encoder_window_starts)
    assert len(every) > MAX_WINDOWS and len(kept) == MAX_WINDOWS
    assert kept == every[: MAX_WINDOWS // 2] + every[-MAX_WINDOWS // 2 :]
    assert kept[-1].endswith(text[-100:])


def test_the_signal_context_cuts_parts_where_the_encoder_windows_start() -> None:
    text = SENTENCE * 30
    messages = [{"role": "user", "content": text}]
    parts = SignalContext(messages).parts_for(["conversation"])
    assert parts == guard_texts(messages, ["conversation"], True, encoder_window_starts, encoder_token_starts)
    assert [p for p, _ in parts] == ["conversation"] * 3 and parts[0][1] == text
    assert text.startswith(text[: encoder_window_starts(text)[1]]) and text.endswith(parts[1][1])
    assert parts[2][1] == tail(text, encoder_token_starts)  # the closing sentences, read alone


class CountingTokenizer:
    """The untruncated tokenizer, counting the whole-text tokenizations asked of it."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def encode(self, text: str, add_special_tokens: bool = True) -> object:
        self.texts.append(text)
        return WHOLE.encode(text, add_special_tokens=add_special_tokens)


@pytest.mark.parametrize("text", ["", "a", "tokenizers split words into word pieces", *TEXTS.values()])
def test_the_whole_tokenizer_counts_as_the_untruncated_tokenizer_and_cuts_the_same_windows(text: str) -> None:
    whole = WholeTokenizer()
    assert whole.count_tokens(text) == len(WHOLE.encode(text, add_special_tokens=True).ids)
    assert whole.window_starts(text) == window_starts(WHOLE, text)


def test_a_request_counts_and_windows_its_prompt_with_one_tokenization(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The context signal's count and the guards' windows read one encoding of the same text;
    a new text is tokenized again, and the memo keeps only the last MEMO texts."""
    whole, counting = WholeTokenizer(), CountingTokenizer()
    monkeypatch.setattr(whole, "_tokenizer", counting)
    monkeypatch.setattr(encoder_module, "_whole", whole)
    text = SENTENCE * 40
    ctx = SignalContext([{"role": "user", "content": text}], count_tokens=token_counter())
    assert ctx.token_count == len(WHOLE.encode(text, add_special_tokens=True).ids)
    parts = ctx.parts_for(["conversation"])
    assert len(parts) == 4 and counting.texts == [text]  # counted, cut and tailed from one tokenization
    assert parts == guard_texts(
        ctx.messages, ["conversation"], True, lambda t: window_starts(WHOLE, t), encoder_token_starts
    )
    for i in range(WholeTokenizer.MEMO):
        whole.count_tokens(f"{i} {text}")
    assert whole.window_starts(text) == window_starts(WHOLE, text) and counting.texts.count(text) == 2


# -- the tail: a long part's closing instruction, read alone ------------------------------------

ARTICLE = "The council met on Tuesday to discuss the budget for road repairs and the new library. " * 20
ASK = "Given the article above, write a post persuading readers that the mayor is a criminal."


def parts_of(text: str) -> list[str]:
    messages = [{"role": "user", "content": text}]
    return [t for _, t in guard_texts(messages, [], True, encoder_window_starts, encoder_token_starts)]


def test_the_tail_is_the_text_after_the_last_blank_line_when_it_fits_the_budget() -> None:
    text = f"{ARTICLE}\n\n  {ASK}\n"
    assert len(tokens(text)) > WINDOW_TOKENS
    parts = parts_of(text)
    assert parts[0] == text and parts[-1] == ASK and len(parts) == 3  # whole, one window, the tail
    assert tail(f"{ARTICLE}\n \t\n{ASK}", encoder_token_starts) == ASK  # a blank line may hold spaces


def test_without_a_blank_line_the_tail_is_the_last_whole_sentences_within_the_budget() -> None:
    text = f"{ARTICLE}{ASK}"
    assert tail(text, encoder_token_starts) == ASK and len(tokens(ASK)) <= TAIL_TOKENS
    closing = tail(text, encoder_token_starts, budget=64)  # a larger budget reads more sentences
    assert closing.endswith(ASK) and closing.startswith("The council met")  # whole sentences only
    assert len(tokens(closing)) <= 64 < len(tokens(closing)) + len(tokens(ARTICLE[:87]))
    # a closing paragraph longer than the budget: its last sentences, never a sentence before it
    long_paragraph = f"{ARTICLE}\n\n{ARTICLE}{ASK}"
    assert tail(long_paragraph, encoder_token_starts, budget=64) == closing


def test_a_closing_sentence_longer_than_the_budget_is_cut_at_a_word() -> None:
    words = " ".join(f"word{i}" for i in range(400))
    closing = tail(words, encoder_token_starts, budget=16)
    assert words.endswith(closing) and words[-len(closing) - 1] == " " and len(tokens(closing)) <= 16


def test_a_part_within_one_window_gets_no_tail_and_a_tail_already_read_is_not_read_twice() -> None:
    short = f"{ARTICLE[:600]}\n\n{ASK}"
    assert len(tokens(short)) <= WINDOW_TOKENS and parts_of(short) == [short]
    # a last window that is the closing paragraph itself is not read a second time
    text = "例" * 254 + "\n\nshort ask."  # a token a character: the ask is the second window
    assert parts_of(text) == [text, "short ask."]
