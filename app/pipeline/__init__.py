"""The Router's request pipeline as a plain library (no Ray).

Public API (imported lazily so `import app.pipeline.plan` stays light):
- `RouterPipeline(config, services, rng=None)`: `await route(body, headers, request_id)
  -> RoutePlan` (`body`: a validated chat body, app/pipeline/phases/parse.py), `await
  complete(plan, report) -> Accounting`, `await preview(body)`,
  `await update_config(config)`, `await warm_up()`.
- `PipelineServices`: embed / cache_lookup / cache_store / cache_epoch / evaluators / count_tokens
  (`cache_calls(backend)` gives the three cache calls of one backend).
- Errors (all `RoutingError`, a `SvcError` with `.status`, `.code`, `.body()`):
  `ModelNotFoundError` 404, `NoRouteError` 400.

Layout: pipeline.py orchestrates the request phases in phases/ (parse, signals, decide,
guard, plugins, select, cache) over one compiled config version (compiled.py), with the
services of services.py; preview.py shapes the routing preview, completion.py runs
complete(), metrics.py records the router metrics (docs/envoy.md).
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "RouterPipeline": "app.pipeline.pipeline",
    "PipelineServices": "app.pipeline.services",
    "CacheHit": "app.cache.base",
    "encoder_embed": "app.pipeline.services",
    "cache_calls": "app.pipeline.services",
    "cache_partition": "app.pipeline.phases.cache",
    "RoutingError": "app.pipeline.selection",
    "ModelNotFoundError": "app.pipeline.selection",
    "NoRouteError": "app.pipeline.selection",
    "SignalContext": "app.pipeline.signals.base",
    "SignalEvaluator": "app.pipeline.signals.base",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'app.pipeline' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
