"""`svc-sr serve`, `svc-sr stop`, `svc-sr serve` again: what survives a restart, on the stack
`make run` starts (issue 33).

The real CLI in its own process (it starts its own local Ray instance) with the shipped
configs/config.yaml (its backends pointed at a fake upstream) and the shipped Serve config, which
asks for two ResponseCache replicas. The cache is switched to Milvus Lite through the CLI (`svc-sr
config apply --mode merge`, a PATCH): Milvus Lite's directory opens in one process, so the graph
runs one ResponseCache replica for it (docs/configuration.md "One owner"), and the stats route names
milvus on every call. A repeated prompt is a hit right after the activation and after a restart,
whose first request finds the store open (/ready waits for it); the PATCH is what the restarted
router serves (the configuration file did not change). Each start prints which document it serves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from app.common.ports import free_port
from tests.fakes.configs import served_default
from tests.fakes.upstream import FakeUpstream

pytestmark = [pytest.mark.integration, pytest.mark.cli_stack]

ROOT = Path(__file__).resolve().parents[2]
SVC_SR = str(Path(sys.executable).with_name("svc-sr"))
START_TIMEOUT_S = 420.0
WRITE_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 60.0  # the cache write happens after the answer is sent
MATH = "What is the derivative of x^3 + 2x?"  # the math decision caches its answers


class Cli:
    """`svc-sr serve` / `svc-sr stop` with this test's state directories and port."""

    def __init__(
        self,
        work: Path,
        config_path: Path | None,
        port: int,
        serve_args: list[str] | None = None,
        serve_config: Path | None = None,
        with_envoy: bool = False,
    ) -> None:
        """`serve_args`: what `svc-sr serve` is given instead of `--config config_path`;
        `serve_config`: the Serve config whose deployment options apply (None: Serve's defaults);
        `with_envoy`: Envoy and the ext_proc sidecar too (the configuration's ports)."""
        self.work, self.config_path, self.port, self.with_envoy = work, config_path, port, with_envoy
        self.serve_args = serve_args if serve_args is not None else ["--config", str(config_path)]
        self.serve_config = serve_config or work / "none.yaml"
        self.base = f"http://127.0.0.1:{port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_SERVE_")}
        self.env |= {
            "SVC_SR_STATE_DIR": str(work / "run"),
            "SVC_SR_MANAGEMENT_STATE_DIR": str(work / "management"),
        }
        self.starts = 0

    def serve(self) -> subprocess.Popen[bytes]:
        self.starts += 1
        out = (self.work / f"serve-{self.starts}.log").open("wb")
        command = [SVC_SR, "serve", *self.serve_args, "--port", str(self.port)]
        command += ["--no-dashboard", "--serve-config", str(self.serve_config)]
        command += [] if self.with_envoy else ["--no-envoy"]
        process = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        try:
            return self._ready(process)
        except BaseException:
            # A start that never got ready must not outlive its test (its Ray instance would take
            # CPU from every test after it): SIGTERM is `svc-sr serve`'s clean shutdown.
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
            raise

    def _ready(self, process: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert process.poll() is None, self.output()
            try:
                # This start's own "ready" line too: nothing else may answer on the port. /ready
                # alone says the cache opened its store (docs/configuration.md "One owner").
                if (
                    httpx.get(f"{self.base}/ready", timeout=5).status_code == 200
                    and "OpenAI-compatible endpoint" in self.output()
                ):
                    return process
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        raise AssertionError(f"svc-sr serve not ready in {START_TIMEOUT_S}s:\n{self.output()}")

    def output(self) -> str:
        return (self.work / f"serve-{self.starts}.log").read_text(errors="replace")

    def stop(self, process: subprocess.Popen[bytes]) -> None:
        done = subprocess.run(
            [SVC_SR, "stop"], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert process.wait(timeout=60) is not None
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while self.answers() and time.monotonic() < deadline:
            time.sleep(0.5)  # Serve's proxy processes exit a moment after the CLI
        assert not self.answers(), f"something still answers on {self.base} after svc-sr stop"

    def answers(self) -> bool:
        try:
            httpx.get(f"{self.base}/health", timeout=2)
        except httpx.HTTPError:
            return False
        return True


MILVUS_LITE = {"global": {"stores": {"response_cache": {"backend_type": "milvus"}}}}  # no uri: Lite
STATS_CALLS = 5


def cache_hit(base: str, prompt: str) -> str | None:
    """The answer's x-vsr-cache-hit header (None: a miss), checked against routing_metadata."""
    chat = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)
    answer = chat.chat.completions.with_raw_response.create(
        model="MoM", messages=[{"role": "user", "content": prompt}]
    )
    hit = answer.headers.get("x-vsr-cache-hit")
    assert (answer.parse().model_extra or {})["routing_metadata"]["cache_hit"] is (hit == "true")
    return hit


def wait_for_hit(base: str, prompt: str) -> str | None:
    deadline = time.monotonic() + WRITE_TIMEOUT_S
    while (hit := cache_hit(base, prompt)) is None and time.monotonic() < deadline:
        time.sleep(0.5)  # the first answer's cache write lands after it was sent
    return hit


def cache_backends(base: str) -> list[tuple[int, str | None]]:
    """The stats route, called several times: every call reaches whichever replica Serve picks."""
    with httpx.Client(base_url=base, timeout=60) as client:
        replies = [client.get("/api/v1/storage/response-cache/stats") for _ in range(STATS_CALLS)]
    return [(r.status_code, r.json().get("backend") if r.status_code == 200 else r.text) for r in replies]


def apply_patch(cli: Cli, patch: dict[str, Any]) -> dict[str, Any]:
    """`svc-sr config apply --mode merge` (a PATCH with the current ETag), while a client keeps
    asking: returns the CLI's result, and asserts that no request failed meanwhile."""
    path = cli.work / "patch.yaml"
    path.write_text(yaml.safe_dump(patch))
    command = [SVC_SR, "config", "apply", "--mode", "merge", "--config", str(path)]
    command += ["--endpoint", cli.base, "--timeout", "180"]
    statuses: list[int] = []
    done_event = threading.Event()

    def keep_asking() -> None:
        chat = openai.OpenAI(base_url=f"{cli.base}/v1", api_key="unused", max_retries=0, timeout=60)
        while not done_event.is_set():
            reply = chat.chat.completions.with_raw_response.create(
                model="MoM",
                messages=[{"role": "user", "content": f"Tell me one fact about the number {len(statuses)}."}],
            )
            statuses.append(reply.http_response.status_code)

    asking = threading.Thread(target=keep_asking)
    asking.start()
    try:
        done = subprocess.run(command, cwd=ROOT, env=cli.env, capture_output=True, text=True, timeout=240)
    finally:
        done_event.set()
        asking.join(timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert statuses and set(statuses) == {200}, statuses
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.fixture
def cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    work = tmp_path_factory.mktemp("cli-restart")
    with FakeUpstream(name="restart") as upstream:
        document = served_default(upstream.host_url)
        document["global"]["services"]["observability"]["metrics"]["port"] = free_port()
        config_path = work / "config.yaml"
        config_path.write_text(yaml.safe_dump(document))
        yield Cli(work, config_path, free_port(), serve_config=ROOT / "cluster" / "serve-config.yaml")


# Two starts: which document a start serves (first, resumed, unchanged, an edited file) is
# decided by resolve_startup_document, whose every case, the edited file winning included, is
# tests/unit/management/test_management_shared_state.py's on both stores; this test proves the CLI wires
# it to a real restart (a third start for the edited file cost CI about 2 minutes). Each backend's
# survival of new processes is test_cache_stores.py's (Redis, Milvus Lite, hybrid); which
# backends get one replica, on which path, is tests/unit/cache/test_cache_owner.py's.
def test_a_cache_patched_to_milvus_lite_serves_hits_and_outlives_a_restart(cli: Cli) -> None:
    first = cli.serve()
    try:
        assert "configuration: the configuration file (first start" in cli.output()
        assert cache_backends(cli.base) == [(200, "memory")] * STATS_CALLS
        # Tried first, as a user would: the probe opens the candidate where the cache is owned.
        probed = httpx.post(
            f"{cli.base}/api/v1/storage/response-cache/test", json={"backend_type": "milvus"}, timeout=120
        )
        assert probed.status_code == 200 and probed.json()["status"] == "ok", probed.text
        patched = apply_patch(cli, MILVUS_LITE)
        assert patched["activation_status"] == "active"
        assert cache_backends(cli.base) == [(200, "milvus")] * STATS_CALLS
        assert cache_hit(cli.base, MATH) is None
        assert wait_for_hit(cli.base, MATH) == "true"
        assert cache_backends(cli.base) == [(200, "milvus")] * STATS_CALLS
        # Storage starts on its first call here (docs/deploy.md "Laptop sizing"): the call waits
        # for it and is answered.
        created = httpx.post(f"{cli.base}/api/v1/storage/vector-stores", json={"name": "notes"}, timeout=120)
        assert created.status_code == 200, created.text
    finally:
        cli.stop(first)

    second = cli.serve()
    try:
        assert "configuration: the stored active version" in cli.output()
        # The first request after /ready: the store is open, and the entry outlived the processes.
        assert cache_hit(cli.base, MATH) == "true"
        assert cache_backends(cli.base) == [(200, "milvus")] * STATS_CALLS
        with httpx.Client(base_url=cli.base, timeout=60) as client:
            current = client.get("/api/v1/config")
            started = client.get("/api/v1/observability/audit", params={"action": "config.startup"}).json()
        assert current.headers["etag"] == patched["etag"]
        assert current.json()["global"]["stores"]["response_cache"]["backend_type"] == "milvus"
        assert started["entries"][-1]["config"]["kind"] == "resumed"
        # A new Storage replica, started by this call, reads the records the first one wrote.
        stores = httpx.get(f"{cli.base}/api/v1/storage/vector-stores", timeout=120)
        assert stores.status_code == 200 and [s["id"] for s in stores.json()["data"]] == [
            created.json()["id"]
        ]
    finally:
        cli.stop(second)
