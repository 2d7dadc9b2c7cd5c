"""The local demo LLM: gemma-3-270m on node-llama-cpp's prebuilt llama.cpp (docs/local-llm.md).

`python -m app.local_llm install|start|stop|status|restart` (scripts/local-llm.sh, make run).
Stdlib only, so it runs before (and independently of) the rest of the product.
"""

from app.local_llm.settings import LocalLLMError, LocalLLMSettings
from app.local_llm.supervisor import Status, ensure_model, first_answer, start, status, stop

__all__ = [
    "LocalLLMError",
    "LocalLLMSettings",
    "Status",
    "ensure_model",
    "first_answer",
    "start",
    "status",
    "stop",
]
