"""Which model serves each binding of the router's own graph, and where: one typed description
read by the typed model diagnostics (app/api/model_bindings.py) and the inventory
(app/management/inventory.py).

A binding is one of the contract's binding names (app/config/model_deployments.py BINDINGS) under
the name the router gives it, served by the graph unless the configuration binds it to a
`model_deployments` entry. Built-in models carry the card of app/runtime/registry.py (the
reranker's is the worker catalogue's, app/srun/catalog.py): task, labels, limits, the engine
the graph picks on CPU (`auto`: int8 ONNX for the MiniLM models, presidio + spaCy for PII) and
the pinned revision and digest of the files that engine loads (`registry.pin`). Heads and rules
that run inside the Router deployment name the encoder whose vector they read (`reads`).
Nothing is loaded to describe them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from pydantic import BaseModel

from app.config.recipes import DEFAULT_RECIPE
from app.config.semantic_signals import MODALITIES
from app.models.fact_check import FACT_CHECK_LABELS
from app.models.feedback import FEEDBACK_LABELS
from app.runtime import registry
from app.srun.catalog import RERANKER, SPECS

DEVICE = "cpu"  # the graph's model deployments run on CPU unless Serve gives a replica a GPU
ENCODER = "minilm-embedding"
CARDS = Path(__file__).resolve().parents[2] / "docs" / "model-cards"


@dataclass(frozen=True)
class GraphModel:
    model: str  # a built-in model (registry or worker catalogue), or a head / rule set
    deployment: str  # the graph deployment that hosts it
    card: str | None = None  # docs/model-cards/<card>.md
    builtin: bool = True  # False: a head or rules inside `deployment`, no card of its own
    reads: str | None = None  # a head: the built-in encoder whose vector it reads
    task: str = ""  # a head's task (built-ins: their card's)
    labels: tuple[str, ...] = ()  # a head's labels
    typed: bool = True  # answers the typed diagnostics routes (/models/labels, /embeddings, ...)


GRAPH_MODELS: dict[str, GraphModel] = {
    "embedding": GraphModel(ENCODER, "Embedding"),
    "domain_classifier": GraphModel("domain-classifier", "DomainClassifier", "domain-classifier"),
    "prompt_guard": GraphModel("jailbreak-guard", "Guard", "jailbreak-guard"),
    "pii_classifier": GraphModel("pii-detector", "Guard", "pii-detector"),
    # Rerank runs in the Ingress on the Embedding deployment's vectors (app/srun/rerank.py's
    # fusion); the contract names the binding `rag.reranker`, the typed routes `reranker`.
    "reranker": GraphModel(RERANKER, "Embedding"),
    "rag.reranker": GraphModel(RERANKER, "Embedding", typed=False),
    "fact_check_classifier": GraphModel(
        "fact-check-head",
        "Router",
        "fact-check",
        builtin=False,
        reads=ENCODER,
        task="label_probabilities",
        labels=FACT_CHECK_LABELS,
        typed=False,
    ),
    "feedback_detector": GraphModel(
        "user-feedback-rules",
        "Router",
        "user-feedback",
        builtin=False,
        task="label_scores",
        labels=FEEDBACK_LABELS,
        typed=False,
    ),
    "modality_detector": GraphModel(
        "modality-rules", "Router", builtin=False, task="label_scores", labels=MODALITIES, typed=False
    ),
    # The hallucination plugin scores answers against their context on the shared encoder.
    "hallucination_detector": GraphModel(ENCODER, "Embedding", typed=False),
}
TYPED_BINDINGS: tuple[str, ...] = tuple(name for name, g in GRAPH_MODELS.items() if g.typed)


def precision_of(engine: str | None) -> str:
    """Weights' precision of an engine: int8 (dynamic ONNX build) or fp32 (torch, heads, rules)."""
    return "int8" if engine == "onnxruntime" else "fp32"


def card_summary(card: str | None) -> dict[str, str] | None:
    """{path, summary}: a model card's file and its first paragraph under the title."""
    if card is None or not (CARDS / f"{card}.md").is_file():
        return None
    text = (CARDS / f"{card}.md").read_text(encoding="utf-8")
    sections = [s.strip() for s in text.split("\n## ")]
    what = next((s for s in sections if s.startswith("What it does")), "")
    summary = (
        " ".join(what.split("\n", 1)[1].split()) if "\n" in what else text.split("\n", 1)[0].lstrip("# ")
    )
    return {"path": f"docs/model-cards/{card}.md", "summary": summary[:600]}


class BindingLimits(BaseModel):
    """The inventory's input-limit fields, in tokens (special tokens included)."""

    input_max_tokens: int
    forward_max_tokens: int
    document_max_tokens: int


class Binding(BaseModel):
    binding: str
    recipe: str
    model: str  # the built-in model card's name
    task: str  # embeddings | label_probabilities | label_scores | token_spans | rerank
    provider: str  # svc-sr: a model of this router's own graph
    deployment: str
    engine: str
    revision: str | None  # pinned packages and artifact versions; None when unavailable
    digest: str | None  # sha256 over the pinned files
    device: str
    precision: str
    labels: list[str]
    dimensions: list[int]  # embeddings: the vector widths it answers
    representation: str | None = None  # embeddings: names the vector space
    status: str  # available | unavailable
    status_message: str | None = None
    limits: BindingLimits


def builtin_spec(model: str) -> registry.Builtin:
    return SPECS[model] if model in SPECS else registry.resolve_name(model)


@cache
def describe(name: str) -> Binding:
    """A binding as the graph prepares it (KeyError for a name not in GRAPH_MODELS); a head
    reports the engine, pins and limits of the encoder it reads, rules those of no model."""
    graph = GRAPH_MODELS[name]
    spec = builtin_spec(graph.model if graph.builtin else (graph.reads or ENCODER))
    engine: str = registry.pick_engine(spec, "auto", DEVICE)
    missing = registry.missing_artifacts(spec, engine)
    revision = digest = None
    if missing is None:
        revision, digest, _ = registry.pin(spec, engine)
    if not graph.builtin and graph.reads is None:
        engine, revision, digest, missing = "rules", None, None, None
    limits = spec.limits
    return Binding(
        binding=name,
        recipe=DEFAULT_RECIPE,
        model=graph.model if not graph.builtin else spec.name,
        task=graph.task or str(spec.task),
        provider="svc-sr",
        deployment=graph.deployment,
        engine=engine if graph.builtin or graph.reads is None else f"head+{engine}",
        revision=revision,
        digest=digest,
        device=DEVICE,
        precision=precision_of(engine),
        labels=list(graph.labels) if not graph.builtin else spec.labels(),
        dimensions=list(spec.dimensions) if graph.builtin else [],
        representation=spec.representation if graph.builtin else None,
        status="unavailable" if missing else "available",
        status_message=missing,
        limits=BindingLimits(
            input_max_tokens=limits.max_input_tokens,
            forward_max_tokens=limits.truncate_tokens,
            document_max_tokens=limits.max_scan_tokens,
        ),
    )
