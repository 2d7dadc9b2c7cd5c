"""What the text of a chat request is: one definition of each word (docs/architecture.md's
glossary), used by the signals, the cache, the plugins, the answer checks, the Responses
rendering and the management previews.

- **content text** (`content_text`): a message content's text. A string is itself. A list of
  parts gives the `text` of its text parts, in order, joined by newlines; text parts are the
  types `text` (chat), `input_text` and `output_text` (Responses). Every other part gives
  nothing: images (`image_url`, `input_image`), audio, files, refusals, and tool results
  (`tool_result` parts carry a tool's output, not the author's words). `None`, or anything
  that is not a string or a list, gives "".
- **harness text** (`harness_texts`): what an agent harness writes into user turns for the
  model, not the human: reminders (`<system-reminder>...</system-reminder>` blocks, wherever
  they sit in a turn) and compaction summaries (a turn that opens with a known summary preamble,
  `COMPACTION_PREAMBLES`, or is one `<summary>...</summary>` block).
- **an ask** (`is_ask`): a user message that is not only tool results and harness text. A user
  message is only tool results when its content is a non-empty list of `tool_result` parts
  (beside at most harness text): a tool loop in the messages-style layout, where the tool's
  answer rides in a user turn. In OpenAI's layout tool results are `tool` messages (answering an
  assistant message's `tool_calls`), and those are never asks (nor is any system, developer or
  assistant message). A turn whose whole text is harness text is no ask either.
- **the human's ask** (`human_ask`): the content text of the latest ask, its reminders taken
  out (`ask_text`); "" when there is none.
  It is what the signals judge by default, what the query embedding encodes, what the response
  cache looks up and the rag, memory and tool-selection plugins search with.
- **the conversation text** (`conversation_text`): the content text of every user message,
  oldest first, joined by newlines (a turn without text adds an empty line). It is what a
  signal with `include_history` reads (PII, jailbreak, harmful): an attack split over turns is
  seen whole. System and developer messages are the operator's words, assistant messages the
  model's and tool messages the tools': none is part of it. As `paragraphs` (what the
  jailbreak and harmful guards read, as they always have) the turns with text are joined by
  blank lines instead; the guards' own models read words, not whitespace (their tests show
  the same verdicts either way), but an LLM judge or a bound worker gets the text as it is.

- **what a guard reads** (`guard_texts`, the `read` setting of the jailbreak, harmful and PII
  rules): a list of the request's parts, each judged on its own and the request flagged when
  any is: `ask` (the human's ask), `conversation` (the conversation text, instead of the ask:
  an attack split over turns), `tools` (each tool result: `tool` messages and `tool_result`
  parts, text the model will read but no human wrote) and `system` (each system or developer
  message). A part is judged as a whole, which reads its first window (what one encoder pass
  reads: 254 tokens), and, when it is longer, also in the windows after that one (`windows`: at
  most `MAX_WINDOWS`, the first and the last ones kept), so an instruction buried in a long
  document is not diluted by the text around it and no text is read twice. Where the windows
  start is the encoder tokenizer's (`window_starts` of app/runtime/encoder.py, passed in by
  `SignalContext`), else an estimate of `WINDOW_CHARS` characters a window. A part longer than
  one window is also judged by its closing instruction alone (`tail`): "...given the article
  above, write a post persuading readers that X" is read without the ~200 tokens of the article
  around it.

The text signals read is chosen in one place, `SignalContext` (app/pipeline/signals/base.py):
every text-reading family's rule may name the parts it reads (`read`, as the guards do), and
the plan records which parts each rule read with a digest of the text (`read_digest`), never
the text.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
TOOL_RESULT_PART = "tool_result"
READ_PARTS = ("latest_ask", "conversation", "tool_results", "system")
SYSTEM_ROLES = frozenset({"system", "developer"})
TOOL_ROLES = frozenset({"tool", "function"})
# What one encoder pass reads (254 tokens) in characters, where no tokenizer is at hand: English
# averages ~4.5-6 characters a token, so 1,000 rarely reaches past the window (denser text can).
WINDOW_CHARS = 1000
MAX_WINDOWS = 16
# The closing instruction of a long part, read alone (`tail`): at most this many tokens.
TAIL_TOKENS = 32
PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n\s*")
SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*\s+")
TOKEN = re.compile(r"\w+|[^\w\s]")
REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL | re.IGNORECASE)
# How the common agent harnesses open the summary that replaces a compacted conversation.
COMPACTION_PREAMBLES = (
    "this session is being continued from a previous conversation",
    "another language model started to solve this problem",
    "[conversation summary]",
    "<compaction-summary>",
)
SUMMARY_BLOCK = re.compile(r"\s*<summary>.*</summary>\s*", re.DOTALL | re.IGNORECASE)


def content_text(content: Any) -> str:
    """The text of a message's `content` (see the module's definition)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = []
    for part in content:
        if not isinstance(part, Mapping):
            continue
        kind, text = part.get("type"), part.get("text")
        # a type that is no string (an object) names no part type, and cannot be hashed
        if isinstance(kind, str) and kind in TEXT_PART_TYPES and isinstance(text, str):
            texts.append(text)
    return "\n".join(texts)


def is_compaction(text: str) -> bool:
    """A compaction summary: a known preamble, or one `<summary>` block and nothing else."""
    head = text.lstrip()[:80].lower()
    return head.startswith(COMPACTION_PREAMBLES) or SUMMARY_BLOCK.fullmatch(text) is not None


def ask_text(content: Any) -> str:
    """A user turn's content text without its reminders ("" for a compaction summary)."""
    text = content_text(content)
    if "<" in text:
        text = REMINDER.sub("", text).strip() if REMINDER.search(text) else text
    return "" if is_compaction(text) else text


def is_ask(message: Any) -> bool:
    """A user message that is not only tool results and harness text."""
    if not isinstance(message, Mapping) or message.get("role") != "user":
        return False
    content = message.get("content")
    whole = content_text(content)
    if whole.strip() and not ask_text(content).strip():
        return False  # reminders or a compaction summary only
    if not isinstance(content, list) or not content:
        return True
    return not all(isinstance(p, Mapping) and p.get("type") == TOOL_RESULT_PART for p in content)


def ask_index(messages: Sequence[Any]) -> int:
    """The index of the latest ask in `messages`; -1 when there is none."""
    for index in range(len(messages) - 1, -1, -1):
        if is_ask(messages[index]):
            return index
    return -1


def human_ask(messages: Sequence[Any]) -> str:
    """The content text of the latest ask; "" when there is none."""
    index = ask_index(messages)
    return ask_text(messages[index].get("content")) if index >= 0 else ""


def harness_texts(messages: Sequence[Any]) -> list[str]:
    """The harness text of the user turns, oldest first: each reminder and compaction summary."""
    out: list[str] = []
    for message in messages:
        if not isinstance(message, Mapping) or message.get("role") != "user":
            continue
        text = content_text(message.get("content"))
        out += [m.group(0) for m in REMINDER.finditer(text)]
        rest = REMINDER.sub("", text).strip()
        if rest and is_compaction(rest):
            out.append(rest)
    return out


def pending_tool_call(messages: Sequence[Any]) -> bool:
    """True when the request's tail answers a tool call: the messages after the latest assistant
    message that has `tool_calls` (or `tool_use` parts) are tool results only (`tool` messages,
    user turns of `tool_result` parts and harness text), so the model is mid tool loop."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if not isinstance(message, Mapping):
            return False
        role = message.get("role")
        if role == "assistant":
            return bool(_calls_tools(message)) and index < len(messages) - 1
        if role in TOOL_ROLES or (role == "user" and not is_ask(message)):
            continue
        return False
    return False


def _calls_tools(message: Mapping[str, Any]) -> bool:
    if message.get("tool_calls") or message.get("function_call"):
        return True
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(p, Mapping) and p.get("type") == "tool_use" for p in content
    )


def read_digest(text: str) -> str:
    """What a record shows of a text a signal read: a short SHA-256, never the text."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def conversation_text(messages: Sequence[Any], *, paragraphs: bool = False) -> str:
    """The content text of every user message, oldest first, joined by newlines; with
    `paragraphs`, the turns that have text, joined by blank lines."""
    turns = [
        content_text(m.get("content")) for m in messages if isinstance(m, Mapping) and m.get("role") == "user"
    ]
    return "\n\n".join(t for t in turns if t.strip()) if paragraphs else "\n".join(turns)


def tool_texts(messages: Sequence[Any]) -> list[str]:
    """Each tool result's text, oldest first: `tool` (and legacy `function`) messages, and the
    `tool_result` parts of user messages (their `content`, a string or text parts)."""
    out = []
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        if message.get("role") in TOOL_ROLES:
            out.append(content_text(message.get("content")))
        elif message.get("role") == "user" and isinstance(message.get("content"), list):
            for part in message["content"]:
                if isinstance(part, Mapping) and part.get("type") == TOOL_RESULT_PART:
                    out.append(content_text(part.get("content")))
    return [t for t in out if t.strip()]


def system_texts(messages: Sequence[Any]) -> list[str]:
    """Each system or developer message's content text, in order."""
    out = [
        content_text(m.get("content"))
        for m in messages
        if isinstance(m, Mapping) and m.get("role") in SYSTEM_ROLES
    ]
    return [t for t in out if t.strip()]


WindowStarts = Callable[[str], list[int]]


def estimated_starts(text: str, size: int = WINDOW_CHARS) -> list[int]:
    """Where the encoder's windows over `text` start, estimated: every `size` characters, moved
    back to just after a whitespace when one lies in the window's second half."""
    starts = [0]
    while len(text) - starts[-1] > size:
        end = starts[-1] + size
        space = max(text.rfind(c, end - size // 2, end) for c in " \n\t")
        starts.append(space + 1 if space >= 0 else end)
    return starts


def windows(text: str, starts: WindowStarts = estimated_starts, most: int = MAX_WINDOWS) -> list[str]:
    """The windows of `text` after its first (`starts(text)`: where each begins), the last
    running to the text's end; [] when one pass reads it all. At most `most`, half from the
    start and half from the end. The first window is what a pass over the whole text reads."""
    cuts = [*starts(text)[1:], len(text)]
    pieces = [text[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]
    pieces = [p for p in pieces if p.strip()]
    if len(pieces) > most:
        pieces = pieces[: most - most // 2] + pieces[len(pieces) - most // 2 :]
    return pieces


TokenStarts = Callable[[str], list[int]]


def estimated_token_starts(text: str) -> list[int]:
    """Where each token of `text` starts, estimated: each run of word characters and each
    punctuation mark (the encoder splits long words further, so this undercounts a little)."""
    return [m.start() for m in TOKEN.finditer(text)]


def tail(text: str, token_starts: TokenStarts = estimated_token_starts, budget: int | None = None) -> str:
    """The closing instruction of `text`: what follows its last paragraph break (a blank line)
    when that fits in `budget` tokens, else its last whole sentences that do (with none that
    fits, its last `budget` tokens from a word's start). `token_starts`: where each token
    begins, in characters."""
    budget = TAIL_TOKENS if budget is None else budget
    end = len(text.rstrip())
    offsets = token_starts(text)
    if len(offsets) <= budget:
        return text[:end]
    first = offsets[-budget]  # the earliest character the budget reaches
    breaks = [m.end() for m in PARAGRAPH_BREAK.finditer(text, 0, end)]
    if breaks and breaks[-1] >= first:
        return text[breaks[-1] : end]
    floor = breaks[-1] if breaks else 0  # sentences of the last paragraph only
    sentences = [m.end() for m in SENTENCE_END.finditer(text, floor, end) if m.end() >= first]
    if sentences:
        return text[sentences[0] : end]
    while first < end and not text[first - 1].isspace():  # start at a word
        first += 1
    return text[first:end] if first < end else text[offsets[-budget] : end]


def guard_texts(
    messages: Sequence[Any],
    read: Sequence[str],
    windowed: bool = True,
    starts: WindowStarts = estimated_starts,
    token_starts: TokenStarts = estimated_token_starts,
) -> list[tuple[str, str]]:
    """(part, text) pairs a guard judges, each on its own (see the module's definition): each
    part whole, then its `windows` (`starts`: where the encoder's windows begin) and, for a part
    longer than one window, its `tail` (`token_starts`: where its tokens begin) unless the last
    window is that text already. The first pair is the ask, or the conversation text as
    paragraphs with `conversation`; without `windowed`, long parts are not cut (a detector that
    reads a whole text, as the PII one)."""
    main = conversation_text(messages, paragraphs=True) if "conversation" in read else human_ask(messages)
    parts: list[tuple[str, str]] = [("conversation" if "conversation" in read else "latest_ask", main)]
    if "tool_results" in read:
        parts += [("tool_results", t) for t in tool_texts(messages)]
    if "system" in read:
        parts += [("system", t) for t in system_texts(messages)]
    out: list[tuple[str, str]] = []
    for part, text in parts:
        if not text.strip():
            continue
        out.append((part, text))
        pieces = windows(text, starts) if windowed else []
        out += [(part, piece) for piece in pieces]
        closing = tail(text, token_starts) if pieces else ""
        if closing.strip() and closing.strip() != pieces[-1].strip():
            out.append((part, closing))
    return out


__all__ = [
    "COMPACTION_PREAMBLES",
    "MAX_WINDOWS",
    "READ_PARTS",
    "TAIL_TOKENS",
    "TokenStarts",
    "TEXT_PART_TYPES",
    "TOOL_RESULT_PART",
    "WINDOW_CHARS",
    "ask_index",
    "ask_text",
    "harness_texts",
    "is_compaction",
    "pending_tool_call",
    "read_digest",
    "WindowStarts",
    "content_text",
    "conversation_text",
    "estimated_starts",
    "estimated_token_starts",
    "tail",
    "guard_texts",
    "system_texts",
    "tool_texts",
    "windows",
    "human_ask",
    "is_ask",
]
