"""`svc-sr logs [service] [-f]` and `svc-sr dashboard` (app/cli/local_ops.py) over a fake Ray
session folder and a real HTTP server on 127.0.0.1 standing in for the running stack."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from app.cli import local_ops
from app.cli import serve as serve_module
from app.cli.main import cli
from app.cli.serve import ServeState

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A running `svc-sr serve` (this process) whose Ray session holds a few logs."""
    monkeypatch.setattr(serve_module, "STATE_FILE", tmp_path / "run" / "serve.json")
    monkeypatch.setattr(serve_module, "STATE_DIR", tmp_path / "run")
    logs = tmp_path / "session" / "logs"
    (logs / "serve").mkdir(parents=True)
    for name, lines in (
        ("serve/replica_svc_Ingress_a1.log", ["ingress 1", "ingress 2", "ingress 3"]),
        ("serve/replica_svc_Router_b2.log", ["router 1", "router 2"]),
        ("serve/controller_1.log", ["controller 1"]),
        ("dashboard.log", ["dashboard up"]),
    ):
        (logs / name).write_text("\n".join(lines) + "\n")
    ServeState(os.getpid(), str(ROOT / "configs" / "config.yaml"), "http://127.0.0.1:9", time.time(),
               ray_session_dir=str(tmp_path / "session")).write()  # fmt: skip
    return logs


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_logs_shows_each_service_s_own_files(session: Path) -> None:
    front = run("logs", "service", "-n", "2")
    assert front.exit_code == 0
    assert "Ingress_a1.log" in front.stdout and "ingress 2\ningress 3" in front.stdout
    assert "ingress 1" not in front.stdout and "router" not in front.stdout
    router = run("logs", "router")
    assert "router 1\nrouter 2" in router.stdout and "ingress" not in router.stdout
    assert "dashboard up" in run("logs", "dashboard").stdout
    assert "controller 1" in run("logs", "serve").stdout
    gateway = serve_module.STATE_DIR / "logs"
    gateway.mkdir(parents=True)
    (gateway / "envoy.log").write_text("envoy listening\n")
    assert "envoy listening" in run("logs", "envoy").stdout
    assert run("logs", "sidecar").exit_code == 3
    assert run("logs", "nonsense").exit_code == 2


def test_logs_of_a_set_without_files_exit_3(session: Path) -> None:
    for path in session.glob("serve/replica_*Router*"):
        path.unlink()
    assert run("logs", "router").exit_code == 3


def test_follow_prints_appended_lines_and_new_replica_files(session: Path) -> None:
    ingress = session / "serve" / "replica_svc_Ingress_a1.log"
    offsets = {ingress: ingress.stat().st_size}
    printed: list[str] = []
    done = threading.Event()
    follower = threading.Thread(
        target=local_ops.follow,
        args=(session, local_ops.LOG_SETS["service"], offsets, printed.append, done.is_set),
    )
    follower.start()
    try:
        with ingress.open("a") as handle:
            handle.write("ingress 4\n")
        replacement = session / "serve" / "replica_svc_Ingress_c3.log"
        replacement.write_text("replacement 1\n")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not ("ingress 4" in printed and "replacement 1" in printed):
            time.sleep(0.05)
    finally:
        done.set()
        follower.join(timeout=5)
    assert "ingress 4" in printed and "replacement 1" in printed
    assert f"==> {replacement} <==" in printed
    assert "ingress 3" not in "\n".join(printed)  # what was already shown is not printed again


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def front_door() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.slow
def test_dashboard_lists_the_consoles_and_opens_only_those_that_answer(
    session: Path, front_door: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = ServeState.read()
    assert state is not None
    document = yaml.safe_load(Path(state.config_path).read_text())
    document.setdefault("global", {}).setdefault("services", {})["observability"] = {
        "metrics": {"enabled": True, "port": 9}  # nothing answers there
    }
    served = session.parent / "served.yaml"
    served.write_text(yaml.safe_dump(document))
    state.http, state.config_path = front_door, str(served)
    state.write()
    opened: list[str] = []
    monkeypatch.setattr(local_ops.webbrowser, "open", opened.append)
    monkeypatch.setattr(local_ops, "RAY_DASHBOARD", "http://127.0.0.1:9")  # nothing answers there
    listed = run("dashboard", "--json", "--no-open")
    assert listed.exit_code == 0
    consoles = json.loads(listed.stdout)
    assert consoles["api"] == {"url": f"{front_door}/v1", "up": True}
    assert consoles["management"]["up"] is True
    assert consoles["ray_dashboard"]["up"] is False
    assert consoles["metrics"] == {"url": "http://127.0.0.1:9/metrics", "up": False}  # the served config's
    assert not opened
    assert run("dashboard").exit_code == 0
    assert opened == []  # the dashboard and the metrics page do not answer: nothing to open


def test_dashboard_without_a_running_stack_exits_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve_module, "STATE_FILE", tmp_path / "none.json")
    assert run("dashboard", "--no-open").exit_code == 3


def test_a_new_file_first_seen_empty_gets_its_header_with_its_first_lines(
    session: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica's log is created, then written: a pass that sees it empty must not count it as
    shown (its lines would then come without the header that says whose they are)."""
    monkeypatch.setattr(local_ops, "FOLLOW_POLL_S", 0)
    pattern = local_ops.LOG_SETS["service"]
    offsets = {path: path.stat().st_size for path in local_ops.newest(session, pattern)}
    new = session / "serve" / "replica_svc_Ingress_d4.log"
    new.touch()
    printed: list[str] = []

    def one_pass() -> Callable[[], bool]:
        answers = iter([False, True])
        return lambda: next(answers)

    local_ops.follow(session, pattern, offsets, printed.append, one_pass())
    assert printed == []
    new.write_text("first line\n")
    local_ops.follow(session, pattern, offsets, printed.append, one_pass())
    assert printed == [f"==> {new} <==", "first line"]
