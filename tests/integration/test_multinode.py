"""Three Ray nodes, two Ingress and two Router replicas over one Redis: a PATCH through one
replica is what every replica reads, and removing a node that holds an Ingress replica under
load loses no configuration version, no audit entry and no cache entry; every request sent
after the removal succeeds.

The cluster runs in its own process (tests/integration/multinode_scenario.py: one Ray driver
per process, and this session's stack is one); this test starts the real Redis and the
upstream double, runs the scenario and asserts on what its clients saw.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.upstream import FakeUpstream

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCENARIO_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("multinode") / "report.json"
    # The session stack's Serve fast-path settings (HAProxy, direct ingress) are per cluster:
    # this cluster runs Serve's own proxy on its head node.
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_SERVE_")}
    with FakeUpstream(name="multinode") as upstream:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.integration.multinode_scenario",
                str(out),
                redis_url,
                upstream.host_url,
            ],
            cwd=ROOT,
            env=env,
            timeout=SCENARIO_TIMEOUT_S,
            capture_output=True,
            text=True,
        )
    assert done.returncode == 0, done.stderr[-6000:]
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def test_a_patch_through_one_replica_is_seen_by_every_replica(report: dict[str, Any]) -> None:
    assert len(report["etags_before"]) == 2  # both Ingress replicas answered
    assert report["patch"]["status"] == 200, report["patch"]
    new_etag = report["patch"]["etag"]
    assert set(report["etags_before"]) == set(report["etags_after"])
    assert set(report["etags_after"].values()) == {new_etag}


def test_removing_an_ingress_node_under_load_fails_no_later_request(report: dict[str, Any]) -> None:
    assert report["requests_before_removal"] > 0
    after = report["after_removal"]
    assert after["sent"] > 0
    assert after["failures"] == []


def test_no_version_audit_entry_or_cache_entry_is_lost(report: dict[str, Any]) -> None:
    assert report["versions_after"][: len(report["versions_before"])] == report["versions_before"]
    before, after = report["audit_before"], report["audit_after"]
    assert after[: len(before)] == before  # every entry kept, in order, unchanged
    for previous, entry in zip(after, after[1:], strict=False):  # one chain: sequence and links
        assert entry[0] == previous[0] + 1 and entry[1] == previous[2]
    assert report["first_answer_cache_hit"] is None
    assert report["hit_before_removal"] == "true"
    assert report["cache_entries_after"] == report["cache_entries_before"] >= 1
    assert report["repeat_cache_hit"] == "true"
