"""JSON Schema of the canonical v0.3 document, generated from the pydantic models.

Editors (VS Code YAML, JetBrains) validate and complete config files with it. Plugin
configurations are opaque mappings in RouterConfig; the schema ties each plugin `type`
to its configuration model with if/then, so editors check those too. Cross-reference
rules (unknown modelRefs, undefined signals) are beyond JSON Schema: `svc-sr config
validate` checks them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from app.config.document import RouterConfig
from app.config.plugins import PLUGIN_MODELS

SCHEMA_ID = "urn:svc-sr:config:v0.3"
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def config_json_schema() -> dict[str, Any]:
    plugin_models = sorted(set(PLUGIN_MODELS.values()), key=lambda model: model.__name__)
    models: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        (RouterConfig, "validation"),
        *((model, "validation") for model in plugin_models),
    ]
    keys, top = models_json_schema(models, by_alias=True, ref_template="#/$defs/{model}")
    defs: dict[str, Any] = top["$defs"]
    root_ref = keys[(RouterConfig, "validation")]["$ref"].split("/")[-1]
    root = defs.pop(root_ref)

    _accept_comma_separated(defs)
    plugin = defs.get("Plugin")
    if plugin is not None:
        rules = []
        for plugin_type, model in sorted(PLUGIN_MODELS.items()):
            ref = keys[(model, "validation")]["$ref"]
            rules.append(
                {
                    "if": {"properties": {"type": {"const": plugin_type}}, "required": ["type"]},
                    "then": {"properties": {"configuration": {"$ref": ref}}},
                }
            )
        plugin["allOf"] = rules

    return {
        "$schema": SCHEMA_DIALECT,
        "$id": SCHEMA_ID,
        "title": "svc-sr configuration (canonical v0.3)",
        "description": (
            "Canonical v0.3 configuration of svc-sr. The older flat layout (vllm_endpoints, "
            "model_config, categories, ...) is also accepted by the loader and converted; it is not "
            "described here."
        ),
        **{key: value for key, value in root.items() if key not in ("title", "description")},
        "$defs": defs,
    }


def _accept_comma_separated(defs: dict[str, Any]) -> None:
    # retry_on is a list after validation but the reference writes it as one
    # comma-separated string ("5xx,reset"); a before-validator splits it.
    retry_on = defs.get("ReliabilityConfig", {}).get("properties", {}).get("retry_on")
    if retry_on is not None and "anyOf" not in retry_on:
        listed = {key: value for key, value in retry_on.items() if key in ("type", "items")}
        for key in listed:
            retry_on.pop(key)
        retry_on["anyOf"] = [listed, {"type": "string"}]


def write_schema(path: str | Path) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(config_json_schema(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return target
