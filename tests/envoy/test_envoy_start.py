"""`svc-sr serve` starting Envoy: when Envoy cannot start, the start fails with Envoy's reason.

CI once saw `envoy not ready after 30s` and a traceback, Envoy having exited 1 at each of five
restarts: its listener port had been taken between the pick and the bind. The reason was only
in Envoy's log. A user meeting a held port gets it in the start's own error instead.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from app.cli.gateway import GatewayError, start_envoy
from app.common.ports import free_port
from app.config.loader import parse_config
from app.envoy.config import EnvoyPorts, build_envoy_config
from app.envoy.process import write_config
from tests.fakes.configs import served_default


def envoy_yaml(work: Path, listener_port: int, admin_port: int) -> Path:
    config = parse_config(served_default("http://127.0.0.1:9")).config
    ports = EnvoyPorts.from_config(
        config,
        listener_port=listener_port,
        ext_proc_port=free_port(),
        admin_port=admin_port,
        management_port=free_port(),
    )
    return write_config(build_envoy_config(config, ports), work / "envoy.yaml")


def test_a_listener_port_another_process_holds_fails_the_start_with_envoys_reason(tmp_path: Path) -> None:
    log = tmp_path / "envoy.log"
    log.write_text("a line an earlier run wrote\n")  # the log is appended to across starts
    taken, admin = free_port(), free_port()
    with socket.socket() as held:
        held.bind(("127.0.0.1", taken))
        held.listen()
        path = envoy_yaml(tmp_path, taken, admin)
        with pytest.raises(GatewayError) as failed:
            start_envoy(path, admin, log, timeout_s=120)
    message = str(failed.value)
    # Envoy exits at once at each restart: the start fails on that, not at the end of the wait
    assert "envoy exited during start-up" in message
    assert f"127.0.0.1:{taken}" in message and "in use" in message.lower()
    assert "earlier run" not in message


def test_a_free_port_starts_envoy_and_it_answers_ready(tmp_path: Path) -> None:
    admin = free_port()
    process = start_envoy(
        envoy_yaml(tmp_path, free_port(), admin), admin, tmp_path / "envoy.log", timeout_s=30
    )
    try:
        assert process.alive()
    finally:
        process.stop()
    assert not process.alive()
