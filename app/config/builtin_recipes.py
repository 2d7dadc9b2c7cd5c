"""Built-in recipes (`svc-sr recipe builtin ...`): recipe files `{name, description,
routing}` shipped with svc-sr, over the signal families it evaluates (docs/configuration.md).

A built-in names its models by role placeholders (`slots`: `code-model`, `small-model`, ...);
`init` replaces them with the user's provider models. Each one validates as a named recipe of
a document whose providers list those models (tests/unit/cli/test_cli_recipe_builtins.py).
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel, Field


class BuiltinRecipe(BaseModel):
    name: str
    description: str
    slots: list[str] = Field(description="model placeholders in modelRefs, in the order --model fills them")
    routing: dict[str, Any]

    def recipe_file(self) -> dict[str, Any]:
        """The recipe file `recipe apply -f` takes (placeholders as model names)."""
        return {"name": self.name, "description": self.description, "routing": copy.deepcopy(self.routing)}


def _route(
    name: str, rules: dict[str, Any] | None, model: str, priority: int, **extra: Any
) -> dict[str, Any]:
    decision: dict[str, Any] = {"name": name, "priority": priority}
    if rules is not None:
        decision["rules"] = rules
    decision["modelRefs"] = [{"model": model}]
    decision.update(extra)
    return decision


CODING = BuiltinRecipe(
    name="coding",
    description="Programming requests (code keywords, code-like text, code questions) to a code model",
    slots=["code-model", "general-model"],
    routing={
        "signals": {
            "keywords": [
                {
                    "name": "code_keywords",
                    "keywords": [
                        "python", "javascript", "typescript", "rust", "golang", "java", "c++",
                        "function", "compile", "stack trace", "traceback", "regex", "sql query",
                        "unit test", "refactor", "debug",
                    ],
                }
            ],
            "embeddings": [
                {
                    "name": "code_questions",
                    "threshold": 0.6,
                    "candidates": [
                        "write a function that parses this input",
                        "why does my code throw this exception",
                        "fix the bug in this program",
                        "how do I implement this algorithm",
                    ],
                }
            ],
            "modality": [{"name": "code", "description": "code fences, code lines or a programming request"}],
        },
        "decisions": [
            _route(
                "code",
                {
                    "operator": "OR",
                    "conditions": [
                        {"type": "keyword", "name": "code_keywords"},
                        {"type": "embedding", "name": "code_questions"},
                        {"type": "modality", "name": "code"},
                    ],
                },
                "code-model",
                100,
            ),
            _route("general", None, "general-model", 0),
        ],
    },
)  # fmt: skip

SAFETY_FIRST = BuiltinRecipe(
    name="safety-first",
    description="Jailbreak attempts and harmful content answered with a refusal, PII blocked; the rest to one model",
    slots=["model"],
    routing={
        "signals": {
            "jailbreak": [{"name": "jailbreak", "threshold": 0.6}],
            "harmful": [{"name": "harmful", "threshold": 0.5}],
        },
        "decisions": [
            _route(
                "blocked",
                {
                    "operator": "OR",
                    "conditions": [
                        {"type": "jailbreak", "name": "jailbreak"},
                        {"type": "harmful", "name": "harmful"},
                    ],
                },
                "model",
                200,
                plugins=[
                    {
                        "type": "fast_response",
                        "configuration": {"message": "This request cannot be served."},
                    }
                ],
            ),
            _route(
                "guarded",
                None,
                "model",
                0,
                plugins=[
                    {"type": "jailbreak", "configuration": {"enabled": True, "threshold": 0.6}},
                    {"type": "pii", "configuration": {"enabled": True, "pii_types_allowed": []}},
                ],
            ),
        ],
    },
)

COST_SAVER = BuiltinRecipe(
    name="cost-saver",
    description="Easy prompts to a small model, hard ones (by the complexity signal) to a large one",
    slots=["small-model", "large-model"],
    routing={
        "signals": {
            "complexity": [
                {
                    "name": "difficulty",
                    "description": "how much reasoning the request needs",
                    "threshold": 0.05,
                    "hard": {
                        "candidates": [
                            "prove this theorem step by step",
                            "design a distributed system that tolerates failures",
                            "analyse the trade-offs between these architectures in depth",
                            "solve this multi-step optimisation problem",
                        ]
                    },
                    "easy": {
                        "candidates": [
                            "what is the capital of France",
                            "say hello",
                            "translate this word to Spanish",
                            "what time zone is London in",
                        ]
                    },
                }
            ],
            "context": [{"name": "long_context", "min_tokens": "8K"}],
        },
        "decisions": [
            _route(
                "hard",
                {
                    "operator": "OR",
                    "conditions": [
                        {"type": "complexity", "name": "difficulty:hard"},
                        {"type": "context", "name": "long_context"},
                    ],
                },
                "large-model",
                100,
            ),
            _route("easy", None, "small-model", 0),
        ],
    },
)

BUILTINS: dict[str, BuiltinRecipe] = {r.name: r for r in (CODING, SAFETY_FIRST, COST_SAVER)}


def assign_models(recipe: BuiltinRecipe, models: list[str]) -> dict[str, str]:
    """Placeholder -> model from `--model` values: one bare model fills every slot, otherwise
    `SLOT=MODEL` pairs or bare models in slot order. ValueError names what is wrong."""
    if len(models) == 1 and "=" not in models[0]:
        return dict.fromkeys(recipe.slots, models[0])
    mapping: dict[str, str] = {}
    for index, value in enumerate(models):
        slot, sep, model = value.partition("=")
        if not sep:
            if index >= len(recipe.slots):
                raise ValueError(
                    f"{recipe.name} has {len(recipe.slots)} model slot(s): {', '.join(recipe.slots)}"
                )
            slot, model = recipe.slots[index], value
        if slot not in recipe.slots:
            raise ValueError(f"{recipe.name} has no model slot {slot!r} (slots: {', '.join(recipe.slots)})")
        if not model:
            raise ValueError(f"no model given for slot {slot!r}")
        mapping[slot] = model
    missing = [slot for slot in recipe.slots if slot not in mapping]
    if missing:
        raise ValueError(f"no model for slot(s) {', '.join(missing)} (give SLOT=MODEL or one model for all)")
    return mapping


def initialized(recipe: BuiltinRecipe, models: dict[str, str], name: str | None = None) -> dict[str, Any]:
    """The recipe file with each decision's placeholder model references set to `models`."""
    document = recipe.recipe_file()
    if name is not None:
        document["name"] = name
    for decision in document["routing"]["decisions"]:
        for ref in decision.get("modelRefs", []):
            ref["model"] = models.get(ref["model"], ref["model"])
    return document
