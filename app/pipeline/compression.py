"""The `context_compression` plugin: fit a conversation into a token budget.

Units. The conversation is cut into *turns*: a turn starts at a user message and holds the
replies after it (assistant messages, tool calls and their `tool` results), so dropping whole
turns never separates an assistant `tool_calls` message from the tool messages answering it.
With `keep_system`, system/developer messages are pinned units kept in place.

Budget. Tokens are counted with the MiniLM WordPiece tokenizer the router already ships for
its `context` signals (app/runtime/encoder.py `load_tokenizer`: no model, no download), plus
MESSAGE_OVERHEAD per message for the role and the chat template's delimiters. Counts are
remembered by text (COUNTS): the history a client resends each turn is not tokenized again. It is not the
backend's tokenizer: the budget is a router-side size bound, not an exact backend count.

Selection. A conversation within `max_tokens` is forwarded untouched. Otherwise the oldest
unpinned turns outside the last `keep_last_turns` are dropped, oldest first, until the rest
(plus the summary, for `summarize`) fits. Pinned units and the last turns are never dropped:
when they alone exceed the budget the result says `over_budget`.

`summarize` is extractive and offline: the lead sentence of each dropped user/assistant message
(tool results left out), in order, as one system message put where the first dropped turn was,
at most `summary_max_tokens` long. An embedding-centrality summary would need one encoder pass
per dropped sentence (MiniLM int8: 3-8.5 ms each, docs/context-compression.md), seconds
for a long conversation: the lead sentence costs microseconds.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from app.common.chat_text import content_text
from app.config.plugins import ContextCompressionPlugin
from app.pipeline.plan import CompressionOutcome, RoutePlan

TOKENIZER_NAME = "all-MiniLM-L6-v2 WordPiece (app/runtime/assets/minilm-tokenizer.json)"
MESSAGE_OVERHEAD = 4  # role and delimiters per message (the usual chat-template estimate)
SYSTEM_ROLES = frozenset({"system", "developer"})
SUMMARY_ROLES = frozenset({"user", "assistant"})
LEAD_MAX_WORDS = 40  # a lead "sentence" without punctuation stops here
HEADER = "x-vsr-context-compressed"
COUNT_CACHE_SIZE = 50_000  # distinct message texts remembered (~5 MB)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@lru_cache(maxsize=1)
def _tokenizer() -> Any:
    from app.runtime.encoder import load_tokenizer

    return load_tokenizer(None)


class _CountCache:
    """Token counts by text (a bounded LRU): a chat client resends the whole history every turn,
    so only the new messages are tokenized. Keyed by (length, hash): a collision could only
    misjudge a count, never change what is forwarded beyond the budget's tolerance."""

    def __init__(self, size: int = COUNT_CACHE_SIZE) -> None:
        self.size = size
        self._counts: OrderedDict[tuple[int, int], int] = OrderedDict()
        self._lock = threading.Lock()

    def counts(self, texts: list[str]) -> list[int]:
        keys = [(len(t), hash(t)) for t in texts]
        with self._lock:
            found = [self._counts.get(k) for k in keys]
        missing = [i for i, n in enumerate(found) if n is None]
        if missing:
            encoded = _tokenizer().encode_batch([texts[i] for i in missing], add_special_tokens=False)
            with self._lock:
                for i, encoding in zip(missing, encoded, strict=True):
                    found[i] = self._counts[keys[i]] = len(encoding.ids)
                while len(self._counts) > self.size:
                    self._counts.popitem(last=False)
        with self._lock:
            for key in keys:
                if key in self._counts:
                    self._counts.move_to_end(key)
        return [int(n or 0) for n in found]

    def clear(self) -> None:
        with self._lock:
            self._counts.clear()


COUNTS = _CountCache()


def count_texts(texts: list[str]) -> list[int]:
    """Tokens of each text (no special tokens); new texts in one batched tokenizer call."""
    return COUNTS.counts(texts) if texts else []


def warm_up() -> None:
    """Load the tokenizer now (a config with the plugin compiles), not on a request."""
    count_texts(["warm up"])


def counted_text(message: Any) -> str:
    """What a message costs: its text content plus any tool calls' names and arguments."""
    if not isinstance(message, dict):
        return ""
    parts = [content_text(message.get("content"))]
    for call in _calls(message):
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            parts += [str(function.get("name") or ""), str(function.get("arguments") or "")]
    return "\n".join(p for p in parts if p)


def _calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("tool_calls")
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def role_of(message: Any) -> str:
    return str(message.get("role") or "") if isinstance(message, dict) else ""


def lead_sentence(text: str) -> str:
    words = _SENTENCE_END.split(text.strip(), maxsplit=1)[0].split()
    lead = " ".join(words[:LEAD_MAX_WORDS])
    return lead + " ..." if len(words) > LEAD_MAX_WORDS else lead


# ------------------------------------------------------------------ the plan


@dataclass
class Unit:
    """A pinned message or a turn: message indices (in order) and their tokens."""

    indices: list[int]
    tokens: int
    pinned: bool = False


@dataclass
class CompressionPlan:
    messages: list[Any]
    tokens: list[int]  # per message, overhead included
    units: list[Unit]
    turns: list[Unit]  # the unpinned units, oldest first
    dropped: list[Unit] = field(default_factory=list)
    summary: str | None = None
    summary_tokens: int = 0


def plan_units(messages: list[Any], keep_system: bool) -> CompressionPlan:
    tokens = [n + MESSAGE_OVERHEAD for n in count_texts([counted_text(m) for m in messages])]
    units: list[Unit] = []
    current: Unit | None = None
    for index, message in enumerate(messages):
        role = role_of(message)
        if keep_system and role in SYSTEM_ROLES:
            units.append(Unit([index], tokens[index], pinned=True))  # a turn may go on after it
            continue
        if role == "user" or current is None:
            current = Unit([], 0)
            units.append(current)
        current.indices.append(index)
        current.tokens += tokens[index]
    return CompressionPlan(messages, tokens, units, [u for u in units if not u.pinned])


def _summary_lines(plan: CompressionPlan, turn: Unit) -> list[str]:
    lines = []
    for index in turn.indices:
        message = plan.messages[index]
        role = role_of(message)
        if role not in SUMMARY_ROLES:
            continue
        lead = lead_sentence(content_text(message.get("content")))
        functions = [c.get("function") for c in _calls(message)]
        if not lead and functions:
            lead = "called " + ", ".join(
                str(f.get("name") if isinstance(f, dict) else "?") for f in functions
            )
        if lead:
            lines.append(f"- {role}: {lead}")
    return lines


def _summary_head(turns: int) -> str:
    plural = "s" if turns != 1 else ""
    return f"Summary of {turns} earlier conversation turn{plural}, omitted to fit the context budget:"


def _summary(turns: int, lines: list[str], line_tokens: list[int], room: int) -> tuple[str, int]:
    """The head and the lines (in order) while they fit in `room` tokens; (text, tokens)."""
    head = _summary_head(turns)
    used = count_texts([head])[0] + MESSAGE_OVERHEAD
    kept = [head]
    for line, n in zip(lines, line_tokens, strict=True):
        if used + n > room:
            break
        kept.append(line)
        used += n
    return "\n".join(kept), used


def select(plan: CompressionPlan, config: ContextCompressionPlugin) -> None:
    """Drop the oldest droppable turns until the conversation fits (plan.dropped, plan.summary).
    `summarize` reserves room for the summary's head while dropping, then fills what is left
    of the budget (at most summary_max_tokens) with lead sentences; a head that still does not
    fit drops one more turn."""
    total = sum(plan.tokens)
    budget = config.max_tokens
    if total <= budget:
        return
    candidates = plan.turns[: max(0, len(plan.turns) - config.keep_last_turns)]
    droppable = iter(candidates)
    summarize = config.strategy == "summarize"
    reserve = count_texts([_summary_head(len(plan.turns))])[0] + MESSAGE_OVERHEAD if summarize else 0
    kept = total
    lines: list[str] = []
    line_tokens: list[int] = []
    while True:
        for turn in droppable:
            plan.dropped.append(turn)
            kept -= turn.tokens
            if summarize:
                new = _summary_lines(plan, turn)
                lines += new
                line_tokens += count_texts(new)
            if kept + reserve <= budget:
                break
        if not (summarize and plan.dropped):
            return
        room = min(config.summary_max_tokens, max(0, budget - kept))
        plan.summary, plan.summary_tokens = _summary(len(plan.dropped), lines, line_tokens, room)
        if kept + plan.summary_tokens <= budget or len(plan.dropped) == len(candidates):
            return
        reserve = plan.summary_tokens


def compress(
    messages: list[Any], config: ContextCompressionPlugin
) -> tuple[list[Any], CompressionOutcome, CompressionPlan]:
    """(forwarded messages, outcome, plan). The input list is never mutated; an untouched
    conversation comes back as the same list object."""
    plan = plan_units(messages, config.keep_system)
    if config.enabled:
        select(plan, config)
    dropped = {i for turn in plan.dropped for i in turn.indices}
    first = min(dropped, default=-1)
    out: list[Any] = []
    for index, message in enumerate(messages):
        if index == first and plan.summary is not None:
            out.append({"role": "system", "content": plan.summary})  # where the dropped turns were
        if index not in dropped:
            out.append(message)
    before = sum(plan.tokens)
    after = before - sum(t.tokens for t in plan.dropped) + plan.summary_tokens
    outcome = CompressionOutcome(
        compressed=bool(dropped),
        strategy=config.strategy,
        budget=config.max_tokens,
        tokens_before=before,
        tokens_after=after,
        tokens_saved=before - after,
        over_budget=after > config.max_tokens,
        turns_total=len(plan.turns),
        turns_dropped=len(plan.dropped),
        messages_before=len(messages),
        messages_after=len(out),
        summary_tokens=plan.summary_tokens,
    )
    return (out if dropped else messages), outcome, plan


def apply_compression(plan: RoutePlan, config: ContextCompressionPlugin) -> None:
    """Compress the plan's messages in place (once per routed request); the client learns
    what was dropped from the x-vsr-context-compressed header."""
    messages = plan.body.get("messages")
    if not isinstance(messages, list):
        return
    started = time.perf_counter()
    out, outcome, _ = compress(messages, config)
    outcome.duration_ms = (time.perf_counter() - started) * 1000
    plan.compression = outcome
    if outcome.compressed:
        plan.body["messages"] = out
        plan.response_headers[HEADER] = outcome.header()
