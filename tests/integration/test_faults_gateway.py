"""The ext_proc sidecar killed while Envoy runs (issue 18): its supervisor starts a new one (as
`svc-sr serve` supervises it), Envoy reconnects on its own, and requests are routed again.

Envoy and the sidecar are this module's own (the fixture of tests/integration/
test_envoy_sidecar.py, over the session's svc-sr application); the sidecar is SIGKILLed.
"""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from tests.integration.conftest import Stack
from tests.integration.test_envoy_sidecar import Gateway, gateway  # noqa: F401  (the fixture)

pytestmark = pytest.mark.integration

RECOVERY_TIMEOUT_S = 120.0
QUESTION = "Through Envoy: solve the equation 2x + 3 = 11 for x."


def ask(door: Gateway) -> httpx.Response:
    body = {"model": "MoM", "messages": [{"role": "user", "content": QUESTION}]}
    return httpx.post(f"{door.v1}/chat/completions", json=body, timeout=60)


def assert_routed(stack: Stack, answer: httpx.Response) -> None:
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-selected-model"] == "model-a"  # the sidecar's routing decision
    assert answer.json()["routing_metadata"]["decision"] == "math"
    assert stack.upstream_a.last_request.body["model"] == "served-a"


def test_a_killed_sidecar_is_restarted_and_envoy_routes_through_it_again(
    stack: Stack,
    gateway: Gateway,  # noqa: F811
) -> None:
    assert_routed(stack, ask(gateway))
    process = gateway.sidecar.process
    assert process is not None
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    outage: list[httpx.Response] = []
    deadline = time.monotonic() + RECOVERY_TIMEOUT_S
    while (answer := ask(gateway)).status_code != 200:
        outage.append(answer)
        assert time.monotonic() < deadline, (
            f"Envoy did not route again: {answer.status_code} {answer.text[:200]}"
        )
        time.sleep(0.2)
    assert gateway.sidecar.restarts == 1 and gateway.sidecar.process is not process
    assert_routed(stack, answer)
    for _ in range(5):  # and keeps routing through the new sidecar
        assert_routed(stack, ask(gateway))
    # While no sidecar ran (the supervisor waits a second before a restart), Envoy answered at
    # once, with the bridge's own status and error body for a router that cannot answer.
    assert outage
    for refused in outage:
        assert refused.status_code == 503, (refused.status_code, refused.text)
        assert refused.headers["content-type"].startswith("application/json")
        assert refused.json()["error"]["type"], refused.text
