"""`svc-sr serve`, `svc-sr stop`, `svc-sr serve` again: what survives a restart.

The real CLI in its own process (it starts its own local Ray instance), with the response
cache on Milvus Lite (its file in the CLI's state directory, the one store whose place the CLI
decides): a repeated prompt is a hit, and still is after the restart; a PATCH
made through the management API is what the restarted router serves (the configuration
file did not change). Each start prints which document it serves.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from tests.fakes.configs import cached_route
from tests.fakes.upstream import FakeUpstream, find_free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SVC_SR = str(Path(sys.executable).with_name("svc-sr"))
START_TIMEOUT_S = 420.0
WRITE_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 60.0  # the cache write happens after the answer is sent
PROMPT = "restartcache: how many moons does mars have?"


class Cli:
    """`svc-sr serve` / `svc-sr stop` with this test's state directories and port."""

    def __init__(
        self,
        work: Path,
        config_path: Path | None,
        port: int,
        serve_args: list[str] | None = None,
        with_envoy: bool = False,
    ) -> None:
        """`serve_args`: what `svc-sr serve` is given instead of `--config config_path`;
        `with_envoy`: Envoy and the ext_proc sidecar too (the configuration's ports)."""
        self.work, self.config_path, self.port, self.with_envoy = work, config_path, port, with_envoy
        self.serve_args = serve_args if serve_args is not None else ["--config", str(config_path)]
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
        command += ["--no-dashboard", "--serve-config", str(self.work / "none.yaml")]
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
                # This start's own "ready" line too: nothing else may answer on the port.
                if (
                    httpx.get(f"{self.base}/ready", timeout=5).status_code == 200
                    and "OpenAI-compatible endpoint" in self.output()
                    and self.cache_open()
                ):
                    return process
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        raise AssertionError(f"svc-sr serve not ready in {START_TIMEOUT_S}s:\n{self.output()}")

    def cache_open(self) -> bool:
        """The ResponseCache opened its store (Milvus Lite's file takes a moment after /ready)."""
        health = httpx.get(f"{self.base}/api/v1/storage/response-cache/health", timeout=5)
        return health.status_code == 200 and health.json().get("status") == "ok"

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


def cache_hit(base: str) -> str | None:
    chat = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)
    answer = chat.chat.completions.with_raw_response.create(
        model="MoM", messages=[{"role": "user", "content": PROMPT}]
    )
    return answer.headers.get("x-vsr-cache-hit")


def wait_for_hit(base: str) -> str | None:
    deadline = time.monotonic() + WRITE_TIMEOUT_S
    while (hit := cache_hit(base)) is None and time.monotonic() < deadline:
        time.sleep(0.5)  # the first answer's cache write lands after it was sent
    return hit


# One store: each backend's survival of new processes is test_cache_stores.py's (Redis, Milvus
# Lite, hybrid); three CLI starts per backend cost CI about 3.5 minutes each.
@pytest.fixture
def cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    work = tmp_path_factory.mktemp("cli-restart")
    store = {"backend_type": "milvus"}  # Milvus Lite under the management state directory
    with FakeUpstream(name="restart") as upstream:
        config_path = work / "config.yaml"
        config_path.write_text(yaml.safe_dump(cached_route(upstream.host_url, "restartcache", store)))
        yield Cli(work, config_path, find_free_port())


# Two starts: which document a start serves (first, resumed, unchanged, an edited file) is
# decided by resolve_startup_document, whose every case, the edited file winning included, is
# tests/unit/test_management_shared_state.py's on both stores; this test proves the CLI wires
# it to a real restart (a third start for the edited file cost CI about 2 minutes).
def test_a_restart_keeps_the_cache_and_the_api_change(cli: Cli) -> None:
    first = cli.serve()
    try:
        assert "configuration: the configuration file (first start" in cli.output()
        assert cache_hit(cli.base) is None
        assert wait_for_hit(cli.base) == "true"
        with httpx.Client(base_url=cli.base, timeout=120) as client:
            tag = client.get("/api/v1/config").headers["etag"]
            patched = client.patch(
                "/api/v1/config", json={"routing": {"strategy": "confidence"}}, headers={"If-Match": tag}
            )
        assert patched.status_code == 200, patched.text
    finally:
        cli.stop(first)

    second = cli.serve()
    try:
        assert "configuration: the stored active version" in cli.output()
        with httpx.Client(base_url=cli.base, timeout=60) as client:
            current = client.get("/api/v1/config")
            started = client.get("/api/v1/observability/audit", params={"action": "config.startup"}).json()
        assert current.headers["etag"] == patched.headers["etag"]
        assert current.json()["routing"]["strategy"] == "confidence"
        assert started["entries"][-1]["config"]["kind"] == "resumed"
        assert cache_hit(cli.base) == "true"  # the entry outlived the router's processes
    finally:
        cli.stop(second)
