"""Picking a free TCP port that will still be free a few seconds later.

A port picked by binding port 0 comes from the kernel's ephemeral range (32768-60999 on Linux),
the same range every outgoing connection takes its local port from and Ray picks its own random
ports in (`random.randint(port, 65535)` above a bound port 0). Between the pick and the bind by
the process the port is meant for (Envoy's listener, HAProxy's stats port, a fake server), a
local Ray instance starting opens hundreds of connections; CI (2026-11-30) saw Envoy exit 1 at
every restart, most likely on a port taken that way (its log was not printed; a held port gives
exactly that exit). Below the ephemeral range and above Ray's worker ports
(10002-19999) nothing is handed out by the kernel, so a port free at the pick stays free unless
someone picks it on purpose.
"""

from __future__ import annotations

import errno
import random
import socket
import threading
from pathlib import Path

LOW = 20000  # above Ray's default worker port range (10002-19999)
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_DEFAULT_EPHEMERAL_LOW = 32768
_TRIES = 200
_TAKEN = {errno.EADDRINUSE, errno.EACCES}
# Ports this process handed out: a second pick never returns one (a stack picks four at once, and
# nothing binds them until later).
_handed_out: set[int] = set()
_lock = threading.Lock()


def _ephemeral_low() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _DEFAULT_EPHEMERAL_LOW


def _kernel_pick(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing is bound to on `host` (IPv4), below the ephemeral range when there is room;
    else, or after 200 ports found taken, the kernel's pick. Any error but "taken" is raised (an
    address not on this machine would otherwise fail every try)."""
    high = _ephemeral_low() - 1
    rng = random.Random()
    with _lock:
        for _ in range(_TRIES if high - LOW >= 1000 else 0):
            port = rng.randint(LOW, high)
            if port in _handed_out:
                continue
            with socket.socket() as sock:
                try:
                    sock.bind((host, port))
                except OSError as exc:
                    if exc.errno in _TAKEN:
                        continue
                    raise
            _handed_out.add(port)
            return port
        port = _kernel_pick(host)
        _handed_out.add(port)
        return port
