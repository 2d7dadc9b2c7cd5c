"""The `tools` and `tool_selection` plugins: which of the request's own `tools[]` go upstream.

`tools` is a static policy by function name (allow / deny lists). `tool_selection` keeps the
tools the human's ask needs: cosine similarity of the router's sentence vectors (the same
encoder as the embedding signals and the cache) between the query and each tool's
`name: description`, the `top_k` best at or above the threshold; when none reaches it,
every tool stays (`fallback_to_empty` false) or none does.

A tool that `tool_choice` names is always kept: dropping it would turn a valid request
into one the upstream rejects. When no tool is left, `tools`, `tool_choice` and
`parallel_tool_calls` leave the body (an empty `tools` list is not a valid request).

The query vector is the request's shared one (`SignalContext.query_vector`); tool vectors
are kept in a bounded LRU (`ToolVectorCache`): tool lists come from clients, so an
unbounded cache would grow with every new tool text.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.pipeline.signals.base import EmbedFn
from app.pipeline.vector_cache import TextVectorCache

TOOL_VECTOR_CACHE_SIZE = 4096


@dataclass(frozen=True)
class ToolPolicy:
    """`tools`: names kept (empty: any) and names removed."""

    allow: frozenset[str] = frozenset()
    deny: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ToolSelectionPolicy:
    top_k: int = 3
    threshold: float = 0.25
    fallback_to_empty: bool = False


@dataclass
class ToolOutcome:
    """What the plugins did to one request's tools."""

    offered: list[str]  # the request's tool names, in order
    kept: list[str]
    removed_by_policy: list[str] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)  # semantic similarity by tool name
    method: str = "none"  # none | static | semantic | semantic_fallback | requires_probe | error
    embed_calls: int = 0
    error: str | None = None


def tool_name(tool: Any) -> str:
    """The function name of an OpenAI tool (`{type: function, function: {name}}`); '' if none."""
    if not isinstance(tool, dict):
        return ""
    function = tool.get("function")
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        return str(function["name"])
    return str(tool.get("name") or "")


def tool_text(tool: Any) -> str:
    """What a tool is compared on: `name: description` (underscores read as spaces)."""
    name = tool_name(tool)
    function = tool.get("function") if isinstance(tool, dict) else None
    description = ""
    if isinstance(function, dict):
        description = str(function.get("description") or "")
    elif isinstance(tool, dict):
        description = str(tool.get("description") or "")
    readable = name.replace("_", " ").replace("-", " ")
    return f"{readable}: {description}" if description else readable


def pinned_tool(body: dict[str, Any]) -> str | None:
    """The tool `tool_choice` forces, if any."""
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        return tool_name(choice) or None
    return None


def apply_policy(names: list[str], policy: ToolPolicy, pinned: str | None) -> tuple[list[str], list[str]]:
    """(kept, removed) names under a static policy."""
    kept: list[str] = []
    removed: list[str] = []
    for name in names:
        allowed = (not policy.allow or name in policy.allow) and name not in policy.deny
        (kept if allowed or name == pinned else removed).append(name)
    return kept, removed


def rank(
    query: np.ndarray, vectors: np.ndarray, names: list[str], policy: ToolSelectionPolicy
) -> tuple[list[str], dict[str, float], bool]:
    """(selected names in request order, every tool's score, whether the fallback applied)."""
    sims = vectors @ query if len(names) else np.zeros(0, dtype=np.float32)
    scores = {name: round(float(s), 4) for name, s in zip(names, sims, strict=True)}
    order = sorted(range(len(names)), key=lambda i: -float(sims[i]))
    chosen = {i for i in order[: policy.top_k] if float(sims[i]) >= policy.threshold}
    if not chosen:
        return ([] if policy.fallback_to_empty else list(names)), scores, True
    return [names[i] for i in sorted(chosen)], scores, False


class ToolVectorCache(TextVectorCache):
    """Tool text -> unit vector, least recently used first out."""

    def __init__(self, capacity: int = TOOL_VECTOR_CACHE_SIZE) -> None:
        super().__init__(capacity)


QueryVector = Callable[[], Awaitable[np.ndarray]]


async def select_tools(
    body: dict[str, Any],
    policy: ToolPolicy | None,
    selection: ToolSelectionPolicy | None,
    *,
    query_vector: QueryVector | None = None,
    embed: EmbedFn | None = None,
    cache: ToolVectorCache | None = None,
) -> ToolOutcome | None:
    """Rewrite `body["tools"]` by the policy, then the semantic selection. None when the
    request has no tools or no plugin applies. Without `query_vector`/`embed` the semantic
    step is not run (method `requires_probe`); an embedding failure keeps the tools the
    policy left (method `error`): a selection that cannot run must not break the request."""
    tools = body.get("tools")
    if not isinstance(tools, list) or not tools or (policy is None and selection is None):
        return None
    names = [tool_name(t) for t in tools]
    pinned = pinned_tool(body)
    outcome = ToolOutcome(offered=names, kept=list(names))
    if policy is not None:
        outcome.kept, outcome.removed_by_policy = apply_policy(names, policy, pinned)
        outcome.method = "static"
    if selection is not None and outcome.kept:
        vectors = cache if cache is not None else ToolVectorCache()  # an empty cache is falsy
        await _semantic(outcome, tools, selection, pinned, query_vector, embed, vectors)
    _rewrite(body, tools, names, outcome.kept)
    return outcome


async def _semantic(
    outcome: ToolOutcome,
    tools: list[Any],
    selection: ToolSelectionPolicy,
    pinned: str | None,
    query_vector: QueryVector | None,
    embed: EmbedFn | None,
    cache: ToolVectorCache,
) -> None:
    if query_vector is None or embed is None:
        outcome.method = "requires_probe"
        return
    candidates = [t for t, n in zip(tools, outcome.offered, strict=True) if n in set(outcome.kept)]
    names = [tool_name(t) for t in candidates]
    try:
        query = await query_vector()
        outcome.embed_calls += 1
        vectors, calls = await cache.vectors([tool_text(t) for t in candidates], embed)
        outcome.embed_calls += calls
    except Exception as exc:  # the encoder being down keeps the tools, reported
        outcome.method, outcome.error = "error", f"tool_selection: embedding failed: {exc}"
        return
    chosen, outcome.scores, fell_back = rank(query, vectors, names, selection)
    if pinned in names and pinned not in chosen:
        chosen = [n for n in names if n in set(chosen) | {pinned}]
    outcome.kept = chosen
    outcome.method = "semantic_fallback" if fell_back else "semantic"


def _rewrite(body: dict[str, Any], tools: list[Any], names: list[str], kept: list[str]) -> None:
    keep = set(kept)
    remaining = [tool for tool, name in zip(tools, names, strict=True) if name in keep]
    if remaining:
        body["tools"] = remaining
        return
    for key in ("tools", "tool_choice", "parallel_tool_calls"):
        body.pop(key, None)
