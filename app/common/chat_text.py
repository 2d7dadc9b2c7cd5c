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

- **what a guard reads** (`guard_texts`, the `read` setting of the jailbreak, harmful and PII
  rules): a list of the request's parts, each judged on its own and the request flagged when
  any is: `ask` (the human's ask), `conversation` (the conversation text, instead of the ask:
  an attack split over turns), `tools` (each tool result: `tool` messages and `tool_result`
  parts, text the model will read but no human wrote) and `system` (each system or developer
  message). A part longer than `WINDOW_CHARS` is judged in windows of about that size (at most
  `MAX_WINDOWS`, the first and the last ones kept), so an instruction buried in a long document
  is not diluted by the text around it; the part as a whole is judged too.

The text signals read is chosen in one place, `SignalContext` (app/pipeline/signals/base.py).
Setting harness reminders and compaction summaries apart from the human's ask (agent traffic)
is a change to `is_ask` and to what `SignalContext` offers, not to each signal family.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
TOOL_RESULT_PART = "tool_result"
READ_PARTS = ("ask", "conversation", "tools", "system")
SYSTEM_ROLES = frozenset({"system", "developer"})
TOOL_ROLES = frozenset({"tool", "function"})
WINDOW_CHARS = 1000  # about the encoder's 256 tokens
MAX_WINDOWS = 16


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


def windows(text: str, size: int = WINDOW_CHARS, most: int = MAX_WINDOWS) -> list[str]:
    """`text` cut into pieces of about `size` characters at paragraph, line or sentence ends
    (a hard cut when there is none); at most `most`, half from the start and half from the end."""
    if len(text) <= size:
        return [text]
    pieces: list[str] = []
    rest = text
    while len(rest) > size:
        cut = max(rest.rfind("\n\n", 0, size), rest.rfind("\n", 0, size), rest.rfind(". ", 0, size))
        cut = cut + 1 if cut > size // 4 else size
        pieces.append(rest[:cut])
        rest = rest[cut:]
    pieces.append(rest)
    pieces = [p for p in pieces if p.strip()]
    if len(pieces) > most:
        pieces = pieces[: most - most // 2] + pieces[len(pieces) - most // 2 :]
    return pieces


def guard_texts(messages: Sequence[Any], read: Sequence[str], windowed: bool = True) -> list[tuple[str, str]]:
    """(part, text) pairs a guard judges, each on its own (see the module's definition). The
    first pair is the ask, or the conversation text as paragraphs with `conversation`; without
    `windowed`, long parts are not cut (a detector that reads a whole text, as the PII one)."""
    main = conversation_text(messages, paragraphs=True) if "conversation" in read else human_ask(messages)
    parts: list[tuple[str, str]] = [("conversation" if "conversation" in read else "ask", main)]
    if "tools" in read:
        parts += [("tools", t) for t in tool_texts(messages)]
    if "system" in read:
        parts += [("system", t) for t in system_texts(messages)]
    out: list[tuple[str, str]] = []
    for part, text in parts:
        if not text.strip():
            continue
        out.append((part, text))
        pieces = windows(text) if windowed else [text]
        if len(pieces) > 1:
            out += [(part, piece) for piece in pieces]
    return out


__all__ = [
    "MAX_WINDOWS",
    "READ_PARTS",
    "TEXT_PART_TYPES",
    "TOOL_RESULT_PART",
    "WINDOW_CHARS",
    "ask_index",
    "content_text",
    "conversation_text",
    "guard_texts",
    "system_texts",
    "tool_texts",
    "windows",
    "human_ask",
    "is_ask",
]
