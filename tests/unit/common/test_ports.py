"""free_port: below the kernel's ephemeral range, never the same port twice, never a hang."""

from __future__ import annotations

import socket

import pytest

from app.common import ports


def test_ports_are_below_the_ephemeral_range_distinct_and_bindable() -> None:
    picked = [ports.free_port() for _ in range(50)]
    assert len(set(picked)) == len(picked)
    assert all(ports.LOW <= port < ports._ephemeral_low() for port in picked)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", picked[-1]))  # free when handed out


def test_an_address_not_on_this_machine_raises_at_once() -> None:
    with pytest.raises(OSError):
        ports.free_port("192.0.2.1")  # TEST-NET-1: never a local address


def test_a_low_ephemeral_range_falls_back_to_the_kernels_pick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "_ephemeral_low", lambda: 1024)
    port = ports.free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
