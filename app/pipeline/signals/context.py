"""Context-length signals: `routing.signals.context[]` (`{name, min_tokens, max_tokens}`).

A rule matches when the prompt's token count lies within [min_tokens, max_tokens]
(both inclusive, either bound optional; "32K" suffixes are parsed by the config
model). The count covers every message's text; see `SignalContext.token_count` for
how it is obtained (exact tokenizer count when the services provide one, else
ceil(chars / 4)).
"""

from __future__ import annotations

from typing import Any

from app.config.document import RouterConfig
from app.config.signals import ContextSignal
from app.pipeline.plan import SignalMatch
from app.pipeline.signals.base import SignalContext

FAMILY = "context"


class ContextEvaluator:
    family = FAMILY

    def __init__(self, rules: list[ContextSignal]) -> None:
        self._rules = {rule.name: rule for rule in rules}

    @classmethod
    def from_config(cls, config: RouterConfig, services: Any = None) -> ContextEvaluator:
        return cls(config.routing.signals.context)

    def rule_names(self) -> list[str]:
        return list(self._rules)

    async def warm_up(self) -> None:
        return None

    async def evaluate(self, ctx: SignalContext, names: frozenset[str]) -> list[SignalMatch]:
        return self.evaluate_count(ctx.token_count, names)

    def evaluate_count(self, tokens: int, names: frozenset[str] | set[str]) -> list[SignalMatch]:
        out = []
        for name in sorted(names):
            rule = self._rules.get(name)
            if rule is None:
                out.append(
                    SignalMatch(
                        type=FAMILY,
                        name=name,
                        matched=False,
                        confidence=0.0,
                        error=f"no context rule named {name!r}",
                    )
                )
                continue
            low_ok = rule.min_tokens is None or tokens >= rule.min_tokens
            high_ok = rule.max_tokens is None or tokens <= rule.max_tokens
            matched = low_ok and high_ok
            out.append(
                SignalMatch(
                    type=FAMILY,
                    name=name,
                    matched=matched,
                    confidence=1.0 if matched else 0.0,
                    detail={
                        "token_count": tokens,
                        "min_tokens": rule.min_tokens,
                        "max_tokens": rule.max_tokens,
                    },
                )
            )
        return out
