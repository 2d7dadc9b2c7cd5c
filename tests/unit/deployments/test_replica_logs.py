"""deployments/replica_logs.py: the project's logs go through a replica's Serve logger, whose
buffer writes an error at once (Serve's own handler shape: a MemoryHandler over the replica's
file, flushed at ERROR; built here without Ray)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from logging.handlers import MemoryHandler

import pytest

from deployments.replica_logs import PROJECT_LOGGERS, SERVE_LOGGER, route_project_logs


@pytest.fixture
def replica_file() -> Iterator[io.StringIO]:
    """Serve's replica logger as throughput-optimized Serve configures it, restored after."""
    names = (SERVE_LOGGER, *PROJECT_LOGGERS)
    saved = {n: (logging.getLogger(n).handlers[:], logging.getLogger(n).propagate) for n in names}
    levels = {n: logging.getLogger(n).level for n in names}
    file = io.StringIO()
    buffered = MemoryHandler(capacity=1000, flushLevel=logging.ERROR, target=logging.StreamHandler(file))
    logging.getLogger(SERVE_LOGGER).handlers = [buffered]
    try:
        yield file
    finally:
        for name in names:
            logger = logging.getLogger(name)
            logger.handlers, logger.propagate = saved[name]
            logger.setLevel(levels[name])


def test_an_error_is_in_the_replica_file_at_once_with_what_came_before(replica_file: io.StringIO) -> None:
    route_project_logs()
    logging.getLogger("app.api.errors").warning("a warning first")
    assert replica_file.getvalue() == ""  # buffered, as Serve buffers
    logging.getLogger("app.api.errors").error("answered 500 (request id req-9)")
    written = replica_file.getvalue()
    assert "a warning first" in written and "req-9" in written
    logging.getLogger("svc_sr.extproc").error("the other family too")
    assert "the other family too" in replica_file.getvalue()


def test_outside_a_replica_logging_is_left_alone() -> None:
    serve = logging.getLogger(SERVE_LOGGER)
    saved, serve.handlers = serve.handlers[:], []
    project = logging.getLogger("app")
    before = (project.handlers[:], project.propagate)
    try:
        route_project_logs()
        assert (project.handlers, project.propagate) == before
    finally:
        serve.handlers = saved


def test_handlers_serve_replaces_later_are_the_ones_written_to(replica_file: io.StringIO) -> None:
    route_project_logs()
    again = io.StringIO()  # Serve reconfigures the replica: new handlers on its logger
    logging.getLogger(SERVE_LOGGER).handlers = [logging.StreamHandler(again)]
    logging.getLogger("app.api.errors").error("answered 503 (request id req-10)")
    assert "req-10" in again.getvalue() and "req-10" not in replica_file.getvalue()
