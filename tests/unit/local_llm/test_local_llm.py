"""app.local_llm supervises the demo LLM process. These tests drive it with a stand-in OpenAI-style
server (stdlib http.server) in the server's place, so they need neither Node.js nor the GGUF; the
real engine is tested by tests/integration/test_demo_llm.py."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from app.common.ports import free_port
from app.local_llm import LocalLLMError, LocalLLMSettings, cli, supervisor

# Answers /v1/models; its first completion depends on FAKE_MODE: "ok", "garbage", "empty", or
# "crash" (the process dies of SIGSEGV, as llama.cpp built for another CPU did) or
# "crash-mid-answer" (it dies after the headers and part of the body).
FAKE_SERVER = textwrap.dedent(
    """
    import argparse, json, os, signal, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    p = argparse.ArgumentParser()
    for flag in ("--model", "--host", "--port", "--ctx", "--threads", "--alias", "--modules"):
        p.add_argument(flag)
    a = p.parse_args()
    mode = os.environ.get("FAKE_MODE", "ok")
    signal.signal(signal.SIGSEGV, signal.SIG_DFL)

    class H(BaseHTTPRequestHandler):
        def _send(self, code, body):
            self.send_response(code)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(body if isinstance(body, bytes) else json.dumps(body).encode())
        def do_GET(self):
            self._send(200 if self.path == "/v1/models" else 404, {"object": "list", "data": [{"id": a.alias}]})
        def do_POST(self):
            self.rfile.read(int(self.headers["content-length"]))
            if mode == "crash":
                # Never fall through to an answer: a SIGSEGV not acted on at once (a signal mask
                # or disposition inherited from the test process) once let this handler answer
                # "Hello." and the supervisor rightly accept it.
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGSEGV})
                os.kill(os.getpid(), signal.SIGSEGV)
                while True:
                    time.sleep(1)
            if mode == "crash-mid-answer":  # headers and part of the body, then SIGSEGV
                self.send_response(200)
                self.send_header("content-length", "500")
                self.end_headers()
                self.wfile.write(b'{"choices": [{"mess')
                self.wfile.flush()
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGSEGV})
                os.kill(os.getpid(), signal.SIGSEGV)
                while True:
                    time.sleep(1)
            if mode == "garbage":
                return self._send(200, b"\\x00\\x01 not json")
            text = "" if mode == "empty" else "Hello."
            self._send(200, {"choices": [{"message": {"role": "assistant", "content": text}}],
                             "usage": {"completion_tokens": 2 if text else 0}})
        def log_message(self, *args):
            pass

    print("fake demo LLM listening", flush=True)
    ThreadingHTTPServer((a.host, int(a.port)), H).serve_forever()
    """
)


def _fake_assemble(path: Path) -> Path:
    path.write_bytes(b"GGUF fake")
    return path


@pytest.fixture
def settings(tmp_path: Path) -> LocalLLMSettings:
    script = tmp_path / "fake_llm_server.py"
    script.write_text(FAKE_SERVER)
    s = LocalLLMSettings(
        cache_dir=tmp_path / "cache",
        port=free_port(),
        server=(sys.executable, str(script)),
        proof_timeout=10,
    )
    yield s
    supervisor.stop(s, grace=2)


def test_server_command_runs_the_node_server_with_the_settings(tmp_path: Path) -> None:
    s = LocalLLMSettings(cache_dir=tmp_path, port=19999, n_ctx=1024, n_threads=3, node="/opt/node/bin/node")
    cmd = supervisor.server_command(s, tmp_path / "m.gguf", tmp_path / "node_modules")
    assert cmd[0] == "/opt/node/bin/node" and cmd[1].endswith("app/local_llm/node/server.mjs")
    assert dict(zip(cmd[2::2], cmd[3::2], strict=True)) == {
        "--model": str(tmp_path / "m.gguf"),
        "--host": "127.0.0.1",
        "--port": "19999",
        "--ctx": "1024",
        "--threads": "3",
        "--alias": "gemma-3-270m",
        "--modules": str(tmp_path / "node_modules"),
    }


def test_settings_from_env_reads_and_validates(tmp_path: Path) -> None:
    s = LocalLLMSettings.from_env({"SVC_SR_CACHE_DIR": str(tmp_path), "SVC_SR_LLM_PORT": "18100"})
    assert s.port == 18100
    assert s.model_path == tmp_path.resolve() / "models" / "gemma-3-270m-q4_k_m.gguf"
    assert s.pid_file.parent == tmp_path.resolve() / "run"
    assert 1 <= s.n_threads <= max(1, (os.cpu_count() or 1) - 1)  # leaves a core to the router
    env = {"SVC_SR_CACHE_DIR": str(tmp_path), "SVC_SR_LLM_THREADS": "3", "SVC_SR_NODE": "/x/node"}
    assert LocalLLMSettings.from_env(env).n_threads == 3
    assert LocalLLMSettings.from_env(env).server_command[0] == "/x/node"
    for bad in ("abc", "0", "70000"):
        with pytest.raises(LocalLLMError, match="SVC_SR_LLM_PORT"):
            LocalLLMSettings.from_env({"SVC_SR_CACHE_DIR": str(tmp_path), "SVC_SR_LLM_PORT": bad})


def test_ensure_model_assembles_once(tmp_path: Path) -> None:
    calls: list[Path] = []

    def assemble(path: Path) -> Path:
        calls.append(path)
        return _fake_assemble(path)

    target = tmp_path / "models" / "m.gguf"
    assert supervisor.ensure_model(target, assemble) == target
    assert supervisor.ensure_model(target, assemble) == target
    assert len(calls) == 1 and calls[0] != target  # written elsewhere, then renamed
    assert target.read_bytes() == b"GGUF fake"


def test_ensure_model_failure_leaves_nothing_behind(tmp_path: Path) -> None:
    def broken(path: Path) -> Path:
        path.write_bytes(b"half")
        raise ValueError("Assembled file sha256 did not match expected value")

    target = tmp_path / "models" / "m.gguf"
    with pytest.raises(LocalLLMError, match="sha256"):
        supervisor.ensure_model(target, broken)
    assert list(target.parent.iterdir()) == []


def test_stale_or_garbage_pid_file_is_cleared(settings: LocalLLMSettings) -> None:
    settings.run_dir.mkdir(parents=True)
    settings.pid_file.write_text("not a pid")
    assert supervisor.read_pid(settings) is None
    assert not settings.pid_file.exists()
    # Our own pid is alive but is not a server process: must not be mistaken for the LLM (or killed).
    settings.pid_file.write_text(str(os.getpid()))
    assert supervisor.read_pid(settings) is None
    assert not settings.pid_file.exists()


def test_start_is_done_when_a_completion_was_answered(settings: LocalLLMSettings) -> None:
    first = supervisor.start(settings, ready_timeout=30, assemble=_fake_assemble)
    assert first.ready and first.models == ["gemma-3-270m"]
    assert "answered 'Hello.'" in first.message
    assert settings.model_path.is_file()
    assert int(settings.pid_file.read_text()) == first.pid

    again = supervisor.start(settings, ready_timeout=30, assemble=_fake_assemble)
    assert again.message.startswith("already running") and again.pid == first.pid
    assert "answered 'Hello.'" in again.message  # a running server is proven again

    st = supervisor.status(settings)
    assert st.running and st.ready and st.pid == first.pid

    stopped = supervisor.stop(settings)
    assert not stopped.running and "stopped" in stopped.message
    assert not settings.pid_file.exists()
    assert not supervisor.status(settings).running
    assert supervisor.stop(settings).message == "local LLM is not running"


@pytest.mark.parametrize("mode", ["crash", "crash-mid-answer"])
def test_a_server_that_dies_on_its_first_completion_is_one_clear_error(
    settings: LocalLLMSettings, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """/v1/models answered, then the first token killed it: the failure names the signal, the
    likely cause and the log, and nothing is left running."""
    monkeypatch.setenv("FAKE_MODE", mode)
    with pytest.raises(LocalLLMError) as info:
        supervisor.start(settings, ready_timeout=30, assemble=_fake_assemble)
    message = str(info.value)
    assert "did not answer its first completion" in message
    assert "SIGSEGV" in message and "another CPU" in message
    assert str(settings.log_file) in message and "fake demo LLM listening" in message
    assert not settings.pid_file.exists()
    assert not supervisor.status(settings).running


def test_a_port_taken_after_the_check_is_not_mistaken_for_our_server(
    settings: LocalLLMSettings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Another server took the port between the check and our bind: its answers are not ours."""
    other = subprocess.Popen(
        [
            sys.executable,
            str(tmp_path / "fake_llm_server.py"),
            "--host",
            "127.0.0.1",
            "--port",
            str(settings.port),
        ],
        stdout=subprocess.PIPE,
        env={**os.environ, "FAKE_MODE": "ok"},
    )
    try:
        assert other.stdout is not None and b"listening" in other.stdout.readline()
        monkeypatch.setattr(supervisor, "_port_in_use", lambda host, port: False)
        # Our server loses the bind: seen either after the other answered (the port check) or,
        # when it exits first, as an exit during start; never as a started server.
        with pytest.raises(LocalLLMError, match="another process answered on port|exited during start"):
            supervisor.start(settings, ready_timeout=30, assemble=_fake_assemble)
        assert not settings.pid_file.exists()
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize(
    ("mode", "said", "shown"),
    [("garbage", "with garbage", "not json"), ("empty", "with no text", '"content": ""')],
)
@pytest.mark.slow
def test_a_server_that_answers_nonsense_is_stopped_with_the_answer_shown(
    settings: LocalLLMSettings, monkeypatch: pytest.MonkeyPatch, mode: str, said: str, shown: str
) -> None:
    monkeypatch.setenv("FAKE_MODE", mode)
    with pytest.raises(LocalLLMError, match=said) as info:
        supervisor.start(settings, ready_timeout=30, assemble=_fake_assemble)
    assert shown in str(info.value) and "it is still running" in str(info.value)
    assert not settings.pid_file.exists() and not supervisor.status(settings).running


def test_start_reports_a_server_that_exits_during_start(settings: LocalLLMSettings, tmp_path: Path) -> None:
    exits = tmp_path / "exits.py"
    exits.write_text("import sys; print('Cannot find module node-llama-cpp'); sys.exit(1)\n")
    broken = replace(settings, server=(sys.executable, str(exits)))
    with pytest.raises(LocalLLMError, match="exited during start") as info:
        supervisor.start(broken, ready_timeout=30, assemble=_fake_assemble)
    assert "exited with code 1" in str(info.value)
    assert "python -m app.local_llm install" in str(info.value)  # the missing engine gets the hint
    assert not broken.pid_file.exists()


def test_start_refuses_a_port_taken_by_someone_else(settings: LocalLLMSettings) -> None:
    with socket.socket() as other:
        other.bind((settings.host, settings.port))
        other.listen()
        with pytest.raises(LocalLLMError, match="taken by another process"):
            supervisor.start(settings, ready_timeout=5, assemble=_fake_assemble)
    assert not settings.pid_file.exists()


def test_exit_causes_name_the_signal() -> None:
    assert "SIGILL" in supervisor._exit_cause(-signal.SIGILL) and "another CPU" in supervisor._exit_cause(-4)
    assert supervisor._exit_cause(3) == "it exited with code 3"


def test_main_status_exit_code_when_stopped(settings: LocalLLMSettings, monkeypatch, capsys) -> None:
    monkeypatch.setenv("SVC_SR_CACHE_DIR", str(settings.cache_dir))
    monkeypatch.setenv("SVC_SR_LLM_PORT", str(settings.port))
    assert cli.main(["status"]) == cli.EXIT_NOT_RUNNING
    assert "not running" in capsys.readouterr().out
    monkeypatch.setenv("SVC_SR_LLM_PORT", "nope")
    assert cli.main(["status"]) == cli.EXIT_ERROR
    assert "SVC_SR_LLM_PORT" in capsys.readouterr().err
