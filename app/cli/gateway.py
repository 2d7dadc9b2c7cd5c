"""Envoy and the ext_proc sidecar beside the local Ray instance (`svc-sr serve`).

Order matters at start: the sidecar first (Envoy's ext_proc filter needs it), then Envoy. They
stop together: Envoy exits on SIGTERM at once, and the sidecar finishes the completions of its
exchanges (up to its grace period); in turn, the sidecar's drain only began once Envoy was gone.
Both are supervised: a crash restarts the process with back-off.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path

from app.common.supervisor import SupervisedProcess
from app.config.document import RouterConfig
from app.envoy.config import EnvoyPorts, build_envoy_config
from app.envoy.process import EnvoyProcess, validate_config, wait_admin_ready, write_config


class GatewayError(RuntimeError):
    pass


def log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def log_tail(path: Path, since: int = 0, lines: int = 3) -> str:
    """The last lines a process wrote to its log after byte `since` (the log is appended to across
    starts: an earlier run's lines are not this run's reason), on one line, for an error message."""
    try:
        with path.open("rb") as log:
            log.seek(since)
            text = log.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(line.strip() for line in text[-lines:]) or "(nothing written)"


def wait_for_port(host: str, port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise GatewayError(f"nothing listens on {host}:{port} after {timeout_s:.0f}s")


def start_envoy(envoy_yaml: Path, admin_port: int, log: Path, timeout_s: float = 30) -> SupervisedProcess:
    """Envoy, supervised, once its admin /ready answers; GatewayError with Envoy's own reason (a
    port another process holds, most often: it is in Envoy's log, not ours) when it never does.
    Envoy that exits at start exits again: the second restart fails the start at once, not after
    the whole wait. Whatever fails, the supervised Envoy is stopped, never left behind."""
    since = log_size(log)
    envoy = EnvoyProcess(envoy_yaml, admin_port=admin_port, log_path=log)
    process = SupervisedProcess("envoy", envoy.command(), log_path=log).start()
    try:
        wait_admin_ready(admin_port, timeout_s, exited=lambda: process.restarts >= 2)
    except (TimeoutError, RuntimeError) as exc:
        process.stop()
        raise GatewayError(f"{exc}; Envoy's log ends: {log_tail(log, since)}") from exc
    except BaseException:
        process.stop()
        raise
    return process


class Gateway:
    def __init__(
        self,
        config_path: Path,
        config: RouterConfig,
        state_dir: Path,
        ray_address: str,
        app_name: str,
        management_port: int,
    ) -> None:
        self.config_path = config_path
        self.config = config
        self.state_dir = state_dir
        self.ray_address = ray_address
        self.app_name = app_name
        self.ports = EnvoyPorts.from_config(config, management_port=management_port)
        self.sidecar: SupervisedProcess | None = None
        self.envoy: SupervisedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://{self.ports.listener_address}:{self.ports.listener_port}"

    def start(self) -> None:
        envoy_yaml = write_config(build_envoy_config(self.config, self.ports), self.state_dir / "envoy.yaml")
        problem = validate_config(envoy_yaml)
        if problem is not None:
            raise GatewayError(f"generated {envoy_yaml} is invalid: {problem}")
        logs = self.state_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.sidecar = SupervisedProcess(
            "ext_proc sidecar",
            [
                sys.executable,
                "-m",
                "deployments.extproc_sidecar",
                "--config",
                str(self.config_path),
                "--ray-address",
                self.ray_address,
                "--app",
                self.app_name,
            ],
            log_path=logs / "extproc.log",
        ).start()
        wait_for_port(self.ports.ext_proc_address, self.ports.ext_proc_port, 60)
        self.envoy = start_envoy(envoy_yaml, self.ports.admin_port, logs / "envoy.log")

    def stop(self) -> None:
        """SIGTERM to both at once, then wait for both (see the module's docstring)."""
        stopping = [
            threading.Thread(target=process.stop, name=f"stop-{process.name}")
            for process in (self.envoy, self.sidecar)
            if process is not None
        ]
        for thread in stopping:
            thread.start()
        for thread in stopping:
            thread.join()
        self.envoy = self.sidecar = None
