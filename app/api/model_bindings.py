"""Prepared model bindings of the router graph, listed for `/api/v1/diagnostics/models*`.

Pure (no Ray, nothing loaded): a binding is one of the graph's own prepared models with its
identity, artifact revision (a sha256 prefix of the committed artifact file) and limits.
Named recipes do not exist yet, so the only recipe is `default`; any other name and any
unknown binding is an explicit error, never a fallback model.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

from pydantic import BaseModel

from app.api.diagnostics_requests import ManagementError

DEFAULT_RECIPE = "default"
ARTIFACTS = Path(__file__).resolve().parent.parent / "models" / "artifacts"


class BindingLimits(BaseModel):
    input_max_tokens: int
    window_size: int | None = None
    window_overlap: int | None = None


class Binding(BaseModel):
    binding: str
    recipe: str
    task: str
    provider: str  # graph | model_runtime
    artifact: str
    revision: str
    device: str
    precision: str
    limits: BindingLimits


class BindingList(BaseModel):
    recipe: str
    bindings: list[Binding]


@cache
def _revision(artifact: str) -> str:
    path = ARTIFACTS / artifact
    if not path.is_file():
        return "builtin"
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()[:16]


# (binding, task, artifact file) of the graph's own models; all share the MiniLM encoder limit.
_GRAPH = (
    ("embedding", "embedding", "all-MiniLM-L6-v2"),
    ("domain", "sequence_classification", "domain_head.npz"),
    ("harmful", "sequence_classification", "harmful_guard.json"),
)


def prepared_bindings(recipe: str = DEFAULT_RECIPE) -> list[Binding]:
    check_recipe(recipe)
    return [
        Binding(
            binding=name,
            recipe=recipe,
            task=task,
            provider="graph",
            artifact=artifact,
            revision=_revision(artifact),
            device="cpu",
            precision="fp32",
            limits=BindingLimits(input_max_tokens=256),
        )
        for name, task, artifact in _GRAPH
    ]


def check_recipe(recipe: str) -> None:
    if recipe != DEFAULT_RECIPE:
        raise ManagementError(
            404, "RECIPE_NOT_FOUND", f"recipe {recipe!r} does not exist; known: {DEFAULT_RECIPE}"
        )


def find_binding(recipe: str, binding: str) -> Binding:
    for item in prepared_bindings(recipe):
        if item.binding == binding:
            return item
    raise ManagementError(
        404, "BINDING_NOT_FOUND", f"binding {binding!r} is not prepared in recipe {recipe!r}"
    )
