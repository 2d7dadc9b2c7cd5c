"""The decision model: answers choice, noul, score, set and span questions about a state by
zero-shot scoring with the shared MiniLM encoder, calibrated into probabilities
(`calibration.py`, fitted by scripts/train_decision_calibration.py).

One request runs in up to two encoder rounds, each a list of texts that a host may batch
with other requests' texts (`EncodeFn`): round one encodes each state (its read part, with
token states) and the option texts not already cached; round two, only for span questions,
encodes the candidate phrases of the state. Everything else is numpy on those vectors.

States longer than the read budget (options.max_tokens, capped by max_input_tokens) are read
up to the budget, cut at a word start; usage then carries `tokens_lower_bound: true`.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.runtime.limits import TextTokenizer, plan_input, resolve_budget
from app.runtime.schemas import ClassifyOptions, InvalidRequest, Timings, parse_request
from app.srun.calibration import (
    Calibration,
    choice_probs,
    label_probs,
    noul_prob,
    score_probs,
    span_probs,
)
from app.srun.questions import (
    ChoiceAnswer,
    DecisionRequest,
    DecisionResponse,
    DecisionUsage,
    InvalidAnswer,
    NestedDecisionResponse,
    NoulAnswer,
    NoulQuestion,
    Question,
    QuestionError,
    ScoreAnswer,
    SetResult,
    SpanOut,
    parse_question,
)
from app.srun.schemas import RejectedInput, WorkerCard


@dataclass
class EncodedRow:
    vector: np.ndarray  # unit sentence vector (384,)
    states: np.ndarray | None = None  # (tokens, 384) contextual token states, specials included
    offsets: list[tuple[int, int]] | None = None  # code point offsets per token; (0, 0) for specials


EncodeFn = Callable[[list[str]], Awaitable[list[EncodedRow]]]

_WORD = re.compile(r"\w+(?:[-'.&]\w+)*")
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "of",
        "in",
        "on",
        "at",
        "to",
        "for",
        "from",
        "by",
        "with",
        "about",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "i",
        "you",
        "he",
        "she",
        "we",
        "they",
        "me",
        "my",
        "your",
        "our",
        "their",
        "his",
        "her",
        "them",
        "us",
        "do",
        "does",
        "did",
        "not",
        "no",
        "so",
        "if",
        "then",
        "than",
        "can",
        "could",
        "would",
        "should",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "have",
        "has",
        "had",
        "my",
        "mine",
        "yours",
    ]
)
MAX_SPAN_WORDS = 4
MAX_SPAN_CANDIDATES = 64


def option_text(key: str, description: str) -> str:
    """How an option is embedded: "key: description" (better than either alone on the train split)."""
    key = key.replace("_", " ").strip()
    return f"{key}: {description}" if description.strip() else key


def question_texts(question: Question) -> list[str]:
    """The texts one question needs vectors of, in option order."""
    if isinstance(question, NoulQuestion) and not question.options():
        return [question.instructions or ""]
    return [option_text(k, d) for k, d in question.options()]


@dataclass
class _Unit:
    """One state and its questions (the request's own, or one `states` entry)."""

    name: str | None
    text: str
    questions: dict[str, Question]
    invalid: dict[str, InvalidAnswer]
    tokens: int = 0
    partial: bool = False
    read: str = ""  # the part of the state read
    row: EncodedRow | None = None
    candidates: list[tuple[int, int]] = field(default_factory=list)  # span candidates (code points)


class DecisionModel:
    """Hosts call `decide(body, encode)`; `forward(texts)` is the batchable encoder pass."""

    VECTOR_CACHE = 8192  # option texts repeat across requests: cache their vectors

    def __init__(
        self, card: WorkerCard, tokenizer: TextTokenizer, encoder: Any, calibration: Calibration
    ) -> None:
        self.card = card
        self.tokenizer = tokenizer
        self.encoder = encoder
        self.calibration = calibration
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    # -- the batchable phase -------------------------------------------------------------

    def forward(self, texts: list[str]) -> list[EncodedRow]:
        if not texts:
            return []
        batch = self.encoder.encode_full(texts)
        return [
            EncodedRow(batch.vectors[i], batch.token_states[i], batch.offsets[i]) for i in range(len(texts))
        ]

    async def _direct(self, texts: list[str]) -> list[EncodedRow]:
        return self.forward(texts)

    # -- a request -----------------------------------------------------------------------

    async def decide(
        self,
        body: DecisionRequest | dict[str, Any],
        encode: EncodeFn | None = None,
        timings: Timings | None = None,
    ) -> DecisionResponse:
        """InvalidRequest for a malformed body, an unsupported modality or no valid question."""
        encode = encode or self._direct
        timings = timings if timings is not None else Timings()
        started = time.perf_counter()
        request = body if isinstance(body, DecisionRequest) else parse_request(DecisionRequest, body)
        if request.images:
            raise RejectedInput(f"model {self.card.name!r} does not read images", "modality_not_supported")
        if request.videos:
            raise RejectedInput(f"model {self.card.name!r} does not read videos", "modality_not_supported")
        units = [self._unit(None, request.state, request.questions)]
        for name, nested in (request.states or {}).items():
            units.append(self._unit(name, nested.state, nested.questions))
        if not any(u.questions for u in units):
            first = next(
                (a.message for u in units for a in u.invalid.values()), "the request has no questions"
            )
            raise InvalidRequest(f"no valid question: {first}")
        self._read(units, request.options.max_tokens)
        timings.tokenize_ms += (time.perf_counter() - started) * 1000.0

        # Round one: states (with token states) and uncached option texts.
        wanted = {t for u in units for q in u.questions.values() for t in question_texts(q)}
        with self._lock:
            missing = sorted(t for t in wanted if t not in self._vectors)
        live = [u for u in units if u.questions]
        rows = await encode([u.read for u in live] + missing)
        for unit, row in zip(live, rows[: len(live)], strict=True):
            unit.row = row
        self._remember(missing, [r.vector for r in rows[len(live) :]])
        vectors = self._lookup(wanted)

        # Round two: span candidates as phrases of their own.
        phrases: list[str] = []
        for unit in live:
            if any(q.type == "span" for q in unit.questions.values()):
                unit.candidates = self._candidates(unit, vectors)
                phrases += [unit.read[a:b] for a, b in unit.candidates]
        phrase_rows = await encode(phrases) if phrases else []

        post = time.perf_counter()
        out: list[NestedDecisionResponse] = []
        cursor = 0
        for unit in units:
            used = len(unit.candidates)
            out.append(self._answer(unit, vectors, [r.vector for r in phrase_rows[cursor : cursor + used]]))
            cursor += used
        root = DecisionResponse(**out[0].model_dump())
        if len(units) > 1:
            root.states = {u.name: r for u, r in zip(units[1:], out[1:], strict=True) if u.name is not None}
            total = sum(u.tokens for u in units)
            partial = any(u.partial for u in units)
            root.usage = DecisionUsage(tokens=total, tokens_lower_bound=True if partial else None)
        timings.post_ms += (time.perf_counter() - post) * 1000.0
        if request.options.return_meta:
            root.meta = {
                "revision": self.card.revision or "unknown",
                "digest": self.card.digest or "unknown",
                "profile": self.card.profile,
                "engine": self.card.engine or "onnxruntime",
                "device": self.card.device,
                "calibration": self.calibration.version,
                "timings": timings.to_wire(),
            }
        return root

    # -- steps ---------------------------------------------------------------------------

    def _unit(self, name: str | None, text: str, raw: dict[str, Any]) -> _Unit:
        valid: dict[str, Question] = {}
        invalid: dict[str, InvalidAnswer] = {}
        prefix = f"states.{name}." if name is not None else ""
        for qid, spec in raw.items():
            try:
                question = parse_question(qid, spec)
                if (
                    isinstance(question, NoulQuestion)
                    and not question.options()
                    and not question.instructions
                ):
                    raise QuestionError(
                        "noul", f"questions.{qid}: a noul question needs instructions or criteria"
                    )
                valid[qid] = question
            except QuestionError as exc:
                invalid[qid] = InvalidAnswer(type=exc.qtype, message=prefix + exc.message)
        return _Unit(name, _clean(text), valid, invalid)

    def _read(self, units: list[_Unit], max_tokens: int | None) -> None:
        options = ClassifyOptions(overflow="truncate", max_tokens=max_tokens)
        budget = resolve_budget(options, self.card.limits, self.tokenizer.special_tokens)
        for unit in units:
            if not unit.questions:
                continue
            plan = plan_input(0, unit.text, budget, self.tokenizer)
            unit.tokens, unit.partial = plan.tokens, plan.partial
            unit.read = plan.segments[0].text if plan.segments else ""

    def _remember(self, texts: Sequence[str], vectors: Sequence[np.ndarray]) -> None:
        with self._lock:
            for text, vector in zip(texts, vectors, strict=True):
                self._vectors[text] = np.asarray(vector, np.float32)
            while len(self._vectors) > self.VECTOR_CACHE:
                self._vectors.popitem(last=False)

    def _lookup(self, texts: set[str]) -> dict[str, np.ndarray]:
        with self._lock:
            found = {t: self._vectors[t] for t in texts if t in self._vectors}
            for t in found:
                self._vectors.move_to_end(t)
        return found

    def _candidates(self, unit: _Unit, vectors: dict[str, np.ndarray]) -> list[tuple[int, int]]:
        """Word n-grams of the read state (no stopword at either edge), ranked by the
        contextual score of their tokens, at most MAX_SPAN_CANDIDATES."""
        words = [(m.start(), m.end()) for m in _WORD.finditer(unit.read)]
        spans = []
        for i in range(len(words)):
            if unit.read[words[i][0] : words[i][1]].lower() in _STOPWORDS:
                continue
            for j in range(i, min(i + MAX_SPAN_WORDS, len(words))):
                if unit.read[words[j][0] : words[j][1]].lower() in _STOPWORDS:
                    continue
                spans.append((words[i][0], words[j][1]))
        if len(spans) <= MAX_SPAN_CANDIDATES:
            return spans
        labels = np.stack(
            [vectors[t] for q in unit.questions.values() if q.type == "span" for t in question_texts(q)]
        )
        context = self._context(unit, spans) @ labels.T
        keep = np.argsort(-context.max(axis=1))[:MAX_SPAN_CANDIDATES]
        return [spans[i] for i in sorted(keep)]

    def _context(self, unit: _Unit, spans: list[tuple[int, int]]) -> np.ndarray:
        """Unit mean of the contextual token states inside each span (token-level scores)."""
        assert unit.row is not None and unit.row.states is not None and unit.row.offsets is not None
        states = np.asarray(unit.row.states, np.float32)
        starts = np.array([a for a, _ in unit.row.offsets])
        ends = np.array([b for _, b in unit.row.offsets])
        real = ends > starts
        out = np.zeros((len(spans), states.shape[1]), np.float32)
        for i, (a, b) in enumerate(spans):
            inside = real & (starts >= a) & (ends <= b)
            if inside.any():
                v = states[inside].mean(axis=0)
                out[i] = v / max(float(np.linalg.norm(v)), 1e-12)
        return out

    def _answer(
        self, unit: _Unit, vectors: dict[str, np.ndarray], phrase_vectors: list[np.ndarray]
    ) -> NestedDecisionResponse:
        cal = self.calibration
        result = NestedDecisionResponse(
            model=self.card.served_name or self.card.name,
            usage=DecisionUsage(tokens=unit.tokens, tokens_lower_bound=True if unit.partial else None),
        )
        answers: dict[str, Any] = dict(unit.invalid)
        sets: dict[str, SetResult] = {}
        spans: dict[str, list[SpanOut]] = {}
        state = unit.row.vector if unit.row is not None else None
        for qid, q in unit.questions.items():
            assert state is not None
            threshold = q.threshold if q.threshold is not None else cal.thresholds[q.type]
            result.thresholds[qid] = threshold
            options = q.options()
            cos = np.array([float(vectors[t] @ state) for t in question_texts(q)])
            if q.type == "choice":
                probs, abstain = choice_probs(cos, cal)
                best = int(np.argmax(probs))
                confidence = float(probs[best] * (1.0 - abstain))
                answers[qid] = ChoiceAnswer(
                    choice=options[best][0] if confidence >= threshold else None,
                    confidence=round(confidence, 6),
                    probabilities={k: round(float(p), 6) for (k, _), p in zip(options, probs, strict=True)},
                    abstain_probability=round(abstain, 6),
                )
            elif q.type == "noul":
                by_key = dict(zip([k for k, _ in options], cos, strict=True)) if options else {"true": cos[0]}
                answers[qid] = NoulAnswer(
                    noul=round(noul_prob(by_key.get("true"), by_key.get("false"), cal), 6)
                )
            elif q.type == "score":
                probs = score_probs(cos, cal)
                confidence = float(probs.max())
                answers[qid] = ScoreAnswer(
                    score=round(float(np.dot(np.arange(len(probs)), probs)), 6)
                    if confidence >= threshold
                    else None,
                    confidence=round(confidence, 6),
                    legend={k: d for k, d in options},
                    probabilities={k: round(float(p), 6) for (k, _), p in zip(options, probs, strict=True)},
                )
            elif q.type == "set":
                probs = label_probs(cos, cal)
                by_label = {k: round(float(p), 6) for (k, _), p in zip(options, probs, strict=True)}
                for key, p in by_label.items():
                    answers[f"{qid}.{key}"] = NoulAnswer(noul=p)
                sets[qid] = SetResult(
                    selected=[k for k, p in by_label.items() if p >= threshold], probabilities=by_label
                )
            else:
                found, any_p = self._spans(unit, q, vectors, phrase_vectors, threshold)
                spans[qid] = found
                answers[qid] = NoulAnswer(noul=round(any_p, 6))
        result.answers = answers
        result.sets = sets or None
        result.spans = spans or None
        return result

    def _spans(
        self,
        unit: _Unit,
        q: Question,
        vectors: dict[str, np.ndarray],
        phrase_vectors: list[np.ndarray],
        threshold: float,
    ) -> tuple[list[SpanOut], float]:
        if not unit.candidates:
            return [], 0.0
        options = q.options()
        labels = np.stack([vectors[t] for t in question_texts(q)])
        direct = np.stack(phrase_vectors) @ labels.T
        context = self._context(unit, unit.candidates) @ labels.T
        probs = span_probs(direct, context, self.calibration)  # (candidates, labels)
        order = sorted(
            ((float(probs[i, j]), i, j) for i in range(probs.shape[0]) for j in range(probs.shape[1])),
            reverse=True,
        )
        taken: list[SpanOut] = []
        for p, i, j in order:
            if p < threshold:
                break
            a, b = unit.candidates[i]
            if any(s.start < b and a < s.end for s in taken):
                continue
            taken.append(
                SpanOut(label=options[j][0], start=a, end=b, text=unit.read[a:b], probability=round(p, 6))
            )
        taken.sort(key=lambda s: s.start)
        return taken, float(probs.max())


_SURROGATE = re.compile("[\ud800-\udfff]")


def _clean(text: str) -> str:
    """Lone surrogates cannot reach the tokenizer; one U+FFFD each keeps offsets valid."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def raw_features(model: DecisionModel, state: str, question: dict[str, Any]) -> dict[str, Any]:
    """Uncalibrated scores of one question (the calibration script fits on these): `cos` per
    option; for span questions also the candidates and their direct/contextual cosines."""
    unit = model._unit(None, state, {"q": question})
    if not unit.questions:
        raise InvalidRequest(next(iter(unit.invalid.values())).message)
    model._read([unit], None)
    q = unit.questions["q"]
    texts = question_texts(q)
    rows = model.forward([unit.read, *texts])
    unit.row = rows[0]
    vectors = {t: r.vector for t, r in zip(texts, rows[1:], strict=True)}
    out: dict[str, Any] = {"cos": np.array([float(vectors[t] @ unit.row.vector) for t in texts])}
    if q.type == "span":
        unit.candidates = model._candidates(unit, vectors)
        labels = np.stack([vectors[t] for t in texts])
        phrases = model.forward([unit.read[a:b] for a, b in unit.candidates])
        out["candidates"] = [unit.read[a:b] for a, b in unit.candidates]
        if phrases:
            out["direct"] = np.stack([r.vector for r in phrases]) @ labels.T
            out["context"] = model._context(unit, unit.candidates) @ labels.T
    return out
