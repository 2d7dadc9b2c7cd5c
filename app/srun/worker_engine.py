"""The svc-srun transport of the signal interface (app/runtime/signal_engine.py): a
`model_deployments` binding's workers as a `SignalEngine` (docs/model-runtime.md "Routing
bindings").

A request is one `/v1/classify` question through the host (`ManagedRuntimes.signal`: the signal
deadline, the deployment's served model and input options, the stage's bundle,
app/srun/stage.py); the worker encodes the texts itself, so no vector travels. The answer's items
are the worker's, keeping only the answer type the binding's `contract` names. A call that got no
usable answer resolves where the binding says: a safety binding's input is unscanned
(`UnscannedError`, matching as `on_unscanned` says), a routing binding's is an error (on_error
decides); without a host (an offline preview) every call errs. A binding's `labels` map renames the
model's own labels to the signal names the family reads (docs/model-runtime.md "Bindings to your own models"):
two labels of one name add their probabilities and keep the higher score.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.config.model_deployments import OnUnscanned
from app.runtime.signal_engine import SignalItem, SignalRequest, UnscannedError

if TYPE_CHECKING:  # the host type only: the pipeline need not import the supervisor
    from app.srun.hosting import ManagedRuntimes

# The answer field each contract is read from.
CONTRACT_FIELDS = {"label_probabilities": "probabilities", "label_scores": "scores", "token_spans": "spans"}


class WorkerEngine:
    """One binding (`name`, e.g. `prompt_guard`) to `deployment`'s workers through `host`."""

    reads_vectors = False

    def __init__(
        self,
        binding: str,
        deployment: str,
        host: ManagedRuntimes | None,
        contract: str,
        *,
        safety: bool = False,
        unscanned: OnUnscanned = "block",
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self.name = f"{binding} ({deployment})"
        self.labels = dict(labels or {})
        self.deployment = deployment
        self.host = host
        self.field = CONTRACT_FIELDS[contract]
        self.safety = safety
        self.unscanned = unscanned

    def failed(self, reason: str) -> Exception:
        """A call that gave no usable answer: unscanned for a safety signal, else an error."""
        where = f"{self.name}: {reason}"
        if self.safety:
            return UnscannedError(where, matches=self.unscanned == "block")
        return RuntimeError(where)

    async def classify(self, request: SignalRequest) -> list[SignalItem]:
        """One item per text, in order (the worker's `index`)."""
        if self.host is None:
            raise RuntimeError(f"{self.name}: no model runtime host")
        result = await self.host.signal(
            self.deployment,
            "classify",
            {"input": list(request.texts)},
            None,
            safety=self.safety,
            unscanned=self.unscanned,
        )
        if result.state == "unscanned":
            raise UnscannedError(f"{self.name}: {result.error}", matches=bool(result.matches))
        if result.state != "ok":
            raise RuntimeError(f"{self.name}: {result.error}")
        raw = (result.answer or {}).get("results")
        if not isinstance(raw, list) or len(raw) != len(request.texts):
            raise self.failed("answer without one result per input")
        for item in raw:
            if not isinstance(item, dict):
                raise self.failed(f"item error {item}")
        return [self._item(item) for item in sorted(raw, key=lambda item: int(item.get("index", 0)))]

    def _item(self, raw: dict[str, Any]) -> SignalItem:
        """The item as the contract reads it: the other answer types' fields are left out."""
        kept = {k: v for k, v in raw.items() if k not in CONTRACT_FIELDS.values() or k == self.field}
        item = SignalItem.model_validate(kept)
        if item.error is None and self.field == "probabilities" and not item.probabilities:
            raise self.failed("no label probabilities in the answer")
        return self._renamed(item) if self.labels else item

    def _renamed(self, item: SignalItem) -> SignalItem:
        """The item in the signal names of the binding's `labels` map."""

        def name(label: str) -> str:
            return self.labels.get(label, label)

        update: dict[str, Any] = {}
        if item.label is not None:
            update["label"] = name(item.label)
        if item.probabilities is not None:
            summed: dict[str, float] = {}
            for label, p in item.probabilities.items():
                summed[name(label)] = summed.get(name(label), 0.0) + p
            update["probabilities"] = summed
            update["label"], update["confidence"] = max(summed.items(), key=lambda kv: kv[1])
        if item.scores is not None:
            highest: dict[str, float] = {}
            for label, score in item.scores.items():
                highest[name(label)] = max(score, highest.get(name(label), 0.0))
            update["scores"] = highest
        if item.spans is not None:
            update["spans"] = [s.model_copy(update={"label": name(s.label)}) for s in item.spans]
        return item.model_copy(update=update)
