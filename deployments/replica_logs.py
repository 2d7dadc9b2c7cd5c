"""The project's logs in a replica's Serve log file (`svc-sr logs service|router|serve`).

Serve writes a replica's log through the `ray.serve` logger only: a MemoryHandler over the
replica's file that, in throughput-optimized mode, holds up to 1,000 records and writes them
when it fills or when a record of level ERROR arrives. The project's loggers (`app.*`, named by
module, and `svc_sr.*`) had no handler there: a 500's traceback went to stderr, which Serve
turns into INFO records of its logger, and waited in that buffer unseen. Routed to Serve's
handlers, an error (every 5xx the Ingress answers, app/api/errors.py) is in the file as it
happens, with the request id Serve's own filters add; warnings before it are written with it.
Records are handed to the Serve logger itself, not to its handlers of the moment: Serve
replaces those when it reconfigures the replica (copies of the first ones wrote nowhere after
the Ingress's first user_config).
"""

from __future__ import annotations

import logging

SERVE_LOGGER = "ray.serve"  # Serve's documented logger for application logs
PROJECT_LOGGERS = ("app", "svc_sr")


class _ToServe(logging.Handler):
    """Hands each record to the Serve logger as it is now: Serve replaces its handlers when it
    reconfigures the replica (a user_config update), so they are looked up at every record."""

    def emit(self, record: logging.LogRecord) -> None:
        logging.getLogger(SERVE_LOGGER).handle(record)


def route_project_logs() -> None:
    """Call at a replica's start (Serve has configured its logger by then)."""
    if not logging.getLogger(SERVE_LOGGER).handlers:  # outside a replica (tests, local testing mode)
        return
    for name in PROJECT_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers = [_ToServe()]
        logger.setLevel(logging.WARNING)  # as before: the root logger's default level
        logger.propagate = False
