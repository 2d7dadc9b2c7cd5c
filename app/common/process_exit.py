"""Ending a process that used Ray and gRPC, once everything it started has been stopped.

The interpreter's own finalization after Ray's and gRPC's C++ runtimes were used takes about a
second here (their thread pools and channels are torn down one by one), and a Ray driver's
exit hook sleeps another 0.5 s. `svc-sr serve` and the ext_proc sidecar stop their servers,
drain Serve and shut Ray down explicitly first, so nothing is left for that teardown to do.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    """Flush the log handlers and standard streams, then exit without finalization."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed, or a pipe whose reader left
            stream.flush()
    os._exit(code)
