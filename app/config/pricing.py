"""Per-1M-token pricing of a configured model (spec: Pricing and provider config).

A wire shape of the configuration, so it lives here; app/accounting/cost.py turns it and a
response's usage into a cost.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Pricing(BaseModel):
    model_config = ConfigDict(extra="forbid")

    currency: str = "USD"
    prompt_per_1m: float = Field(0.0, ge=0)
    cached_input_per_1m: float | None = Field(None, ge=0)
    cache_write_per_1m: float | None = Field(None, ge=0)
    completion_per_1m: float = Field(0.0, ge=0)

    @field_validator("currency")
    @classmethod
    def _currency(cls, value: str) -> str:
        value = value.strip().upper()
        if not value:
            raise ValueError("currency must be a non-empty code such as USD")
        return value

    @property
    def effective_cache_write_per_1m(self) -> float:
        return self.prompt_per_1m if self.cache_write_per_1m is None else self.cache_write_per_1m

    @property
    def effective_cached_input_per_1m(self) -> float:
        """A prompt token read from the provider's prefix cache (the prompt price when unset)."""
        return self.prompt_per_1m if self.cached_input_per_1m is None else self.cached_input_per_1m

    @property
    def prefix_cache_checkout_per_1m(self) -> float:
        """Session-aware routing's price of moving a prefix to this model's cache: write minus
        cached read (0 for a model without cache prices: every turn pays the prompt price)."""
        return self.effective_cache_write_per_1m - self.effective_cached_input_per_1m

    def turn_cost(self, prompt: int, cached: int, answer: int) -> float:
        """One agent turn on this model, in USD: `cached` prompt tokens read from its prefix cache
        (never more than the prompt), the rest written to it, and an `answer`-token completion.
        Session-aware routing weighs a switch with it and `svc-sr benchmark agent` prices both
        arms with it (docs/routing-quality.md "Agent traffic")."""
        read = min(max(cached, 0), prompt)
        return (
            read * self.effective_cached_input_per_1m
            + (prompt - read) * self.effective_cache_write_per_1m
            + answer * self.completion_per_1m
        ) / 1e6
