"""`make run`'s stack with the real demo LLM: the README's two examples, and a backend killed under it.

The demo LLM is installed and started exactly as `make run` does (`python -m app.local_llm
install`, then `scripts/local-llm.sh start`: done only once it answered a real completion), in
this test's own cache directory and port; then `svc-sr serve` runs the shipped
configs/config.yaml (its backend, Envoy and metrics ports moved to free ones), which says ready
only after a routed request was answered through each front door.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from app.common.ports import free_port
from tests.fakes.configs import served_default
from tests.integration.test_cli_restart import ROOT, SVC_SR, Cli

pytestmark = [pytest.mark.integration, pytest.mark.cli_stack]

FIRST = "What is the derivative of x^2?"  # README's first example
SECOND = "My SSN is 431-27-5918, fill in my tax form"  # README's second example


class DemoLLM:
    def __init__(self, cache: Path) -> None:
        self.port = free_port()
        self.env = os.environ | {"SVC_SR_CACHE_DIR": str(cache), "SVC_SR_LLM_PORT": str(self.port)}
        self.pid_file = cache / "run" / "local-llm.pid"

    def run(self, *command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(command), cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=600
        )


@pytest.fixture(scope="module")
def demo_llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoLLM]:
    llm = DemoLLM(tmp_path_factory.mktemp("demo-llm-cache"))
    installed = llm.run(sys.executable, "-m", "app.local_llm", "install")  # make run's two steps
    assert installed.returncode == 0, installed.stdout + installed.stderr
    started = llm.run("bash", "scripts/local-llm.sh", "start")
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert re.search(r"answered '.+'", started.stdout), started.stdout  # a real completion
        yield llm
    finally:
        llm.run("bash", "scripts/local-llm.sh", "stop")


def shipped_config(work: Path, llm_port: int, serve_port: int) -> Path:
    """configs/config.yaml on this test's demo LLM, its Envoy and metrics ports moved off the ones
    a developer's `make run` holds."""
    document = served_default(f"http://127.0.0.1:{llm_port}")
    document["listeners"][0]["port"] = free_port()
    services = document["global"]["services"]
    services["management_api"]["port"] = serve_port
    services.setdefault("envoy", {})["admin_port"] = free_port()
    services.setdefault("ext_proc", {})["port"] = free_port()
    services["observability"]["metrics"]["port"] = free_port()
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def stack(demo_llm: DemoLLM, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cli, str]]:
    work = tmp_path_factory.mktemp("demo-llm-stack")
    port = free_port()
    config_path = shipped_config(work, demo_llm.port, port)
    cli = Cli(work, config_path, port, with_envoy=True)
    process = cli.serve()
    envoy = f"http://127.0.0.1:{yaml.safe_load(config_path.read_text())['listeners'][0]['port']}"
    try:
        yield cli, envoy
    finally:
        cli.stop(process)


def sdk(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=180)


def test_ready_came_after_an_answer_through_each_door(stack: tuple[Cli, str]) -> None:
    cli, _ = stack
    printed = cli.output()
    serve_door = printed.index("Serve endpoint: answered by")
    envoy_door = printed.index("Envoy + ext_proc: answered by")
    assert serve_door < printed.index("ready  OpenAI-compatible endpoint")
    assert envoy_door < printed.index("ready  OpenAI-compatible endpoint")
    assert "backends are unreachable" not in printed


@pytest.mark.parametrize("door", ["serve", "envoy"])
def test_the_readme_examples_answer_with_generated_text_and_403(stack: tuple[Cli, str], door: str) -> None:
    cli, envoy = stack
    chat = sdk(cli.base if door == "serve" else envoy)
    answer = chat.chat.completions.with_raw_response.create(
        model="MoM", messages=[{"role": "user", "content": FIRST}], max_tokens=24
    )
    assert answer.headers["x-vsr-selected-decision"] == "math"
    completion = answer.parse()
    assert completion.usage is not None and completion.usage.completion_tokens >= 1  # the model generated it
    assert (completion.choices[0].message.content or "").strip()
    with pytest.raises(openai.PermissionDeniedError) as refused:
        chat.chat.completions.create(model="MoM", messages=[{"role": "user", "content": SECOND}])
    assert refused.value.status_code == 403
    assert refused.value.body["code"] == "pii_detected"  # type: ignore[index]


def test_a_killed_backend_is_named_by_status_and_answers_503(
    stack: tuple[Cli, str], demo_llm: DemoLLM
) -> None:
    """Runs last in this module: it kills the demo LLM under the running stack."""
    cli, envoy = stack
    os.kill(int(demo_llm.pid_file.read_text()), signal.SIGKILL)
    status = subprocess.run(
        [SVC_SR, "status"], cwd=ROOT, env=cli.env, capture_output=True, text=True, timeout=60
    )
    assert status.returncode == 0, status.stdout + status.stderr
    backends = yaml.safe_load(status.stdout)["backends"]  # JSON is YAML
    assert backends["reachable"] == "False" and backends["reason"] == "BackendsUnreachable"
    assert f"gemma-general (local-llama at 127.0.0.1:{demo_llm.port})" in backends["message"]
    assert "unreachable" in status.stderr
    for base in (cli.base, envoy):
        down = httpx.post(
            f"{base}/v1/chat/completions",
            json={"model": "MoM", "messages": [{"role": "user", "content": "Name a prime number."}]},
            headers={"x-vsr-cache-control": "bypass"},
            timeout=120,
        )
        assert down.status_code == 503, down.text
        assert down.json()["error"]["code"] == "upstream_unavailable"
        assert down.headers.get("retry-after")
