"""The svc-sr CLI (config, route preview, request chat, completion) through click's
CliRunner against a real uvicorn server on 127.0.0.1 serving create_app + Management."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
import yaml
from click.testing import CliRunner

from app.cli.main import cli
from app.cli.remote import (
    EXIT_ACTIVATION_FAILED,
    EXIT_AUTH,
    EXIT_CONFLICT,
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_UNREACHABLE,
)
from app.management import ActivationFailed
from tests.fakes.upstream import FakeUpstream
from tests.unit.management.test_management_support import Harness, base_document, with_auth

TOKEN = "cli-admin-token-5555"


class Server:
    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(harness.app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)
        self.sock.close()


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream(name="cli", reply="hello from upstream") as fake:
        yield fake


@pytest.fixture
def server(upstream: FakeUpstream) -> Iterator[Server]:
    with Server(Harness(base_document(upstream.base_url))) as running:
        yield running


def run(*args: str, env: dict[str, str] | None = None, input: str | None = None):
    return CliRunner().invoke(cli, list(args), env=env, input=input, catch_exceptions=False)


def write(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path


# ------------------------------------------------------------------ local forms
def test_init_validate_import_locally(tmp_path: Path):
    target = tmp_path / "config.yaml"
    assert run("config", "init", str(target), "--endpoint", "127.0.0.1:9000").exit_code == 0
    assert run("config", "init", str(target)).exit_code == EXIT_INVALID  # no overwrite without --force
    ok = run("config", "validate", str(target))
    assert ok.exit_code == 0 and json.loads(ok.stdout)["valid"] is True
    broken = write(tmp_path / "bad.yaml", {"version": "v0.3", "providers": {"models": []}})
    bad = run("config", "validate", str(broken))
    assert bad.exit_code == EXIT_INVALID and "providers.models" in bad.stderr
    out = tmp_path / "imported.yaml"
    imported = run("config", "import", "-", "-o", str(out), input=json.dumps(base_document()))
    assert imported.exit_code == 0 and yaml.safe_load(out.read_text())["version"] == "v0.3"


def test_completion_scripts():
    bash = run("completion", "bash")
    assert bash.exit_code == 0 and "_SVC_SR_COMPLETE" in bash.stdout
    assert "complete" in run("completion", "fish").stdout


# ------------------------------------------------------------------ remote forms
@pytest.mark.slow
def test_get_plan_apply_versions_rollback(server: Server, tmp_path: Path):
    ep = ("--endpoint", server.url)
    got = run("config", "get", *ep, "--format", "json")
    assert got.exit_code == 0 and json.loads(got.stdout)["providers"]["defaults"]["default_model"] == "small"
    patch = write(tmp_path / "patch.yaml", {"routing": {"strategy": "confidence"}})
    plan = run("config", "plan", *ep, "--config", str(patch), "--mode", "merge")
    assert plan.exit_code == 0 and json.loads(plan.stdout)["changed"] is True
    applied = run("config", "apply", *ep, "--config", str(patch), "--mode", "merge")
    assert applied.exit_code == 0, applied.stderr
    assert json.loads(applied.stdout)["config_version"] == 2
    assert server.harness.pipeline.config.routing.strategy == "confidence"
    versions = run("config", "versions", *ep, "--json")
    assert [v["config_version"] for v in json.loads(versions.stdout)["versions"]] == [2, 1]
    table = run("config", "versions", *ep)
    assert table.exit_code == 0 and "api.patch" in table.stdout
    back = run("config", "rollback", "1", *ep)
    assert back.exit_code == 0 and json.loads(back.stdout)["config_version"] == 3
    assert server.harness.pipeline.config.routing.strategy == "priority"
    missing = run("config", "rollback", "99", *ep)
    assert missing.exit_code == EXIT_NOT_FOUND


@pytest.mark.slow
def test_apply_exit_codes(server: Server, tmp_path: Path):
    ep = ("--endpoint", server.url)
    bad = base_document()
    bad["routing"]["decisions"][0]["modelRefs"][0]["model"] = "ghost"
    invalid = run("config", "apply", *ep, "--config", str(write(tmp_path / "bad.yaml", bad)))
    assert invalid.exit_code == EXIT_INVALID and "routing.decisions[0].modelRefs[0]" in invalid.stderr
    stale = run(
        "config",
        "apply",
        *ep,
        "--config",
        str(write(tmp_path / "ok.yaml", base_document())),
        "--if-match",
        '"0000"',
    )
    assert stale.exit_code == EXIT_CONFLICT
    remote_invalid = run("config", "validate", str(tmp_path / "bad.yaml"), *ep)
    assert remote_invalid.exit_code == EXIT_INVALID
    schema = run("config", "schema", *ep, "--mode", "progressive")
    assert schema.exit_code == 0 and "properties" in json.loads(schema.stdout)


@pytest.mark.slow
def test_activation_failure_exit_code(upstream: FakeUpstream, tmp_path: Path):
    class Refuse:
        async def activate(self, config, document):
            raise ActivationFailed("warm", "replica_refused", None, "no capacity")

    with Server(Harness(base_document(upstream.base_url), activator=Refuse())) as srv:
        patch = write(tmp_path / "p.yaml", {"routing": {"strategy": "confidence"}})
        result = run("config", "apply", "--endpoint", srv.url, "--config", str(patch), "--mode", "merge")
    assert result.exit_code == EXIT_ACTIVATION_FAILED
    assert json.loads(result.stdout)["status"] == "activation_failed" and "no capacity" in result.stderr


@pytest.mark.slow
def test_token_from_environment_and_auth_failures(upstream: FakeUpstream):
    document = with_auth(base_document(upstream.base_url), {"mode": "bearer"})
    with Server(Harness(document, environ={"SVC_MGMT_TOKEN": TOKEN})) as srv:
        ok = run("config", "get", "--endpoint", srv.url, env={"SVC_MGMT_TOKEN": TOKEN})
        custom = run(
            "config", "get", "--endpoint", srv.url, "--token-env", "MY_TOKEN", env={"MY_TOKEN": TOKEN}
        )
        denied = run("config", "get", "--endpoint", srv.url, env={"SVC_MGMT_TOKEN": "wrong"})
    assert ok.exit_code == 0 and custom.exit_code == 0
    assert denied.exit_code == EXIT_AUTH and TOKEN not in denied.stderr + denied.stdout


def test_unreachable_endpoint():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = run("config", "get", "--endpoint", f"http://127.0.0.1:{port}", "--timeout", "2")
    assert result.exit_code == EXIT_UNREACHABLE


@pytest.mark.slow
def test_route_preview_remote_and_local(server: Server, tmp_path: Path):
    remote = run("route", "preview", "what is the integral of x", "--endpoint", server.url)
    assert remote.exit_code == 0, remote.stderr
    body = json.loads(remote.stdout)
    assert (body["decision"], body["selected_model"]) == ("math", "big")
    assert body["matched_signals"] == ["keyword:math_kw"]
    local = run(
        "route", "preview", "hello", "--local", str(write(tmp_path / "c.yaml", base_document())), "--full"
    )
    assert local.exit_code == 0 and json.loads(local.stdout)["selected_model"] == "small"


@pytest.mark.slow
def test_request_chat_through_the_data_plane(server: Server, upstream: FakeUpstream):
    result = run("request", "chat", "an integral please", "--endpoint", server.url)
    assert result.exit_code == 0, result.stderr
    assert "hello from upstream" in result.stdout and "x-selected-model=big" in result.stderr
    streamed = run("request", "chat", "hi", "--endpoint", server.url, "--stream")
    assert streamed.exit_code == 0 and streamed.stdout.strip()


@pytest.mark.slow
def test_route_probe_reports_how_a_real_request_was_routed(server: Server, upstream: FakeUpstream):
    before = len(upstream.requests)
    result = run("route", "probe", "what is the integral of x squared", "--endpoint", server.url)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["status"] == 200 and report["latency_ms"] > 0
    assert report["headers"]["x-selected-model"] == "big"
    assert report["headers"]["x-vsr-selected-decision"] == "math"
    assert report["routing_metadata"]["selected_model"] == "big"
    assert len(upstream.requests) == before + 1  # the backend was called, with the short answer asked
    assert upstream.requests[-1].body["max_tokens"] == 1
    refused = run("route", "probe", "hi", "--model", "no-such-model", "--endpoint", server.url)
    assert refused.exit_code == EXIT_NOT_FOUND
    assert json.loads(refused.stdout)["status"] == 404
    assert run("route", "probe", "hi", "--endpoint", "http://127.0.0.1:9").exit_code == EXIT_UNREACHABLE
