"""Cost formula (spec: cost = (prompt x prompt_per_1m + completion x completion_per_1m) / 1e6)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.accounting.cost import compute_cost, token_counts
from app.config.pricing import Pricing

USAGE = {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500}


def test_spec_formula():
    pricing = Pricing(prompt_per_1m=2.5, completion_per_1m=10.0)
    assert compute_cost(USAGE, pricing) == pytest.approx((1200 * 2.5 + 300 * 10.0) / 1e6)


def test_missing_pricing_or_usage_costs_nothing():
    assert compute_cost(USAGE, None) == 0.0
    assert compute_cost(None, Pricing(prompt_per_1m=1)) == 0.0
    assert compute_cost({}, Pricing(prompt_per_1m=1, completion_per_1m=1)) == 0.0
    assert compute_cost(USAGE, Pricing()) == 0.0


def test_cached_tokens_use_the_cached_rate_only_when_priced():
    usage = {**USAGE, "prompt_tokens_details": {"cached_tokens": 1000}}
    plain = Pricing(prompt_per_1m=2.0, completion_per_1m=8.0)
    assert compute_cost(usage, plain) == pytest.approx((1200 * 2.0 + 300 * 8.0) / 1e6)
    cached = Pricing(prompt_per_1m=2.0, cached_input_per_1m=0.5, completion_per_1m=8.0)
    assert compute_cost(usage, cached) == pytest.approx((200 * 2.0 + 1000 * 0.5 + 300 * 8.0) / 1e6)


def test_cache_write_defaults_to_the_prompt_rate():
    usage = {**USAGE, "prompt_tokens_details": {"cached_tokens": 200, "cache_write_tokens": 500}}
    same = Pricing(prompt_per_1m=2.0, cached_input_per_1m=0.5)
    assert compute_cost(usage, same) == pytest.approx((1000 * 2.0 + 200 * 0.5) / 1e6)
    dearer = Pricing(prompt_per_1m=2.0, cached_input_per_1m=0.5, cache_write_per_1m=3.0)
    assert compute_cost(usage, dearer) == pytest.approx((500 * 2.0 + 200 * 0.5 + 500 * 3.0) / 1e6)
    assert dearer.prefix_cache_checkout_per_1m == pytest.approx(2.5)
    assert same.effective_cache_write_per_1m == 2.0


def test_token_counts_tolerate_bad_upstream_values():
    counts = token_counts(
        {"prompt_tokens": "12", "completion_tokens": -4, "prompt_tokens_details": {"cached_tokens": 99}}
    )
    assert (counts.prompt, counts.completion, counts.cached) == (12, 0, 12)  # cached never exceeds prompt
    assert token_counts({"input_tokens": 5, "output_tokens": 7}).total == 12  # Responses-style keys
    assert token_counts({"prompt_tokens": None, "completion_tokens": float("inf")}).total == 0
    assert token_counts("garbage").total == 0  # type: ignore[arg-type]


def test_pricing_validation():
    assert Pricing(currency=" eur ").currency == "EUR"
    with pytest.raises(ValidationError):
        Pricing(prompt_per_1m=-1)
    with pytest.raises(ValidationError):
        Pricing(currency="  ")
    with pytest.raises(ValidationError, match="prompt_per_1k"):
        Pricing.model_validate({"prompt_per_1k": 1})
