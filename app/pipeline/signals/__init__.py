"""Signal evaluators by condition type, and the registry the pipeline builds them from.

Built in: `keyword`, `embedding`, `context`, and the families judged on the request or its
sentence vector in the Router's own process: `preference`, `complexity`, `language`, `modality`, `fact_check`, `user_feedback`, and `kb` (knowledge bases
of the management store, through `PipelineServices.knowledge_bases`). Other families (domain, pii, jailbreak,
...) are added through `PipelineServices.evaluators` with the same factory shape
`(config, services) -> SignalEvaluator`; see `base.py`. The learned ones ask a `SignalEngine`
(app/runtime/signal_engine.py) wherever their host placed it (app/pipeline/local_models.py
`engine_evaluators`).
"""

from __future__ import annotations

from app.pipeline.signals.base import (
    EvaluatorFactory,
    SignalContext,
    SignalEvaluator,
    estimate_tokens,
)
from app.pipeline.signals.complexity import ComplexityEvaluator
from app.pipeline.signals.context import ContextEvaluator
from app.pipeline.signals.embedding import EmbeddingEvaluator
from app.pipeline.signals.fact_check import FactCheckEvaluator
from app.pipeline.signals.kb import KnowledgeBaseEvaluator
from app.pipeline.signals.keyword import KeywordEvaluator
from app.pipeline.signals.language import LanguageEvaluator
from app.pipeline.signals.modality import ModalityEvaluator
from app.pipeline.signals.preference import PreferenceEvaluator
from app.pipeline.signals.user_feedback import UserFeedbackEvaluator

BUILTIN_EVALUATORS: dict[str, EvaluatorFactory] = {
    "keyword": KeywordEvaluator.from_config,
    "embedding": EmbeddingEvaluator.from_config,
    "context": ContextEvaluator.from_config,
    "preference": PreferenceEvaluator.from_config,
    "complexity": ComplexityEvaluator.from_config,
    "language": LanguageEvaluator.from_config,
    "modality": ModalityEvaluator.from_config,
    "fact_check": FactCheckEvaluator.from_config,
    "user_feedback": UserFeedbackEvaluator.from_config,
    "kb": KnowledgeBaseEvaluator.from_config,
}

__all__ = [
    "BUILTIN_EVALUATORS",
    "ContextEvaluator",
    "EmbeddingEvaluator",
    "EvaluatorFactory",
    "KeywordEvaluator",
    "SignalContext",
    "SignalEvaluator",
    "estimate_tokens",
]
