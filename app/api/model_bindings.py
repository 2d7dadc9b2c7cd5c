"""Prepared model bindings of the router graph, listed for `/api/v1/diagnostics/models*`.

A binding is one of the graph's own models under the name the router configuration gives it
(`embedding`, `domain_classifier`, `prompt_guard`, `pii_classifier`, `reranker`), with the
built-in model card behind it (app/runtime/registry.py; the reranker's is the worker
catalogue's, app/srun/catalog.py): task, labels, limits, the engine the graph picks on CPU
(`auto`: int8 ONNX for the MiniLM models, presidio + spaCy for PII), and the pinned revision
and digest of the files that engine loads (`registry.pin`, the same pins `/v1/models` reports).
Nothing is loaded to list them. A recipe is `default` or one of the configuration's named recipes (all run on the graph's models); any other name
and any unknown binding is an explicit error, never a fallback model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from functools import cache

from pydantic import BaseModel

from app.api.diagnostics_requests import ManagementError
from app.config.recipes import DEFAULT_RECIPE
from app.management.inventory import precision_of
from app.runtime import registry
from app.srun.catalog import RERANKER, SPECS

DEVICE = "cpu"  # the graph's model deployments run on CPU unless Serve gives a replica a GPU

# binding name -> (built-in model, graph deployment that serves it)
GRAPH_BINDINGS: dict[str, tuple[str, str]] = {
    "embedding": ("minilm-embedding", "Embedding"),
    "domain_classifier": ("domain-classifier", "DomainClassifier"),
    "prompt_guard": ("jailbreak-guard", "Guard"),
    "pii_classifier": ("pii-detector", "Guard"),
    # Rerank runs in the Ingress on the Embedding deployment's vectors (app/srun/rerank.py's fusion).
    "reranker": (RERANKER, "Embedding"),
}


class BindingLimits(BaseModel):
    """Spec 1's input-limit fields, in tokens (special tokens included)."""

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


class BindingList(BaseModel):
    recipe: str
    bindings: list[Binding]


def _spec(model: str) -> registry.Builtin:
    return SPECS[model] if model in SPECS else registry.resolve_name(model)


@cache
def _binding(name: str) -> Binding:
    model, deployment = GRAPH_BINDINGS[name]
    spec = _spec(model)
    engine = registry.pick_engine(spec, "auto", DEVICE)
    missing = registry.missing_artifacts(spec, engine)
    revision = digest = None
    if missing is None:
        revision, digest, _ = registry.pin(spec, engine)
    limits = spec.limits
    return Binding(
        binding=name,
        recipe=DEFAULT_RECIPE,
        model=spec.name,
        task=str(spec.task),
        provider="svc-sr",
        deployment=deployment,
        engine=engine,
        revision=revision,
        digest=digest,
        device=DEVICE,
        precision=precision_of(engine),
        labels=spec.labels(),
        dimensions=list(spec.dimensions),
        representation=spec.representation,
        status="unavailable" if missing else "available",
        status_message=missing,
        limits=BindingLimits(
            input_max_tokens=limits.max_input_tokens,
            forward_max_tokens=limits.truncate_tokens,
            document_max_tokens=limits.max_scan_tokens,
        ),
    )


def prepared_bindings(
    recipe: str = DEFAULT_RECIPE, known: Collection[str] = (DEFAULT_RECIPE,)
) -> list[Binding]:
    check_recipe(recipe, known)
    return [in_recipe(_binding(name), recipe) for name in GRAPH_BINDINGS]


async def bindings_of(recipe: str, known: Collection[str] = (DEFAULT_RECIPE,)) -> list[Binding]:
    """`prepared_bindings` off the event loop: the first listing hashes the pinned files (and
    may build the int8 encoder on a machine that has none yet)."""
    return await asyncio.to_thread(prepared_bindings, recipe, known)


async def binding_for(
    recipe: str,
    binding: str,
    tasks: tuple[str, ...] | None = None,
    known: Collection[str] = (DEFAULT_RECIPE,),
) -> Binding:
    """`find_binding` off the event loop (see `bindings_of`)."""
    return await asyncio.to_thread(find_binding, recipe, binding, tasks, known)


def check_recipe(recipe: str, known: Collection[str] = (DEFAULT_RECIPE,)) -> None:
    if recipe not in known:
        raise ManagementError(
            404, "RECIPE_NOT_FOUND", f"recipe {recipe!r} does not exist; known: {', '.join(sorted(known))}"
        )


def in_recipe(binding: Binding, recipe: str) -> Binding:
    """The cached graph binding as the recipe that asked for it prepares it (same model)."""
    return binding if binding.recipe == recipe else binding.model_copy(update={"recipe": recipe})


def find_binding(
    recipe: str,
    binding: str,
    tasks: tuple[str, ...] | None = None,
    known: Collection[str] = (DEFAULT_RECIPE,),
) -> Binding:
    """The binding, 404 RECIPE_NOT_FOUND / BINDING_NOT_FOUND; with `tasks` (those the route
    serves), 400 INVALID_INPUT for a binding that answers another task."""
    check_recipe(recipe, known)
    if binding not in GRAPH_BINDINGS:
        raise ManagementError(
            404,
            "BINDING_NOT_FOUND",
            f"binding {binding!r} is not prepared in recipe {recipe!r}; prepared: {', '.join(GRAPH_BINDINGS)}",
        )
    found = in_recipe(_binding(binding), recipe)
    if tasks is not None and found.task not in tasks:
        serving = [name for name in GRAPH_BINDINGS if _binding(name).task in tasks]
        raise ManagementError(
            400,
            "INVALID_INPUT",
            f"binding {binding!r} answers {found.task}, not {' or '.join(tasks)}; "
            f"bindings for this route: {', '.join(serving)}",
        )
    return found
