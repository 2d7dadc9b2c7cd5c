"""Recipe management (`/api/v1/config/recipes`, docs/management-api.md): views of the persisted document's
recipes, and the document edit a recipe PUT or DELETE makes.

A recipe change is one configuration mutation: routes/recipes.py hands the edit below to the
same versioned write path as PUT /api/v1/config (If-Match, history, audit, activation, hot
reload); the edit runs on the persisted document inside that path's lock, so a reference
check and the write it guards see the same document. `default` is the top-level `routing:`
(app/config/recipes.py): it can be read and replaced, never deleted.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.common.api_docs import Absent, no_default
from app.common.mgmt_errors import MgmtError, invalid_input
from app.common.redaction import redact, restore_redacted
from app.config.recipes import DEFAULT_RECIPE
from app.management.schemas import ReasonOut


class RecipeBody(BaseModel):
    """PUT /api/v1/config/recipes/{name}: the recipe; its name is the path's."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, description="optional; must equal the path's name")
    description: str | None = Field(default=None, description="named recipes only")
    routing: dict[str, Any] = Field(description="a `routing:` section (signals, decisions, strategy)")


class RecipeView(BaseModel):
    name: str
    default: bool = Field(description="true for `default`: the top-level routing, used by the auto names")
    description: str | None = None
    entrypoints: list[str] = Field(description="virtual model names routed by this recipe")
    decisions: list[str] = Field(description="decision names, in document order")
    routing: dict[str, Any] = Field(description="as persisted; secrets redacted without secret_view")


class EntrypointView(BaseModel):
    model_names: list[str]
    recipe: str


class RecipeList(BaseModel):
    recipes: list[RecipeView] = Field(description="`default` first, then the named recipes")
    entrypoints: list[EntrypointView]
    etag: str = Field(description="the configuration's current ETag (If-Match of a mutation)")


class RecipeValidateRequest(BaseModel):
    """POST /api/v1/config/recipes/validate: a recipe PUT (`recipe`) or DELETE, checked only."""

    # `recipe` with put (the default action), none with delete: the schema says so (one of the
    # two forms), the validator enforces it.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "oneOf": [
                {"required": ["recipe"], "properties": {"action": {"enum": ["put"]}}},
                {
                    "required": ["action"],
                    "properties": {"action": {"enum": ["delete"]}},
                    "not": {"required": ["recipe"]},
                },
            ]
        },
    )
    name: str = Field(min_length=1, max_length=128)
    action: Literal["put", "delete"] = "put"
    recipe: RecipeBody | Absent = Field(
        default=None, description="required with action put", json_schema_extra=no_default
    )

    @model_validator(mode="after")
    def _recipe_with_put(self) -> RecipeValidateRequest:
        if self.action == "put" and self.recipe is None:
            raise ValueError("`recipe` is required with action put")
        if self.action == "delete" and self.recipe is not None:
            raise ValueError("`recipe` is not taken with action delete")
        return self


class RecipeValidateResponse(BaseModel):
    valid: bool
    name: str
    action: Literal["put", "delete"]
    changed: bool = Field(description="the mutation would change the document")
    current_etag: str
    candidate_etag: str | None = None
    restart_required: bool = False
    reasons: list[ReasonOut] = Field(default_factory=list, description="paths as in the whole document")
    warnings: list[str] = Field(default_factory=list)
    recipe: RecipeView | None = Field(default=None, description="the recipe as it would be persisted")


# ---------------------------------------------------------------- refusals


def recipe_not_found(name: str, document: dict[str, Any]) -> MgmtError:
    known = ", ".join(recipe_names(document))
    return MgmtError(404, f"no recipe named {name!r} (recipes: {known})", code="RECIPE_NOT_FOUND")


def recipe_in_use(name: str, users: list[tuple[int, list[str]]]) -> MgmtError:
    models = [model for _, names in users for model in names]
    return MgmtError(
        409,
        f"recipe {name!r} is referenced by entrypoint model(s) {', '.join(models)}: "
        "change or remove those entrypoints first",
        code="RECIPE_IN_USE",
        details={"entrypoints": models, "path": f"entrypoints[{users[0][0]}].recipe"},
    )


def default_reserved() -> MgmtError:
    return MgmtError(
        409, "`default` is the top-level routing: it can be replaced, not deleted", code="RECIPE_RESERVED"
    )


# ---------------------------------------------------------------- views


def recipe_names(document: dict[str, Any]) -> list[str]:
    return [DEFAULT_RECIPE, *(str(r.get("name")) for r in _named(document))]


def recipe_views(document: dict[str, Any], secrets: bool) -> list[RecipeView]:
    views = [recipe_view(document, name, secrets) for name in recipe_names(document)]
    return [view for view in views if view is not None]


def entrypoint_views(document: dict[str, Any]) -> list[EntrypointView]:
    return [EntrypointView.model_validate(ep) for ep in document.get("entrypoints") or []]


def recipe_view(document: dict[str, Any], name: str, secrets: bool) -> RecipeView | None:
    """The recipe `name` of a persisted (canonical) document; None when there is none."""
    if name == DEFAULT_RECIPE:
        entry: dict[str, Any] = {"routing": document.get("routing") or {}}
    else:
        index = named_index(document, name)
        if index is None:
            return None
        entry = _named(document)[index]
    routing: dict[str, Any] = entry.get("routing") or {}
    return RecipeView(
        name=name,
        default=name == DEFAULT_RECIPE,
        description=entry.get("description"),
        entrypoints=[model for i, models in users_of(document, name) for model in models],
        decisions=[str(d.get("name")) for d in routing.get("decisions") or [] if isinstance(d, dict)],
        routing=routing if secrets else redact(routing),
    )


def named_index(document: dict[str, Any], name: str) -> int | None:
    return next((i for i, r in enumerate(_named(document)) if r.get("name") == name), None)


def users_of(document: dict[str, Any], name: str) -> list[tuple[int, list[str]]]:
    """(index, model_names) of each entrypoint routed by recipe `name`."""
    return [
        (i, list(ep.get("model_names") or []))
        for i, ep in enumerate(document.get("entrypoints") or [])
        if isinstance(ep, dict) and ep.get("recipe") == name
    ]


# ---------------------------------------------------------------- edits


def with_recipe(document: dict[str, Any], name: str, body: RecipeBody) -> dict[str, Any]:
    """`document` with recipe `name` created or replaced (REDACTED values kept from the
    recipe it replaces); the whole document is validated afterwards by the write path."""
    if body.name is not None and body.name != name:
        raise invalid_input(f"the body names recipe {body.name!r}, the path {name!r}")
    out = copy.deepcopy(document)
    if name == DEFAULT_RECIPE:
        if body.description is not None:
            raise invalid_input("`default` (the top-level routing) has no description")
        out["routing"] = restore_redacted(body.routing, document.get("routing"))
        return out
    index = named_index(document, name)
    current = _named(document)[index] if index is not None else {}
    entry: dict[str, Any] = {"name": name}
    if body.description is not None:
        entry["description"] = body.description
    entry["routing"] = restore_redacted(body.routing, current.get("routing"))
    recipes = out.setdefault("recipes", [])
    if index is None:
        recipes.append(entry)
    else:
        recipes[index] = entry
    return out


def without_recipe(document: dict[str, Any], name: str) -> dict[str, Any]:
    """`document` less the named recipe `name`: 404 when there is none, 409 while an
    entrypoint routes by it (or for `default`)."""
    if name == DEFAULT_RECIPE:
        raise default_reserved()
    index = named_index(document, name)
    if index is None:
        raise recipe_not_found(name, document)
    users = users_of(document, name)
    if users:
        raise recipe_in_use(name, users)
    out = copy.deepcopy(document)
    del out["recipes"][index]
    if not out["recipes"]:
        del out["recipes"]
    return out


def refusal_reason(exc: MgmtError) -> ReasonOut:
    """A refused edit as a validate answer's reason (code in lower case, like the others)."""
    path = (exc.details or {}).get("path")
    return ReasonOut(stage="validate", code=(exc.code or "invalid").lower(), message=exc.message, path=path)


def _named(document: dict[str, Any]) -> list[dict[str, Any]]:
    recipes: list[dict[str, Any]] = document.get("recipes") or []  # canonical: every item a mapping
    return recipes
