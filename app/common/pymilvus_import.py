"""pymilvus imported without silencing the process's logs.

pymilvus configures its own loggers at import (`logging.config.dictConfig`), and dictConfig
first closes every handler of the process. A closed MemoryHandler drops its target, and every
record after it: in a Serve replica that is the replica's log file (`svc-sr logs`,
docs/management-api.md "Every 5xx is traceable"), silent from the first Milvus call on, errors
included. The buffered handlers get their targets back after the import; a closed file handler
reopens at its next record.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Iterator
from logging.handlers import MemoryHandler


def import_pymilvus() -> None:
    """Import pymilvus (once per process), every buffered log handler still writing after it.
    Call before the first `from pymilvus import ...` of a code path."""
    if "pymilvus" in sys.modules:
        return
    targets = {h: h.target for h in _handlers() if isinstance(h, MemoryHandler) and h.target is not None}
    importlib.import_module("pymilvus")
    for handler, target in targets.items():
        handler.setTarget(target)


def _handlers() -> Iterator[logging.Handler]:
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        if isinstance(logger, logging.Logger):  # not a PlaceHolder
            yield from logger.handlers
