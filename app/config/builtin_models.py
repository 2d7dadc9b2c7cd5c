"""The task each built-in model answers, by every name a config's `artifact` may give it.

Validation needs it to reject a binding whose built-in cannot answer what the binding reads
(a prompt guard bound to the PII detector). The models themselves live higher up
(`app.runtime.registry`, `app.srun.catalog`), and configuration must not import them, so the
names and tasks are restated here as data; tests/unit/config/test_config_validate.py fails when
the two drift apart.
"""

from __future__ import annotations

# canonical built-in name -> the task it answers (the binding contracts' vocabulary)
BUILTIN_TASKS: dict[str, str] = {
    "minilm-embedding": "embeddings",
    "domain-classifier": "label_probabilities",
    "jailbreak-guard": "label_scores",
    "pii-detector": "token_spans",
    "decision-model": "decisions",
    "minilm-reranker": "rerank",
}

# alias -> canonical built-in name
BUILTIN_ALIASES: dict[str, str] = {
    "all-MiniLM-L6-v2": "minilm-embedding",
    "sentence-transformers/all-MiniLM-L6-v2": "minilm-embedding",
    "domain": "domain-classifier",
    "jailbreak": "jailbreak-guard",
    "pii": "pii-detector",
    "decisions": "decision-model",
    "systemone": "decision-model",
    "reranker": "minilm-reranker",
    "rerank": "minilm-reranker",
}


def builtin_task(artifact: str) -> str | None:
    """The task of a built-in model artifact (`name` or `name@revision`); None for a hub
    repository or a local path."""
    name = artifact.partition("@")[0]
    return BUILTIN_TASKS.get(BUILTIN_ALIASES.get(name, name))
