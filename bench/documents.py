"""The routing documents the in-process benchmarks build: one model `m` whose backend is a
closed port (nothing is forwarded; they time routing, plugins and checks)."""

from __future__ import annotations

from typing import Any

MODEL = "m"


def one_model_document(
    decisions: list[dict[str, Any]] | None = None, signals: dict[str, Any] | None = None
) -> dict[str, Any]:
    document: dict[str, Any] = {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": MODEL},
            "models": [{"name": MODEL, "backend_refs": [{"endpoint": "127.0.0.1:9"}]}],
        },
    }
    if decisions is not None:
        document["routing"] = {"decisions": decisions}
        if signals is not None:
            document["routing"]["signals"] = signals
    return document


def keyword_decision(name: str, keyword: str, plugins: list[dict[str, Any]]) -> dict[str, Any]:
    """Decision `name` on keyword signal `keyword`, to model `m`, with `plugins`."""
    return {
        "name": name,
        "rules": {"type": "keyword", "name": keyword},
        "modelRefs": [{"model": MODEL}],
        "plugins": plugins,
    }
