"""What the text of a chat request is: one definition of each word (docs/architecture.md's
glossary), used by the signals, the cache, the plugins, the answer checks, the Responses
rendering and the management previews.

- **content text** (`content_text`): a message content's text. A string is itself. A list of
  parts gives the `text` of its text parts, in order, joined by newlines; text parts are the
  types `text` (chat), `input_text` and `output_text` (Responses). Every other part gives
  nothing: images (`image_url`, `input_image`), audio, files, refusals, and tool results
  (`tool_result` parts carry a tool's output, not the author's words). `None`, or anything
  that is not a string or a list, gives "".
- **an ask** (`is_ask`): a user message that is not only tool results. A user message is only
  tool results when its content is a non-empty list of `tool_result` parts: a tool loop in the
  messages-style layout, where the tool's answer rides in a user turn. In OpenAI's layout tool
  results are `tool` messages, and those are never asks (nor is any system, developer or
  assistant message).
- **the human's ask** (`human_ask`): the content text of the latest ask; "" when there is none.
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

The text signals read is chosen in one place, `SignalContext` (app/pipeline/signals/base.py).
Setting harness reminders and compaction summaries apart from the human's ask (agent traffic)
is a change to `is_ask` and to what `SignalContext` offers, not to each signal family.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
TOOL_RESULT_PART = "tool_result"


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


def is_ask(message: Any) -> bool:
    """A user message that is not only tool results."""
    if not isinstance(message, Mapping) or message.get("role") != "user":
        return False
    content = message.get("content")
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
    return content_text(messages[index].get("content")) if index >= 0 else ""


def conversation_text(messages: Sequence[Any], *, paragraphs: bool = False) -> str:
    """The content text of every user message, oldest first, joined by newlines; with
    `paragraphs`, the turns that have text, joined by blank lines."""
    turns = [
        content_text(m.get("content")) for m in messages if isinstance(m, Mapping) and m.get("role") == "user"
    ]
    return "\n\n".join(t for t in turns if t.strip()) if paragraphs else "\n".join(turns)


__all__ = [
    "TEXT_PART_TYPES",
    "TOOL_RESULT_PART",
    "ask_index",
    "content_text",
    "conversation_text",
    "human_ask",
    "is_ask",
]
