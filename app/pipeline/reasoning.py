"""Reasoning toggle by the selected model's `reasoning_family` (reference: req_filter_reason.go).

The decision's modelRef says whether to reason (`use_reasoning`) and how hard
(`reasoning_effort`, else `providers.defaults.default_reasoning_effort`, else
"medium"). The model's family (`providers.defaults.reasoning_families[name]`) says how
the backend wants to be told:
- `type: chat_template_kwargs` -> `body.chat_template_kwargs[parameter] = <bool>`
  (qwen3: enable_thinking, deepseek: thinking); written for both true and false, so a
  model that thinks by default is really turned off;
- `type: reasoning_effort` -> `body[parameter] = effort` (gpt-oss, gpt) when reasoning
  is on; when off the field is left as the client sent it (there is no "off" effort).
`use_reasoning` unset, a model without a family, or an unknown family: body unchanged.
"""

from __future__ import annotations

from typing import Any

from app.config.providers import ProviderDefaults, ProviderModel
from app.config.routing import ModelRef

DEFAULT_EFFORT = "medium"


def apply_reasoning(
    body: dict[str, Any],
    model: ProviderModel | None,
    ref: ModelRef | None,
    defaults: ProviderDefaults,
) -> dict[str, Any]:
    """Mutates `body`; returns the record for `RoutePlan.reasoning` ({} when nothing applies)."""
    if ref is None or ref.use_reasoning is None or model is None or not model.reasoning_family:
        return {}
    family = defaults.reasoning_families.get(model.reasoning_family)
    enabled = bool(ref.use_reasoning)
    effort = ref.reasoning_effort or defaults.default_reasoning_effort or DEFAULT_EFFORT
    record: dict[str, Any] = {
        "enabled": enabled,
        "effort": effort if enabled else None,
        "family": model.reasoning_family,
        "applied": False,
    }
    if family is None:
        return record
    record["parameter"] = family.parameter
    record["type"] = family.type
    if family.type == "chat_template_kwargs":
        kwargs = body.get("chat_template_kwargs")
        kwargs = dict(kwargs) if isinstance(kwargs, dict) else {}
        kwargs[family.parameter] = enabled
        body["chat_template_kwargs"] = kwargs
        record["applied"] = True
    elif family.type == "reasoning_effort" and enabled:
        body[family.parameter] = effort
        record["applied"] = True
    return record
