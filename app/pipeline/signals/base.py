"""What every signal evaluator sees and how evaluators plug into the pipeline.

A signal *family* is a condition `type` of the decision rules (`keyword`, `embedding`,
`context`, and in later issues `domain`, `pii`, `jailbreak`, ...). Each family has one
evaluator built from the routing config; the pipeline asks it only for the rule names
that some decision references, and runs the families concurrently.

Adding a family (e.g. the domain classifier of the next issue) takes no pipeline
change: write a class with `family`, `warm_up()` and `evaluate()` (the
`SignalEvaluator` protocol) plus a factory `(config, services) -> evaluator`, and pass
it in `PipelineServices.evaluators["domain"]`. An evaluator for a family that is also
built in replaces the built-in one.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from app.common.chat_text import content_text, conversation_text, guard_texts, human_ask
from app.pipeline.plan import SignalMatch
from app.runtime.encoder import encoder_token_starts, encoder_window_starts
from app.runtime.signal_engine import SignalEngine, UnscannedError

if TYPE_CHECKING:
    from app.config.document import RouterConfig

EmbedFn = Callable[[list[str]], Awaitable[np.ndarray]]
CountTokensFn = Callable[[str], int]

CHARS_PER_TOKEN = 4  # the usual English estimate; exact counts need a tokenizer call


def estimate_tokens(text: str) -> int:
    """Cheap token estimate: ceil(chars / 4). Exact enough for `context` bands like 4K/32K."""
    return -(-len(text) // CHARS_PER_TOKEN)


class SignalContext:
    """Per-request inputs of the evaluators, computed once and shared.

    The text a signal reads is chosen here, in the words of app/common/chat_text.py: `text`
    is the human's ask, `history_text` the conversation text, `text_for(include_history)`
    a rule's choice of the two. `query_vector()` embeds the human's ask at most once per
    request, on first use, whoever asks first (an embedding signal, a learned evaluator, the
    cache): the "one encoder pass per request" rule. `semantic_vector()` is the ask's vector in
    the space the embedding rules and the cache read: the `embedding` binding's encoder
    (`semantic_embed`) when the config binds one, else the same vector as `query_vector()`.
    """

    def __init__(
        self,
        messages: list[dict[str, Any]],
        *,
        embed: EmbedFn | None = None,
        count_tokens: CountTokensFn | None = None,
        headers: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        semantic_embed: EmbedFn | None = None,
    ) -> None:
        self.messages = messages
        self.headers: Mapping[str, str] = headers or {}
        self.body: Mapping[str, Any] = body or {}
        self.text = human_ask(messages)  # the query the signals judge
        self.message_count = len(messages)
        self._count_tokens = count_tokens
        self._token_count: int | None = None
        self._parts: dict[tuple[str, ...], list[tuple[str, str]]] = {}
        self._graph = RequestVectors(embed)
        # the `embedding` binding's encoder, else the graph's (one space, one pass)
        self._semantic = RequestVectors(semantic_embed) if semantic_embed is not None else self._graph

    @functools.cached_property
    def history_text(self) -> str:
        """The conversation text: what `include_history` signals read (PII, jailbreak, harmful)."""
        return conversation_text(self.messages)

    @functools.cached_property
    def history_paragraphs(self) -> str:
        """The conversation text as paragraphs: what the jailbreak and harmful guards read."""
        return conversation_text(self.messages, paragraphs=True)

    def parts_for(
        self, read: Sequence[str], include_history: bool = False, windowed: bool = True
    ) -> list[tuple[str, str]]:
        """A safety rule's (part, text) pairs (app/common/chat_text.py `guard_texts`), a long
        part's windows cut where the encoder's own windows start, so none re-reads what the
        part's whole vector read, and its tail counted in the encoder's tokens; `include_history` is the older spelling of reading `conversation`."""
        key = (*sorted(set(read) | ({"conversation"} if include_history else set())), str(windowed))
        cached = self._parts.get(key)
        if cached is None:
            cached = self._parts[key] = guard_texts(
                self.messages, key[:-1], windowed, encoder_window_starts, encoder_token_starts
            )
        return cached

    async def part_vectors(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """Unit vectors of a rule's parts other than the ask, embedded in one call per request
        and shared by every guard that reads them (the ask's is `query_vector`)."""
        return await self._graph.parts(texts)

    async def semantic_part_vectors(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """`part_vectors` in the semantic space (the `embedding` binding's encoder when bound)."""
        return await self._semantic.parts(texts)

    def whole_text_for(self, read: Sequence[str], include_history: bool = False) -> str:
        """The parts a rule reads as one text (blank-line joined): the PII detector's input.
        Only the ask (or the conversation) when `read` names nothing more."""
        parts = self.parts_for(read, include_history, windowed=False)
        if len(parts) <= 1:
            return self.text_for(include_history)
        return "\n\n".join(text for _, text in parts)

    def text_for(self, include_history: bool, paragraphs: bool = False) -> str:
        """A rule's text: with `include_history` the conversation text (as `paragraphs` when
        asked), else the human's ask."""
        if not include_history:
            return self.text
        return self.history_paragraphs if paragraphs else self.history_text

    @property
    def token_count(self) -> int:
        """Tokens of the whole prompt (every message's text), computed on first use.

        With `PipelineServices.count_tokens` (e.g. the MiniLM tokenizer's exact count)
        that is used; otherwise ceil(chars / 4) over the message texts.
        """
        if self._token_count is None:
            text = "\n".join(content_text(m.get("content")) for m in self.messages if isinstance(m, dict))
            if self._count_tokens is not None:
                try:
                    self._token_count = int(self._count_tokens(text))
                except Exception:  # a tokenizer failure must not fail routing
                    self._token_count = estimate_tokens(text)
            else:
                self._token_count = estimate_tokens(text)
        return self._token_count

    def start_query_vector(self) -> None:
        """Start embedding now (in the background) when a later stage will surely need it."""
        self._graph.start(self.text)

    def start_semantic_vector(self) -> None:
        """`start_query_vector` for the semantic space (the cache's lookup will need it)."""
        self._semantic.start(self.text)

    async def query_vector(self) -> np.ndarray:
        """Unit vector (384,) of `text`; raises if no embedder is configured or text is empty."""
        return await self._graph.query(self.text)

    async def semantic_vector(self) -> np.ndarray:
        """Unit vector of `text` in the semantic space: what the embedding rules and the cache read."""
        return await self._semantic.query(self.text)

    @property
    def has_vector(self) -> bool:
        return self._graph.has_query

    def cancel(self) -> None:
        """Drop an embedding nobody awaited (e.g. the request ended on a fast response)."""
        self._graph.cancel()
        if self._semantic is not self._graph:
            self._semantic.cancel()


class RequestVectors:
    """One encoder's vectors of one request's texts, each text embedded at most once: the ask
    (`query`) and the other parts rules read (`parts`, one call per batch of new texts)."""

    def __init__(self, embed: EmbedFn | None) -> None:
        self._embed = embed
        self._query: asyncio.Task[np.ndarray] | None = None
        self._parts: dict[str, asyncio.Future[np.ndarray]] = {}

    def start(self, text: str) -> None:
        if self._query is None and self._embed is not None and text:
            self._query = asyncio.ensure_future(self._embed_one(text))

    async def query(self, text: str) -> np.ndarray:
        if self._embed is None:
            raise RuntimeError("no embedding service configured")
        if not text:
            raise ValueError("no user text to embed")
        if self._query is None:
            self._query = asyncio.ensure_future(self._embed_one(text))
        # shield: one cancelled waiter must not cancel the shared computation
        return await asyncio.shield(self._query)

    @property
    def has_query(self) -> bool:
        return self._query is not None and self._query.done() and not self._query.exception()

    async def parts(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        if not texts:
            return {}
        if self._embed is None:
            raise RuntimeError("no embedding service configured")
        missing = [t for t in dict.fromkeys(texts) if t not in self._parts]
        if missing:
            batch = asyncio.ensure_future(self._embed(missing))
            for index, text in enumerate(missing):
                self._parts[text] = asyncio.ensure_future(_row(batch, index))
        rows = await asyncio.gather(*(asyncio.shield(self._parts[t]) for t in texts))
        return dict(zip(texts, rows, strict=True))

    async def _embed_one(self, text: str) -> np.ndarray:
        assert self._embed is not None
        vectors = await self._embed([text])
        return np.asarray(vectors, dtype=np.float32).reshape(-1)

    def cancel(self) -> None:
        task = self._query
        if task is not None and not task.done():
            task.cancel()
        elif task is not None and task.done() and not task.cancelled():
            task.exception()  # mark retrieved so asyncio does not log it
        for future in self._parts.values():
            if not future.done():
                future.cancel()
            elif not future.cancelled():
                future.exception()


async def _row(batch: asyncio.Future[np.ndarray], index: int) -> np.ndarray:
    return np.asarray(await asyncio.shield(batch), dtype=np.float32)[index]


@runtime_checkable
class SignalEvaluator(Protocol):
    """One signal family. Evaluators are built per config and must be safe to share
    between concurrent requests (no per-request state on self)."""

    family: str

    def rule_names(self) -> list[str]:
        """Names of all configured rules of this family (for previews)."""
        ...

    async def warm_up(self) -> None:
        """Pay one-off costs (embedding candidates, loading models) before traffic."""
        ...

    async def evaluate(self, ctx: SignalContext, names: frozenset[str]) -> list[SignalMatch]:
        """One SignalMatch per requested name. Errors of one rule go in `SignalMatch.error`;
        an exception fails the whole family (every requested rule is reported errored)."""
        ...


EvaluatorFactory = Callable[["RouterConfig", Any], SignalEvaluator]


async def request_vectors(
    engine: SignalEngine, ctx: SignalContext, text: str | None = None
) -> np.ndarray | None:
    """The request's query vector (1, dim) for an engine on the Router's vector space when the
    text it reads (`text`, default the human's ask) is the ask; None otherwise, or when the
    encoder is unavailable (the Embedding deployment down): the engine then encodes itself."""
    if not engine.reads_vectors or (text is not None and text != ctx.text):
        return None
    try:
        return (await ctx.query_vector()).reshape(1, -1)
    except Exception:
        return None


def error_matches(family: str, names: frozenset[str] | set[str], message: str) -> list[SignalMatch]:
    return [
        SignalMatch(type=family, name=n, matched=False, confidence=0.0, error=message) for n in sorted(names)
    ]


def unscanned_match(family: str, name: str, exc: UnscannedError) -> SignalMatch:
    """The SignalMatch of a rule whose input was not scanned: matched (confidence 1.0), or an
    error when on_unscanned is `allow`; detail `unscanned` either way (plan.security reports it)."""
    detail = {"unscanned": True, "reason": exc.reason}
    if exc.matches:
        return SignalMatch(type=family, name=name, matched=True, confidence=1.0, detail=detail)
    return SignalMatch(
        type=family, name=name, matched=False, confidence=0.0, detail=detail, error=f"unscanned: {exc.reason}"
    )


@dataclass
class FamilyResult:
    family: str
    matches: list[SignalMatch] = field(default_factory=list)
    elapsed_ms: float = 0.0
