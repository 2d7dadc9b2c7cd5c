"""Where and how the demo LLM runs: one frozen settings object, read from the environment."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
MODEL_ALIAS = "gemma-3-270m"
DEFAULT_PORT = 18082
SERVER_SCRIPT = Path(__file__).resolve().parent / "node" / "server.mjs"


class LocalLLMError(RuntimeError):
    """A clean, user-facing failure (missing package, port taken, server died at start)."""


def _repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def default_threads() -> int:
    """One core fewer than available (at most 8): the router's Ray processes need CPU at the same time.

    llama.cpp's worker threads spin while waiting for each other, so when they outnumber free cores a
    single preempted thread stalls every token (docs/local-llm.md).
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        cpus = os.cpu_count() or 1
    return max(1, min(8, cpus - 1))


def default_node() -> str:
    return shutil.which("node") or "node"


@dataclass(frozen=True)
class LocalLLMSettings:
    cache_dir: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    n_ctx: int = 2048
    n_threads: int = field(default_factory=default_threads)
    alias: str = MODEL_ALIAS
    node: str = field(default_factory=default_node)
    # The server's command before its arguments; tests put a stand-in server here. The last element
    # names the process in /proc (how a pid file is told apart from a recycled pid).
    server: tuple[str, ...] = ()
    # Seconds the first completion may take before start() gives up (proof of life).
    proof_timeout: float = 90.0

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
            node=env.get("SVC_SR_NODE") or default_node(),
        )

    @property
    def server_command(self) -> tuple[str, ...]:
        return self.server or (self.node, str(SERVER_SCRIPT))

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
