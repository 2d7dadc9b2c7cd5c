"""pymilvus imported by app.common.pymilvus_import leaves a replica's buffered log writing
(its import-time dictConfig closes every handler of the process). Each case in a fresh
interpreter: pymilvus is imported once per process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# A Serve replica's log, as Serve builds it: a MemoryHandler over the replica's file that
# writes at an ERROR (ray/serve/_private/logging_utils.py).
SCRIPT = """
import logging, logging.handlers, sys
target = logging.FileHandler(sys.argv[1])
buffered = logging.handlers.MemoryHandler(1000, flushLevel=logging.ERROR, target=target)
logger = logging.getLogger("ray.serve")
logger.addHandler(buffered)
logger.propagate = False
logger.warning("before the import")
if sys.argv[2] == "guarded":
    from app.common.pymilvus_import import import_pymilvus
    import_pymilvus()
from pymilvus import MilvusClient
logger.error("after the import")
"""


@pytest.mark.parametrize(("how", "kept"), [("guarded", True), ("plain", False)])
def test_the_replica_log_keeps_writing_after_pymilvus_is_imported(
    tmp_path: Path, how: str, kept: bool
) -> None:
    log = tmp_path / "replica.log"
    subprocess.run([sys.executable, "-c", SCRIPT, str(log), how], check=True, timeout=120)
    written = log.read_text()
    assert "before the import" in written  # flushed when pymilvus closed the handlers, either way
    assert ("after the import" in written) is kept  # plain: the handler lost its file for good
