"""Keyword signals: `routing.signals.keywords[]`.

Matching (`method`):
- unset / `exact`: each keyword is a literal matched on word boundaries, so "urgent"
  matches "URGENT!" but not "insurgent"; a keyword edge that is not a word character
  ("C++", "$100") needs no boundary there.
- `regex`: each keyword is a Python regular expression (searched, not anchored).
- `fuzzy`: a keyword matches a same-length run of words whose similarity
  (difflib ratio) is >= `fuzzy_threshold` (default 0.8): catches typos ("urgnet").
- `ngram`: character `ngram_arity`-grams (default 3) Jaccard >= `ngram_threshold`
  (default 0.5) against a same-length run of words.
- `bm25`: not supported; the rule reports an error and `on_error` decides.

Operators and confidence (reference router's e2e fixtures):
- OR: matched when >= 1 keyword is present; confidence 0.5 + 0.5 * matched/total
  (1/4 -> 0.625, 2/4 -> 0.75, 4/4 -> 1.0).
- AND: matched when all are present; confidence 1.0.
- NOR: matched when none is present; confidence 1.0.
A rule that does not match reports confidence 0.0.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from difflib import SequenceMatcher
from typing import Any

from app.config.document import RouterConfig
from app.config.signals import KeywordSignal
from app.pipeline.plan import SignalMatch
from app.pipeline.signals.base import SignalContext

FAMILY = "keyword"
_WORDS = re.compile(r"\w+(?:[^\w\s]\w+)*")

Matcher = Callable[[str], bool]


def _literal_pattern(keyword: str, flags: int) -> re.Pattern[str]:
    escaped = re.escape(keyword)
    # \b semantics only where the keyword's own edge is a word character
    start = r"(?<!\w)" if keyword[:1].isalnum() or keyword[:1] == "_" else ""
    end = r"(?!\w)" if keyword[-1:].isalnum() or keyword[-1:] == "_" else ""
    return re.compile(start + escaped + end, flags)


def _windows(words: list[str], size: int) -> list[str]:
    if size <= 0 or len(words) < size:
        return [" ".join(words)] if words else []
    return [" ".join(words[i : i + size]) for i in range(len(words) - size + 1)]


def _ngrams(text: str, n: int) -> set[str]:
    padded = f" {text} "
    return {padded[i : i + n] for i in range(max(len(padded) - n + 1, 1))}


class CompiledKeywordRule:
    """One rule with its matchers built once (per config), reused by every request."""

    def __init__(self, rule: KeywordSignal) -> None:
        self.rule = rule
        self.error: str | None = None
        self.keywords = [k for k in rule.keywords if k]
        self._matchers: list[Matcher] = []
        self._uses_words = False
        flags = 0 if rule.case_sensitive else re.IGNORECASE
        method = rule.method or "exact"
        try:
            if method == "exact":
                self._matchers = [self._search(_literal_pattern(k, flags)) for k in self.keywords]
            elif method == "regex":
                self._matchers = [self._search(re.compile(k, flags)) for k in self.keywords]
            elif method in ("fuzzy", "ngram"):
                self._uses_words = True
                self._matchers = [self._approximate(k, method) for k in self.keywords]
            else:
                self.error = f"keyword method {method!r} is not supported"
        except re.error as exc:
            self.error = f"invalid regex in keyword rule {rule.name!r}: {exc}"

    @staticmethod
    def _search(pattern: re.Pattern[str]) -> Matcher:
        return lambda text: pattern.search(text) is not None

    def _approximate(self, keyword: str, method: str) -> Matcher:
        rule = self.rule
        key = keyword if rule.case_sensitive else keyword.lower()
        size = len(key.split())
        if method == "fuzzy":
            threshold = rule.fuzzy_threshold if rule.fuzzy_threshold is not None else 0.8

            def fuzzy(words_text: str) -> bool:
                return any(
                    SequenceMatcher(None, key, window).ratio() >= threshold
                    for window in _windows(words_text.split(), size)
                )

            return fuzzy
        arity = rule.ngram_arity or 3
        threshold = rule.ngram_threshold if rule.ngram_threshold is not None else 0.5
        key_grams = _ngrams(key, arity)

        def ngram(words_text: str) -> bool:
            for window in _windows(words_text.split(), size):
                grams = _ngrams(window, arity)
                union = len(key_grams | grams)
                if union and len(key_grams & grams) / union >= threshold:
                    return True
            return False

        return ngram

    def evaluate(self, text: str) -> SignalMatch:
        rule = self.rule
        if self.error:
            return SignalMatch(type=FAMILY, name=rule.name, matched=False, confidence=0.0, error=self.error)
        if self._uses_words:
            words = _WORDS.findall(text if rule.case_sensitive else text.lower())
            text = " ".join(words)
        found = [k for k, match in zip(self.keywords, self._matchers, strict=True) if match(text)]
        total = len(self.keywords)
        if rule.operator == "AND":
            matched = total > 0 and len(found) == total
            confidence = 1.0 if matched else 0.0
        elif rule.operator == "NOR":
            matched = not found
            confidence = 1.0 if matched else 0.0
        else:  # OR
            matched = bool(found)
            confidence = 0.5 + 0.5 * len(found) / total if matched else 0.0
        detail: dict[str, Any] = {"keywords": found, "matched_count": len(found), "total": total}
        return SignalMatch(type=FAMILY, name=rule.name, matched=matched, confidence=confidence, detail=detail)


class KeywordEvaluator:
    family = FAMILY

    def __init__(self, rules: list[KeywordSignal]) -> None:
        self._rules = {rule.name: CompiledKeywordRule(rule) for rule in rules}

    @classmethod
    def from_config(cls, config: RouterConfig, services: Any = None) -> KeywordEvaluator:
        return cls(config.routing.signals.keywords)

    def rule_names(self) -> list[str]:
        return list(self._rules)

    async def warm_up(self) -> None:
        return None

    async def evaluate(self, ctx: SignalContext, names: frozenset[str]) -> list[SignalMatch]:
        by_text: dict[str, set[str]] = {}
        for name in names:
            compiled = self._rules.get(name)
            text = ctx.whole_text_for(compiled.rule.read) if compiled is not None else ctx.text
            by_text.setdefault(text, set()).add(name)
        out = [m for text, group in by_text.items() for m in self.evaluate_text(text, group)]
        return sorted(out, key=lambda m: m.name)

    def evaluate_text(self, text: str, names: frozenset[str] | set[str]) -> list[SignalMatch]:
        out = []
        for name in sorted(names):
            compiled = self._rules.get(name)
            if compiled is None:
                out.append(
                    SignalMatch(
                        type=FAMILY,
                        name=name,
                        matched=False,
                        confidence=0.0,
                        error=f"no keyword rule named {name!r}",
                    )
                )
            else:
                out.append(compiled.evaluate(text))
        return out
