"""The `routing.signals:` section: the signal rules decisions refer to, by family."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BeforeValidator, Field, ValidationError, WithJsonSchema, field_validator

from app.config.errors import issues_from_validation_error
from app.config.model_base import Open, Strict
from app.config.semantic_signals import (
    ComplexitySignal,
    FactCheckSignal,
    LanguageSignal,
    ModalitySignal,
    PreferenceSignal,
    UserFeedbackSignal,
)

# What a rule reads (app/common/chat_text.py `guard_texts`): the human's ask always (the
# default, `[]`, or `latest_ask`), the whole conversation instead with `conversation`, tool
# results and system messages besides (`tool_results`, `system`; a safety rule judges each on
# its own, a routing rule reads them joined). The old `ask` and `tools` are converted on load
# (app/config/legacy/read_parts.py).
ReadPart = Literal["latest_ask", "conversation", "tool_results", "system"]


class KeywordSignal(Strict):
    name: str
    operator: Literal["AND", "OR", "NOR"] = "OR"
    method: Literal["regex", "exact", "bm25", "ngram", "fuzzy"] | None = None
    keywords: list[str] = Field(min_length=1)
    case_sensitive: bool = False
    bm25_threshold: float | None = None
    ngram_threshold: float | None = None
    ngram_arity: int | None = None
    fuzzy_match: bool | None = None
    fuzzy_threshold: float | None = None
    read: list[ReadPart] = Field(default_factory=list)

    @field_validator("operator", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


class EmbeddingSignal(Strict):
    name: str
    threshold: float = Field(default=0.75, ge=0, le=1)
    candidates: list[str] = Field(min_length=1)
    aggregation_method: Literal["mean", "avg", "max", "any"] = "max"
    query_modality: Literal["text"] = "text"
    model: str | None = None
    dimension: int | None = None
    read: list[ReadPart] = Field(default_factory=list)


class DomainSignal(Strict):
    name: str
    description: str | None = None
    mmlu_categories: list[str] = Field(default_factory=list)
    model_scores: list[dict[str, Any]] = Field(default_factory=list)
    threshold: float | None = Field(default=None, ge=0, le=1)
    read: list[ReadPart] = Field(default_factory=list)

    def categories(self) -> frozenset[str]:
        """Lower-cased classifier categories the rule accepts: its `mmlu_categories` (any
        classifier's labels, a bound model's too), else its own name (the spec's mapping rule)."""
        if self.mmlu_categories:
            return frozenset(c.strip().lower() for c in self.mmlu_categories)
        return frozenset({self.name.strip().lower()})


_TOKEN_COUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*$")


def parse_token_count(value: int | str | None) -> int | None:
    """`32K` -> 32768, `1M` -> 1048576, ints unchanged (reference router's suffixes)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a token count (e.g. 4096, 32K)")
    if value is None or isinstance(value, int):
        return value
    match = _TOKEN_COUNT.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a token count (e.g. 4096, 32K)")
    scale = {"": 1, "k": 1024, "m": 1024 * 1024}[match.group(2).lower()]
    return int(float(match.group(1)) * scale)


# Accepts 4096 or "32K"; the JSON Schema says so, since the before-validator converts.
TokenCount = Annotated[
    Annotated[int, Field(ge=0)] | None,
    BeforeValidator(parse_token_count),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*[kKmM]?\s*$"},
                {"type": "null"},
            ]
        }
    ),
]


class ContextSignal(Strict):
    name: str
    min_tokens: TokenCount = None
    max_tokens: TokenCount = None


def _check_band(band: list[float]) -> list[float]:
    if band and (len(band) != 2 or not 0.0 <= band[0] < band[1] <= 1.0):
        raise ValueError("cascade_band must be [low, high] with 0 <= low < high <= 1")
    return band


# The uncertain band of a guard's score, [low, high): a score inside it is judged again by the
# guardrail LLM (`global.model_catalog.external[]`, model_role guardrail); empty: no cascade.
CascadeBand = Annotated[list[float], AfterValidator(_check_band)]
# `cascade_band_unread`: the band of a text in a language the guard's heads do not read (they
# are trained on English: app/models/language.py `read_by_english_heads`); there a head's score
# says little, so the judge may take a wider band; empty: `cascade_band` for every text.
CASCADE_KEYS = ("cascade_band", "cascade_band_unread")  # what the prompt guard passes to its rules
# `prompt_guard.cascade_judge`: who judges the bands (app/pipeline/signals/band_judge.py)
CASCADE_JUDGES = ("llm", "encoder", "multilingual")


class JailbreakSignal(Strict):
    name: str
    # vllm: an LLM guard (`global.model_catalog.external[]` with model_role guardrail) judges it.
    method: Literal["classifier", "contrastive", "hybrid", "vllm"] = "classifier"
    threshold: float = Field(default=0.5, ge=0, le=1)
    include_history: bool = False
    read: list[ReadPart] = Field(default_factory=list)
    cascade_band: CascadeBand = Field(default_factory=list)
    cascade_band_unread: CascadeBand = Field(default_factory=list)
    # An instruction planted for the AI in a tool result (app/models/tool_injection.py) is an
    # injection whatever the head scores; read only where `read` lists `tool_results`.
    planted_instructions: bool = False
    jailbreak_patterns: list[str] = Field(default_factory=list)
    benign_patterns: list[str] = Field(default_factory=list)


class PIISignal(Strict):
    name: str
    threshold: float = Field(default=0.5, ge=0, le=1)
    pii_types_allowed: list[str] = Field(default_factory=list)
    include_history: bool = False
    read: list[ReadPart] = Field(default_factory=list)


# The harmful-content classifier's categories (app/models/harmful.py; its artifact lists the same).
HarmfulCategory = Literal["violence_weapons", "sexual", "minors", "self_harm", "hate", "crime_hacking"]
HARMFUL_CATEGORIES: tuple[str, ...] = get_args(HarmfulCategory)


class HarmfulSignal(Strict):
    """Matches when the harmful-content classifier's probability of `categories` (all when
    empty) reaches `threshold`."""

    name: str
    threshold: float = Field(default=0.5, ge=0, le=1)
    categories: list[HarmfulCategory] = Field(default_factory=list)
    include_history: bool = False
    read: list[ReadPart] = Field(default_factory=list)
    cascade_band: CascadeBand = Field(default_factory=list)
    cascade_band_unread: CascadeBand = Field(default_factory=list)


class KnowledgeBaseSignal(Strict):
    """Matches when the request's nearest label in knowledge base `kb` is one of `labels`
    (any when empty) with a score >= `threshold` (app/pipeline/signals/kb.py). `max`: a
    label's score is its best exemplar's cosine similarity; `knn`: the `top_k` nearest vote."""

    name: str
    kb: str = Field(min_length=1, description="a knowledge base of /api/v1/storage/knowledge-bases")
    threshold: float = Field(default=0.5, ge=0, le=1)
    labels: list[str] = Field(default_factory=list)
    method: Literal["max", "knn"] = "max"
    top_k: int = Field(default=5, ge=1, le=100)


class Signals(Open):
    """Signal rules by family. Families svc-sr evaluates are typed; the reference
    router's other families (reask, structure, ...) are kept as data
    and may not be referenced by a decision (validate.py says so)."""

    keywords: list[KeywordSignal] = Field(default_factory=list)
    embeddings: list[EmbeddingSignal] = Field(default_factory=list)
    domains: list[DomainSignal] = Field(default_factory=list)
    context: list[ContextSignal] = Field(default_factory=list)
    jailbreak: list[JailbreakSignal] = Field(default_factory=list)
    pii: list[PIISignal] = Field(default_factory=list)
    harmful: list[HarmfulSignal] = Field(default_factory=list)
    preferences: list[PreferenceSignal] = Field(default_factory=list)
    complexity: list[ComplexitySignal] = Field(default_factory=list)
    language: list[LanguageSignal] = Field(default_factory=list)
    modality: list[ModalitySignal] = Field(default_factory=list)
    fact_check: list[FactCheckSignal] = Field(default_factory=list)
    user_feedbacks: list[UserFeedbackSignal] = Field(default_factory=list)
    kb: list[KnowledgeBaseSignal] = Field(default_factory=list)


# condition `type` -> the Signals attribute holding rules of that type
SIGNAL_FAMILIES: dict[str, str] = {
    "keyword": "keywords",
    "embedding": "embeddings",
    "domain": "domains",
    "context": "context",
    "jailbreak": "jailbreak",
    "pii": "pii",
    "harmful": "harmful",
    "preference": "preferences",
    "complexity": "complexity",
    "language": "language",
    "modality": "modality",
    "fact_check": "fact_check",
    "user_feedback": "user_feedbacks",
    "kb": "kb",
}

# Condition types of the reference router that svc-sr does not evaluate (yet).
REFERENCE_ONLY_SIGNAL_TYPES = frozenset(
    {
        "reask",
        "structure",
        "authz",
        "conversation",
        "event",
        "metadata",
        "classifier",
        "projection",
    }
)


def prompt_guard_harmful_issues(model_catalog: Any) -> list[tuple[str, str, str]]:
    """(path, message, code) for `modules.prompt_guard`'s `read` and `cascade_band`, and for its
    `harmful` part (true or a rule without a name): each must make a rule, since the global
    guard is compiled from them on activation."""
    section: object = model_catalog
    for key in ("modules", "prompt_guard"):
        section = section.get(key) if isinstance(section, dict) else getattr(section, key, None)
    issues: list[tuple[str, str, str]] = []
    if isinstance(section, dict):
        shared = {k: section[k] for k in ("read", *CASCADE_KEYS) if k in section}
        try:
            JailbreakSignal(name="global:prompt_guard", **shared)
        except ValidationError as exc:
            where = "global.model_catalog.modules.prompt_guard"
            issues += [(where, f"{i.path}: {i.message}", i.code) for i in issues_from_validation_error(exc)]
        judge = section.get("cascade_judge", "llm")
        if judge not in CASCADE_JUDGES:
            where = "global.model_catalog.modules.prompt_guard.cascade_judge"
            issues.append((where, f"expected one of {', '.join(CASCADE_JUDGES)}", "enum"))
    node = section.get("harmful") if isinstance(section, dict) else None
    path = "global.model_catalog.modules.prompt_guard.harmful"
    if node is None or isinstance(node, bool):
        return issues
    if not isinstance(node, dict):
        return [
            *issues,
            (path, "expected true/false or {enabled, threshold, categories, include_history}", "type"),
        ]
    if not isinstance(node.get("enabled", False), bool):
        issues.append((f"{path}.enabled", "expected a boolean", "type"))
    try:
        HarmfulSignal(name="global:prompt_guard:harmful", **{k: v for k, v in node.items() if k != "enabled"})
    except ValidationError as exc:
        issues += [(path, f"{i.path}: {i.message}", i.code) for i in issues_from_validation_error(exc)]
    return issues
