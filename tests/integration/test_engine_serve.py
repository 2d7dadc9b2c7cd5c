"""`svc-sr serve MODEL --engine --platform cpu` (native serving): the real CLI
starts its own Ray instance with the model served by vLLM inside the graph (from the vLLM
environment, as in test_in_cluster_vllm.py) behind the router, no chat backend configured;
the OpenAI SDK's requests, by `MoM` and by the model's name, are answered by that engine;
`svc-sr stop` ends it all."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
import yaml

from app.common.ports import free_port
from tests.integration.conftest import vllm_python
from tests.integration.test_cli_restart import Cli

pytestmark = [pytest.mark.integration, pytest.mark.cli_stack]


def test_native_serving_answers_from_the_engine_in_the_graph(tmp_path: Path, tiny_guard_llama: Path) -> None:
    python = vllm_python()
    model_dir = tiny_guard_llama
    serve_args = [str(model_dir), "--engine", "--platform", "cpu", "--data-parallel-size", "1"]
    serve_args += ["--max-model-len", "256", "--enforce-eager"]  # the router's path, not vLLM's compiler
    cli = Cli(tmp_path, None, free_port(), serve_args)
    cli.env["SVC_SR_VLLM_PYTHON"] = str(python)
    process = cli.serve()
    try:
        assert "native serving: tiny-llama on cpu, 1 engine replica(s)" in cli.output()
        engine = yaml.safe_load((tmp_path / "run" / "engine-config.yaml").read_text())
        assert engine["providers"]["models"][0]["llm_config"]["engine_kwargs"]["enforce_eager"] is True
        chat = openai.OpenAI(base_url=f"{cli.base}/v1", api_key="unused", max_retries=0, timeout=120)
        assert "tiny-llama" in {m.id for m in chat.models.list().data}
        for model in ("MoM", "tiny-llama"):
            raw = chat.chat.completions.with_raw_response.create(
                model=model,
                messages=[{"role": "user", "content": "what is the capital of Spain"}],
                max_tokens=4,
            )
            answer = raw.parse()
            assert raw.headers["x-selected-model"] == "tiny-llama"
            assert answer.choices[0].message.content == "safe"  # the toy guard model's answer
            assert answer.usage is not None and answer.usage.completion_tokens > 0
    finally:
        cli.stop(process)
