"""app.local_llm supervises the demo LLM process. These tests drive it with a stand-in OpenAI-style
server (stdlib http.server) so they need neither llama.cpp nor the GGUF."""

from __future__ import annotations

import os
import socket
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from app import local_llm
from app.local_llm import LocalLLMError, LocalLLMSettings

FAKE_SERVER = textwrap.dedent(
    """
    import argparse, json
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    p = argparse.ArgumentParser()
    for flag in ("--model", "--host", "--port", "--n_ctx", "--n_threads", "--model_alias", "--chat_format"):
        p.add_argument(flag)
    a = p.parse_args()

    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"object": "list", "data": [{"id": a.model_alias}]}).encode()
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *args):
            pass

    ThreadingHTTPServer((a.host, int(a.port)), H).serve_forever()
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fake_assemble(path: Path) -> Path:
    path.write_bytes(b"GGUF fake")
    return path


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalLLMSettings:
    mod_dir = tmp_path / "mods"
    mod_dir.mkdir()
    (mod_dir / "fake_llm_server.py").write_text(FAKE_SERVER)
    monkeypatch.setenv("PYTHONPATH", str(mod_dir))  # inherited by the child process
    s = LocalLLMSettings(
        cache_dir=tmp_path / "cache",
        port=_free_port(),
        python=sys.executable,
        server_module="fake_llm_server",
        server_subcommand=(),
    )
    yield s
    local_llm.stop(s, grace=2)


def test_server_command_uses_vicuna_and_settings(tmp_path: Path) -> None:
    s = LocalLLMSettings(cache_dir=tmp_path, port=19999, n_ctx=1024, n_threads=3)
    cmd = local_llm.server_command(s, tmp_path / "m.gguf")
    assert cmd[1:4] == ["-m", "app.local_llm", "serve"]
    args = dict(zip(cmd[4::2], cmd[5::2], strict=True))
    assert args == {
        "--model": str(tmp_path / "m.gguf"),
        "--host": "127.0.0.1",
        "--port": "19999",
        "--n_ctx": "1024",
        "--n_threads": "3",
        "--model_alias": "gemma-3-270m",
        "--chat_format": "svc-sr-vicuna",
    }


def test_demo_chat_prompt_turns_system_and_stops() -> None:
    prompt, stop = local_llm.demo_chat_prompt(
        [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url"}]},
            {"role": "assistant", "content": "hello"},
            {"role": "tool", "content": "42"},
            {"role": "user", "content": None},
        ]
    )
    assert prompt == "You are terse.\n\nUSER: hi\nASSISTANT: hello\nUSER: 42\nUSER: \nASSISTANT:"
    # The model must stop before inventing the user's next turn.
    assert "USER:" in stop
    default_prompt, _ = local_llm.demo_chat_prompt([{"role": "user", "content": "q"}])
    assert default_prompt.startswith(local_llm.DEMO_SYSTEM_PROMPT)
    assert default_prompt.endswith("USER: q\nASSISTANT:")


def test_settings_from_env_reads_and_validates(tmp_path: Path) -> None:
    s = LocalLLMSettings.from_env({"SVC_SR_CACHE_DIR": str(tmp_path), "SVC_SR_LLM_PORT": "18100"})
    assert s.port == 18100
    assert s.model_path == tmp_path.resolve() / "models" / "gemma-3-270m-q4_k_m.gguf"
    assert s.pid_file.parent == tmp_path.resolve() / "run"
    assert 1 <= s.n_threads <= max(1, (os.cpu_count() or 1) - 1)  # leaves a core to the router
    assert (
        LocalLLMSettings.from_env({"SVC_SR_CACHE_DIR": str(tmp_path), "SVC_SR_LLM_THREADS": "3"}).n_threads
        == 3
    )
    for bad in ("abc", "0", "70000"):
        with pytest.raises(LocalLLMError, match="SVC_SR_LLM_PORT"):
            LocalLLMSettings.from_env({"SVC_SR_CACHE_DIR": str(tmp_path), "SVC_SR_LLM_PORT": bad})


def test_ensure_model_assembles_once(tmp_path: Path) -> None:
    calls: list[Path] = []

    def assemble(path: Path) -> Path:
        calls.append(path)
        return _fake_assemble(path)

    target = tmp_path / "models" / "m.gguf"
    assert local_llm.ensure_model(target, assemble) == target
    assert local_llm.ensure_model(target, assemble) == target
    assert len(calls) == 1 and calls[0] != target  # written elsewhere, then renamed
    assert target.read_bytes() == b"GGUF fake"


def test_ensure_model_failure_leaves_nothing_behind(tmp_path: Path) -> None:
    def broken(path: Path) -> Path:
        path.write_bytes(b"half")
        raise ValueError("Assembled file sha256 did not match expected value")

    target = tmp_path / "models" / "m.gguf"
    with pytest.raises(LocalLLMError, match="sha256"):
        local_llm.ensure_model(target, broken)
    assert list(target.parent.iterdir()) == []


def test_stale_or_garbage_pid_file_is_cleared(settings: LocalLLMSettings) -> None:
    settings.run_dir.mkdir(parents=True)
    settings.pid_file.write_text("not a pid")
    assert local_llm.read_pid(settings) is None
    assert not settings.pid_file.exists()
    # Our own pid is alive but is not a server process: must not be mistaken for the LLM (or killed).
    settings.pid_file.write_text(str(os.getpid()))
    assert local_llm.read_pid(settings) is None
    assert not settings.pid_file.exists()


def test_start_status_stop_roundtrip(settings: LocalLLMSettings) -> None:
    first = local_llm.start(settings, ready_timeout=30, assemble=_fake_assemble)
    assert first.ready and first.models == ["gemma-3-270m"]
    assert settings.model_path.is_file()
    assert int(settings.pid_file.read_text()) == first.pid

    again = local_llm.start(settings, ready_timeout=30, assemble=_fake_assemble)
    assert again.message.startswith("already running") and again.pid == first.pid

    st = local_llm.status(settings)
    assert st.running and st.ready and st.pid == first.pid

    stopped = local_llm.stop(settings)
    assert not stopped.running and "stopped" in stopped.message
    assert not settings.pid_file.exists()
    assert not local_llm.status(settings).running
    assert local_llm.stop(settings).message == "local LLM is not running"


def test_start_reports_a_server_that_dies(settings: LocalLLMSettings) -> None:
    broken = replace(settings, server_module="no_such_llm_server_module")
    with pytest.raises(LocalLLMError, match="exited during start") as info:
        local_llm.start(broken, ready_timeout=30, assemble=_fake_assemble)
    assert "build-llama.sh" in str(info.value)  # "No module named ..." gets the install hint
    assert not broken.pid_file.exists()


def test_start_refuses_a_port_taken_by_someone_else(settings: LocalLLMSettings) -> None:
    with socket.socket() as other:
        other.bind((settings.host, settings.port))
        other.listen()
        with pytest.raises(LocalLLMError, match="taken by another process"):
            local_llm.start(settings, ready_timeout=5, assemble=_fake_assemble)
    assert not settings.pid_file.exists()


def test_main_status_exit_code_when_stopped(settings: LocalLLMSettings, monkeypatch, capsys) -> None:
    monkeypatch.setenv("SVC_SR_CACHE_DIR", str(settings.cache_dir))
    monkeypatch.setenv("SVC_SR_LLM_PORT", str(settings.port))
    assert local_llm.main(["status"]) == local_llm.EXIT_NOT_RUNNING
    assert "not running" in capsys.readouterr().out
    monkeypatch.setenv("SVC_SR_LLM_PORT", "nope")
    assert local_llm.main(["status"]) == local_llm.EXIT_ERROR
    assert "SVC_SR_LLM_PORT" in capsys.readouterr().err
