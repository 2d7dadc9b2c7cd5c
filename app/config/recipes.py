"""Recipes and entrypoints (the reference router's v0.3 `entrypoints:` / `recipes:`).

A recipe is a named `routing:` section (signals, decisions, strategy); an entrypoint maps
virtual model names to a recipe. The top-level `routing:` is the reserved recipe `default`,
used by the auto names (MoM, auto). These pure functions are what the pipeline, the
management API and diagnostics call; none needs Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from app.config.errors import ConfigIssue
from app.config.model_base import Strict
from app.config.routing import Routing

if TYPE_CHECKING:
    from app.config.document import RouterConfig

DEFAULT_RECIPE = "default"
RECIPE_NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"  # a slug: it appears in URLs and headers


class Recipe(Strict):
    name: str = Field(pattern=RECIPE_NAME_PATTERN, description="a slug, unique; `default` is reserved")
    description: str | None = None
    routing: Routing = Field(default_factory=Routing)


class Entrypoint(Strict):
    model_names: list[str] = Field(min_length=1, description="virtual model names clients request")
    recipe: str = Field(min_length=1)


def recipe_names(config: RouterConfig) -> list[str]:
    """`default` first, then the named recipes in document order."""
    return [DEFAULT_RECIPE, *(recipe.name for recipe in config.recipes)]


def find_recipe(config: RouterConfig, name: str) -> Recipe | None:
    return next((recipe for recipe in config.recipes if recipe.name == name), None)


def recipe_routing(config: RouterConfig, name: str) -> Routing | None:
    """The routing of recipe `name` (`default`: the top-level routing); None when unknown."""
    if name == DEFAULT_RECIPE:
        return config.routing
    recipe = find_recipe(config, name)
    return recipe.routing if recipe is not None else None


def entrypoint_models(config: RouterConfig) -> dict[str, str]:
    """Virtual model name -> recipe name, over every entrypoint."""
    return {model: ep.recipe for ep in config.entrypoints for model in ep.model_names}


def entrypoints_of(config: RouterConfig, name: str) -> list[str]:
    """The model names whose entrypoint routes by recipe `name`."""
    return [model for model, recipe in entrypoint_models(config).items() if recipe == name]


def as_default(config: RouterConfig, routing: Routing) -> RouterConfig:
    """`config` whose top-level routing is `routing`: how a recipe is checked and compiled
    exactly like the default one (no re-validation: the parts are already valid)."""
    return config.model_copy(update={"routing": routing})


def recipe_issues(config: RouterConfig) -> tuple[list[ConfigIssue], list[str]]:
    """(errors, warnings) of `recipes` and `entrypoints`; each recipe's routing goes through
    the same cross-reference checks as the top-level one, its paths under `recipes[i]`."""
    from app.config.validate import semantic_issues  # validate imports models, which imports this

    errors: list[ConfigIssue] = []
    warnings: list[str] = []
    seen: dict[str, int] = {}
    for index, recipe in enumerate(config.recipes):
        path = f"recipes[{index}]"
        if recipe.name == DEFAULT_RECIPE:
            errors.append(
                _issue(f"{path}.name", "`default` is the top-level routing: a reserved name", "reserved_name")
            )
        elif recipe.name in seen:
            errors.append(_issue(f"{path}.name", f"duplicate recipe name {recipe.name!r}", "duplicate_name"))
        seen.setdefault(recipe.name, index)
        more_errors, more_warnings = semantic_issues(as_default(config, recipe.routing))
        prefix = f"{path}.routing"
        errors.extend(
            issue.model_copy(update={"path": prefix + issue.path[len("routing") :]})
            for issue in more_errors
            if issue.path.startswith("routing.")
        )
        warnings.extend(prefix + w[len("routing") :] for w in more_warnings if w.startswith("routing."))
    errors.extend(_entrypoint_issues(config, set(seen)))
    return errors, warnings


def _entrypoint_issues(config: RouterConfig, recipes: set[str]) -> list[ConfigIssue]:
    errors: list[ConfigIssue] = []
    provider_names = {model.name for model in config.providers.models}
    taken: dict[str, str] = {}
    for index, entrypoint in enumerate(config.entrypoints):
        path = f"entrypoints[{index}]"
        if entrypoint.recipe not in recipes | {DEFAULT_RECIPE}:
            known = ", ".join(sorted(recipes | {DEFAULT_RECIPE}))
            errors.append(
                _issue(f"{path}.recipe", f"no recipe named {entrypoint.recipe!r} ({known})", "unknown_recipe")
            )
        for k, model in enumerate(entrypoint.model_names):
            where = f"{path}.model_names[{k}]"
            if model in taken:
                errors.append(_issue(where, f"{model!r} is already {taken[model]}", "duplicate_name"))
            elif model in provider_names or config.model(model) is not None:
                errors.append(_issue(where, f"{model!r} is a provider model name", "name_conflict"))
            elif model in config.auto_model_names:
                errors.append(
                    _issue(
                        where, f"{model!r} is an auto-routing model name (default recipe)", "name_conflict"
                    )
                )
            taken.setdefault(model, f"{path}.model_names[{k}]")
    return errors


def _issue(path: str, message: str, code: str) -> ConfigIssue:
    return ConfigIssue(path=path, message=message, code=code, stage="validate")
