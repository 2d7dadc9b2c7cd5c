"""Prepared model bindings of the router graph, listed for `/api/v1/diagnostics/models*`.

A binding is one of the graph's own models under the name the router configuration gives it
(`embedding`, `domain_classifier`, `prompt_guard`, `pii_classifier`, `reranker`): the ones the
typed routes call, described once in app/management/graph_schemas.py (model, deployment,
engine, pins, limits; the inventory reads the same description). Nothing is loaded to list them. A recipe is `default` or one of the configuration's named recipes (all run on the graph's models); any other name
and any unknown binding is an explicit error, never a fallback model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from pydantic import BaseModel

from app.api.diagnostics_requests import ManagementError
from app.config.recipes import DEFAULT_RECIPE
from app.management.graph_schemas import TYPED_BINDINGS, Binding, BindingLimits, describe

__all__ = ["DEFAULT_RECIPE", "GRAPH_BINDINGS", "Binding", "BindingLimits", "BindingList"]

# The bindings the typed routes call (app/management/graph_schemas.py describes every one).
GRAPH_BINDINGS: tuple[str, ...] = TYPED_BINDINGS


class BindingList(BaseModel):
    recipe: str
    bindings: list[Binding]


def _binding(name: str) -> Binding:
    return describe(name)


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
    serves), 404 BINDING_NOT_FOUND too for a binding that answers another task: the route has
    no binding of that name (the request itself is well formed, so not a 400)."""
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
            404,
            "BINDING_NOT_FOUND",
            f"binding {binding!r} answers {found.task}, not {' or '.join(tasks)}; "
            f"bindings for this route: {', '.join(serving)}",
        )
    return found
