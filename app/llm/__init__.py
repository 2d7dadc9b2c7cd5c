"""LLMs served inside the Serve application: the vLLM engine object and its in-process
OpenAI API (app/llm/vllm_engine.py), the config that declares one (app/config/llm_serving.py),
and how a front door reaches it (app/llm/addressing.py).

This package also runs in the vLLM runtime's own virtualenv (scripts/vllm-venv.sh): its
modules import only the standard library, pydantic and (lazily) vllm.
"""
