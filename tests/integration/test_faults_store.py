"""`kill -9` of the process holding the management store during config writes (issue 18).

A real process serves the management API over the file store (the state directory an
Ingress replica keeps: `state.json`, written by compare-and-set, app/management/state.py) and
PATCHes the configuration back to back through it, each PATCH against the ETag it last got,
announcing every acknowledged write. The test SIGKILLs it at a random moment, repeatedly (each
time a few writes in, so kills land in every phase of a write), and after each kill checks
that the state reads back whole and consistent: it parses, its document is the one its hash
names, the active record and the history agree with it, no acknowledged write was lost, and
a fresh process starts from it and serves the same configuration.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from app.management.documents import document_hash
from app.management.state import ConfigStore

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
KILLS = 8

# The writer: the management API (create_app over Management, file store) in this process,
# started as a replica restarts (from the stored document when there is one), PATCHing
# `routing.signals.keywords[0].keywords` to a new word each time. It prints "ready <etag>" once
# serving and "ack <n> <etag>" after each acknowledged PATCH.
_WRITER = r"""
import asyncio, sys
from pathlib import Path
from app.management.state import ConfigStore
from tests.unit.management.test_management_support import Harness, base_document

async def main(state_dir: Path, start: int) -> None:
    stored = ConfigStore(state_dir).document if (state_dir / "state.json").exists() else None
    harness = Harness(stored or base_document(), state_dir=state_dir)
    async with harness.client() as client:
        etag = (await client.get("/api/v1/config")).headers["etag"]
        print("ready", etag, flush=True)
        n = start
        while True:
            n += 1
            patch = {"routing": {"signals": {"keywords": [{"name": "math_kw", "keywords": [f"word{n}"]}]}}}
            reply = await client.patch("/api/v1/config", json=patch, headers={"If-Match": etag})
            if reply.status_code != 200:
                print("refused", reply.status_code, reply.text, flush=True)
                return
            etag = reply.headers["etag"]
            print("ack", n, etag, flush=True)

asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2])))
"""


def keyword_of(document: dict[str, Any]) -> str:
    return str(document["routing"]["signals"]["keywords"][0]["keywords"][0])


def run_writer_until_killed(
    state_dir: Path, start: int, writes: int, delay_s: float
) -> tuple[list[tuple[int, str]], str]:
    """Start the writer, SIGKILL it `delay_s` after its `writes`-th acknowledged PATCH; returns
    the acknowledged writes (number, etag) and the ETag it started serving."""
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(state_dir), str(start)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None
    acks: list[tuple[int, str]] = []
    try:
        first = writer.stdout.readline().split()
        assert first[:1] == ["ready"], (first, writer.stderr.read() if writer.poll() is not None else "")
        while len(acks) < writes:
            line = writer.stdout.readline().split()
            assert line[:1] == ["ack"], line
            acks.append((int(line[1]), line[2]))
        # Somewhere inside a later write: PATCH parsing, validation, the compare-and-set's
        # lock, the temp file's fsync, the rename, the activation's marks.
        time.sleep(delay_s)
        os.kill(writer.pid, signal.SIGKILL)
        remaining = writer.stdout.read().split("\n")  # acks printed before the kill landed
        acks += [(int(p[1]), p[2]) for p in (line.split() for line in remaining) if p[:1] == ["ack"]]
    finally:
        if writer.poll() is None:
            writer.kill()
        writer.wait(timeout=30)
    assert writer.returncode == -signal.SIGKILL
    return acks, first[1]


def assert_consistent(state_dir: Path) -> dict[str, Any]:
    """The stored state as a new process reads it: whole, and agreeing with itself."""
    raw = json.loads((state_dir / "state.json").read_text())  # parses: never half-written
    store = ConfigStore(state_dir)
    assert store.snapshot_json()  # the product's own reader accepts it
    assert document_hash(store.document) == store.source_hash
    versions = store.versions()
    assert versions and versions[0].hash == store.source_hash  # the newest version is the document
    for record in versions:
        assert document_hash(record.document) == record.hash
    active = store.active
    assert active is not None
    assert document_hash(active.document) == active.source_hash
    configs = [v.config_version for v in reversed(versions) if v.config_version is not None]
    assert configs == sorted(configs) and len(set(configs)) == len(configs)
    return raw


def test_kill_9_during_config_writes_leaves_the_state_readable_and_consistent(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    rng = random.Random(18)
    last_acked, stored_hash = 0, ""
    for kill in range(KILLS):
        acks, start_etag = run_writer_until_killed(
            state_dir, last_acked, writes=rng.randint(1, 4), delay_s=rng.uniform(0, 0.08)
        )
        if kill:  # a restart serves what the previous process last stored
            assert start_etag.strip('"') == stored_hash
        raw = assert_consistent(state_dir)
        store = ConfigStore(state_dir)
        number = int(keyword_of(store.document).removeprefix("word"))
        last_number, last_etag = acks[-1]
        # Every acknowledged write is kept; at most the one being written when the kill came is
        # newer (stored, its answer not yet printed).
        assert number in (last_number, last_number + 1), (number, acks[-3:])
        if number == last_number:
            assert store.source_hash == last_etag.strip('"')
        assert raw["revision"] >= len(acks)
        stored_hash, last_acked = store.source_hash, number
    leftovers = [p.name for p in state_dir.iterdir() if p.name.endswith(".tmp")]
    # Each restarted writer's first write removes the temp file a kill left (under the writers'
    # lock): only the last kill's can remain.
    assert len(leftovers) <= 1, leftovers
