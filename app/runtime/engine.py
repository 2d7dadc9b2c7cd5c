"""The model-runtime engine: one plain library hosted by Ray Serve deployments and by the
`svc-srun` HTTP worker alike (docs/design.md, "One model runtime, two hosts").

A request runs in three phases so that a host can batch the middle one across requests:

    prepared = model.prepare(inputs, options)          # validate, tokenize, apply overflow
    outputs  = model.forward(prepared.segment_texts)   # the model, one row per segment
    result   = model.finish(prepared, outputs)         # aggregate windows, build the answer

`classify` / `embed` chain the three for callers that do not batch. `forward` is a pure
function of its texts, so a batcher (`MicroBatcher`, `@serve.batch`) may mix segments of
many requests in one call. Failures of one input (`max_length_exceeded`,
`scan_budget_exceeded`) are item errors; whole-request failures raise `RuntimeFailure`
subclasses that carry the spec's status and code.

Answer shapes per task (/v1/classify, docs/model-runtime.md "Answers"):
- label_probabilities: label, confidence, probabilities{label: p} (softmax over the labels, sum 1)
- label_scores: scores{label: s}, each independently in [0, 1]
- token_spans: spans[{label, start, end, text, probability}], code point offsets, end exclusive
- embeddings (/v1/embeddings): unit-length vectors

This module holds the shared request handling (`TaskModel`) and the multi-model host
(`Engine`); the per-task models are in app/runtime/tasks.py.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast, runtime_checkable

from pydantic import TypeAdapter, ValidationError

from app.runtime.limits import (
    InputPlan,
    Segment,
    TextTokenizer,
    plan_input,
    resolve_budget,
)
from app.runtime.schemas import (
    ClassifyInput,
    ClassifyOptions,
    ClassifyRequest,
    ClassifyResult,
    EmbeddingsOptions,
    EmbeddingsRequest,
    EmbeddingsResult,
    InvalidRequest,
    ItemResult,
    ModelCard,
    ModelNotFound,
    QAInput,
    ResultMeta,
    Surface,
    TextPair,
    Timings,
    UnsupportedSurface,
    Usage,
    parse_request,
)

_INPUT = TypeAdapter(ClassifyInput)
FORWARD_ROWS = 32  # rows per encoder call: bounds attention memory for long window lists
_warmed: set[int] = set()  # encoders (shared per process) already warmed up


@dataclass
class Prepared:
    """A request after tokenization: per-input plans and the segments to run."""

    surface: Surface
    texts: list[str]
    options: ClassifyOptions
    plans: list[InputPlan]
    tokenize_ms: float = 0.0
    segments: list[Segment] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.segments = [seg for plan in self.plans for seg in plan.segments]

    @property
    def segment_texts(self) -> list[str]:
        return [seg.text for seg in self.segments]

    @property
    def segment_tokens(self) -> list[int]:
        return [seg.tokens for seg in self.segments]


@runtime_checkable
class RuntimeModel(Protocol):
    card: ModelCard

    def prepare(self, inputs: Any, options: Any = None, surface: Surface = "classify") -> Prepared: ...

    def forward(self, texts: list[str]) -> list[Any]: ...

    def finish(
        self, prepared: Prepared, outputs: Sequence[Any], forward_ms: float = 0.0, queue_ms: float = 0.0
    ) -> ClassifyResult | EmbeddingsResult: ...

    def classify(self, inputs: Any, options: Any = None) -> ClassifyResult: ...

    def embed(
        self, inputs: Any, options: Any = None, dimensions: int | None = None, layer: int | None = None
    ) -> EmbeddingsResult: ...

    def warm_up(self) -> None: ...

    def self_check(self) -> None: ...


class TaskModel:
    """Shared request handling; subclasses supply `_forward_rows` and `_answer`."""

    def __init__(self, card: ModelCard, tokenizer: TextTokenizer) -> None:
        self.card = card
        self.tokenizer = tokenizer

    # -- phases --------------------------------------------------------------------------

    def prepare(self, inputs: Any, options: Any = None, surface: Surface = "classify") -> Prepared:
        if surface not in self.card.surfaces:
            raise UnsupportedSurface(
                f"model {self.card.name!r} serves {', '.join(self.card.surfaces)}, not {surface}"
            )
        started = time.perf_counter()
        opts = _options(options, EmbeddingsOptions if surface == "embeddings" else ClassifyOptions)
        texts = self._texts(inputs)
        budget = resolve_budget(opts, self.card.limits, self.tokenizer.special_tokens)
        plans = [plan_input(i, text, budget, self.tokenizer) for i, text in enumerate(texts)]
        return Prepared(surface, texts, opts, plans, (time.perf_counter() - started) * 1000.0)

    def forward(self, texts: list[str]) -> list[Any]:
        """One output per text, in order. Rows are sorted by length before chunking so each
        encoder call pads little."""
        if not texts:
            return []
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out: list[Any] = [None] * len(texts)
        for lo in range(0, len(order), FORWARD_ROWS):
            chunk = order[lo : lo + FORWARD_ROWS]
            for i, value in zip(chunk, self._forward_rows([texts[i] for i in chunk]), strict=True):
                out[i] = value
        return out

    def finish(
        self, prepared: Prepared, outputs: Sequence[Any], forward_ms: float = 0.0, queue_ms: float = 0.0
    ) -> ClassifyResult | EmbeddingsResult:
        if len(outputs) != len(prepared.segments):
            raise ValueError(f"{len(outputs)} outputs for {len(prepared.segments)} segments")
        started = time.perf_counter()
        per_item: dict[int, list[tuple[Segment, Any]]] = {}
        for seg, out in zip(prepared.segments, outputs, strict=True):
            per_item.setdefault(seg.item, []).append((seg, out))
        answers = [
            None if plan.error else self._answer(prepared.texts[plan.item], per_item.get(plan.item, []))
            for plan in prepared.plans
        ]
        timings = Timings(
            tokenize_ms=round(prepared.tokenize_ms, 3),
            queue_ms=round(queue_ms, 3),
            forward_ms=round(forward_ms, 3),
            windows=len(prepared.segments),
        )
        if prepared.surface == "embeddings":
            result: ClassifyResult | EmbeddingsResult = self._embeddings_result(prepared, answers)
        else:
            result = self._classify_result(prepared, answers)
        timings.post_ms = round((time.perf_counter() - started) * 1000.0, 3)
        result._timings = timings
        if prepared.options.return_meta:
            result.meta = self.meta(timings)
        return result

    # -- one-call entry points -----------------------------------------------------------

    def classify(self, inputs: Any, options: Any = None) -> ClassifyResult:
        prepared = self.prepare(inputs, options, "classify")
        started = time.perf_counter()
        outputs = self.forward(prepared.segment_texts)
        return cast(ClassifyResult, self.finish(prepared, outputs, (time.perf_counter() - started) * 1000.0))

    def embed(
        self, inputs: Any, options: Any = None, dimensions: int | None = None, layer: int | None = None
    ) -> EmbeddingsResult:
        self.check_embedding_shape(dimensions, layer)
        prepared = self.prepare(inputs, options, "embeddings")
        started = time.perf_counter()
        outputs = self.forward(prepared.segment_texts)
        return cast(
            EmbeddingsResult, self.finish(prepared, outputs, (time.perf_counter() - started) * 1000.0)
        )

    def check_embedding_shape(self, dimensions: int | None, layer: int | None) -> None:
        """`dimensions` and `layer` are honoured only where the card declares them."""
        if "embeddings" not in self.card.surfaces:
            raise UnsupportedSurface(f"model {self.card.name!r} does not serve embeddings")
        if dimensions is not None and dimensions not in self.card.dimensions:
            raise InvalidRequest(
                f"dimensions: {self.card.name} produces {self.card.dimensions} dimensions, not {dimensions}"
            )
        if layer is not None and layer not in self.card.layers:
            declared = self.card.layers or "no layer selection"
            raise InvalidRequest(f"layer: {self.card.name} declares {declared}, not layer {layer}")

    def meta(self, timings: Timings) -> ResultMeta:
        return ResultMeta(
            revision=self.card.revision or "unknown",
            digest=self.card.digest or "unknown",
            engine=self.card.engine or "unknown",
            device=self.card.device,
            representation=self.card.representation,
            timings=timings,
        )

    def warm_up(self) -> None:
        """Pay first-pass costs (new input shapes: ~150 ms each) at load, not on a request."""
        encoder = getattr(self, "encoder", None)
        if encoder is not None and id(encoder) not in _warmed:
            encoder.warm_up()
            _warmed.add(id(encoder))
        self.forward(["warm up", "a somewhat longer sentence that warms the model up " * 3])

    def self_check(self) -> None:
        """Raise RuntimeError when the loaded model answers nonsense."""

    # -- per task ------------------------------------------------------------------------

    def _forward_rows(self, texts: list[str]) -> list[Any]:
        raise NotImplementedError

    def _answer(self, text: str, pieces: list[tuple[Segment, Any]]) -> dict[str, Any]:
        raise NotImplementedError

    def _classify_result(self, prepared: Prepared, answers: list[dict[str, Any] | None]) -> ClassifyResult:
        results = []
        total, partial = 0, False
        for plan, answer in zip(prepared.plans, answers, strict=True):
            usage = item_usage(plan)
            total += usage.tokens
            partial |= plan.partial
            if plan.error is not None:
                results.append(ItemResult(index=plan.item, error=plan.error, usage=usage))
            else:
                results.append(ItemResult(index=plan.item, usage=usage, **(answer or {})))
        return ClassifyResult(
            model=self.card.name,
            task=self.card.task,
            results=results,
            usage=Usage(tokens=total, tokens_lower_bound=True if partial else None),
        )

    def _embeddings_result(
        self, prepared: Prepared, answers: list[dict[str, Any] | None]
    ) -> EmbeddingsResult:
        raise UnsupportedSurface(f"model {self.card.name!r} does not serve embeddings")

    @staticmethod
    def _texts(inputs: Any) -> list[str]:
        if isinstance(inputs, str):
            return [_clean(inputs)]
        if isinstance(inputs, list | tuple) and all(isinstance(x, str) for x in inputs):
            return [_clean(x) for x in inputs]
        try:
            parsed = _INPUT.validate_python(inputs)
        except ValidationError as exc:
            raise InvalidRequest(
                "input must be a string, a list of strings, a list of {text, text_pair} "
                f"or a list of {{context, question, answer}}: {exc.errors()[0]['msg']}"
            ) from None
        if parsed and isinstance(parsed[0], TextPair | QAInput):
            # Every built-in head reads one text; joining a pair would answer a different question.
            raise UnsupportedSurface(
                "this model reads single texts; text pairs and QA inputs are not supported"
            )
        return [_clean(x) for x in parsed if isinstance(x, str)]


# --------------------------------------------------------------------------- a multi-model host


class Engine:
    """The models one process serves, answering wire requests. Both hosts wrap this (or one
    `RuntimeModel` of it) and add transport, batching and Server-Timing."""

    def __init__(self, models: Iterable[RuntimeModel] = (), aliases: dict[str, str] | None = None) -> None:
        self._models: dict[str, RuntimeModel] = {}
        self._aliases = dict(aliases or {})
        for model in models:
            self.add(model)

    @classmethod
    def load(cls, names: Iterable[str], engine: str = "auto", device: str = "cpu") -> Engine:
        from app.runtime.registry import ALIASES, load_model

        return cls((load_model(name, engine=engine, device=device) for name in names), aliases=ALIASES)

    def add(self, model: RuntimeModel) -> None:
        self._models[model.card.name] = model

    def cards(self) -> list[ModelCard]:
        return [m.card for m in self._models.values()]

    def model(self, name: str | None) -> RuntimeModel:
        if name is None:
            if len(self._models) == 1:
                return next(iter(self._models.values()))
            raise InvalidRequest("model: required when the process serves several models")
        found = self._models.get(name) or self._models.get(self._aliases.get(name, ""))
        if found is None:
            raise ModelNotFound(f"model {name!r} is not served here; serving: {', '.join(self._models)}")
        return found

    def classify(self, request: ClassifyRequest | dict[str, Any]) -> ClassifyResult:
        req = request if isinstance(request, ClassifyRequest) else parse_request(ClassifyRequest, request)
        return self.model(req.model).classify(req.input, req.options)

    def embed(self, request: EmbeddingsRequest | dict[str, Any]) -> EmbeddingsResult:
        req = request if isinstance(request, EmbeddingsRequest) else parse_request(EmbeddingsRequest, request)
        return self.model(req.model).embed(req.input, req.options, req.dimensions, req.layer)


def _options(options: Any, kind: type[ClassifyOptions]) -> ClassifyOptions:
    if options is None:
        return kind()
    if isinstance(options, kind):
        return options
    if isinstance(options, ClassifyOptions):
        options = options.model_dump(exclude_unset=True)
    try:
        return parse_request(kind, options)
    except InvalidRequest as exc:
        raise InvalidRequest(f"options.{exc.message}") from None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _clean(text: str) -> str:
    """Lone surrogates (JSON allows "\\ud800") cannot reach a tokenizer; each becomes U+FFFD,
    one code point for one, so every offset into the input stays valid."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def item_usage(plan: InputPlan) -> Usage:
    return Usage(tokens=plan.tokens, tokens_lower_bound=True if plan.partial else None)
