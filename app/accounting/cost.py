"""Request cost from token usage and per-1M-token pricing (spec: Pricing and provider config).

    cost = (uncached_prompt * prompt_per_1m + cached * cached_input_per_1m
            + cache_write * cache_write_per_1m + completion * completion_per_1m) / 1e6

Without cache details (or without cached_input_per_1m) this is the spec's formula:
(prompt_tokens * prompt_per_1m + completion_tokens * completion_per_1m) / 1e6.
Cached and cache-write tokens are counted inside prompt_tokens (OpenAI convention);
cache_write_per_1m defaults to prompt_per_1m, so cache writes cost nothing extra
unless priced. The Pricing shape itself is configuration (app/config/pricing.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from app.config.pricing import Pricing

PER_TOKENS = 1_000_000


@dataclass(frozen=True)
class TokenCounts:
    prompt: int = 0
    completion: int = 0
    cached: int = 0
    cache_write: int = 0

    @property
    def total(self) -> int:
        return self.prompt + self.completion


def _count(value: Any) -> int:
    # Usage comes from upstream JSON: tolerate strings, floats, junk and negatives.
    if isinstance(value, bool):
        return 0
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0
    return int(number) if math.isfinite(number) and number > 0 else 0


def token_counts(usage: dict[str, Any] | None) -> TokenCounts:
    """Token counts of a chat `usage` object (Responses-style input/output keys accepted)."""
    if not isinstance(usage, dict):
        return TokenCounts()
    prompt = _count(usage.get("prompt_tokens", usage.get("input_tokens")))
    completion = _count(usage.get("completion_tokens", usage.get("output_tokens")))
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
    if not isinstance(details, dict):
        details = {}
    cached = _count(details.get("cached_tokens", usage.get("cache_read_input_tokens")))
    write = _count(details.get("cache_write_tokens", usage.get("cache_creation_input_tokens")))
    cached = min(cached, prompt)
    write = min(write, prompt - cached)
    return TokenCounts(prompt=prompt, completion=completion, cached=cached, cache_write=write)


def compute_cost(usage: dict[str, Any] | None, pricing: Pricing | None) -> float:
    """Cost in `pricing.currency`; 0.0 when pricing or usage is missing."""
    if pricing is None or not isinstance(usage, dict):
        return 0.0
    tokens = token_counts(usage)
    cached_rate = pricing.cached_input_per_1m
    cached = tokens.cached if cached_rate is not None else 0
    write_rate = pricing.effective_cache_write_per_1m
    uncached = tokens.prompt - cached - tokens.cache_write
    total = (
        uncached * pricing.prompt_per_1m
        + cached * (cached_rate or 0.0)
        + tokens.cache_write * write_rate
        + tokens.completion * pricing.completion_per_1m
    )
    return total / PER_TOKENS
