"""Faults survived (issue 18), on a Serve application of their own ("faults", route prefix
/faults) beside the session's: replicas killed here never touch the stack other tests use,
and the application is deleted when the module ends.

Its shape is the cluster's (cluster/serve-config.yaml): two Ingress replicas, one Router,
Guard, DomainClassifier and Embedding replica each, and every request evaluates domain, PII,
jailbreak and embedding signals with the Router calling the Embedding deployment, so each of
those deployments is on every request's path. Clients are plain HTTP with no retries
(tests/fakes/load.py): a failure is counted as a client saw it.

- one of two Ingress replicas killed under load: no request sent after it died fails; HAProxy
  re-sends those in flight on it, and what still fails gets either the spec's JSON error body
  (never Serve's plain-text 500) or, with no HTTP answer at all, its connection closed (a
  keep-alive connection HAProxy gives up on, a stream whose head the dead replica had sent);
- the only Router, Guard, DomainClassifier or Embedding replica killed under load: no request
  fails (the Ingress re-sends route(), the Router re-sends its signal calls; Serve routes them
  to the replacement);
- an upstream LLM process killed mid-stream: the client's stream ends with an error event, and
  the failure is in the metrics and the replay record (error, cost).

Serve replaces each killed replica before its test ends (the deployment is HEALTHY again with
its replica count).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from app.common.ports import free_port
from deployments.error_page import PAGE_NAME, error_page
from tests.fakes.configs import any_of, learned_signals, priced_model
from tests.fakes.load import ChatLoad, Outcome
from tests.fakes.processes import wait_http_ok
from tests.fakes.upstream import FakeUpstream
from tests.integration.conftest import Stack
from tests.integration.test_metrics import eventually, scrape, value

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
APP = "faults"
PREFIX = "/faults"
RECOVERY_TIMEOUT_S = 240.0  # a replacement replica: a Ray worker, the models loaded, Serve's health check
UPSTREAM_DELAY_S = 0.15  # every answer takes this long, so requests are in flight at a kill


@dataclass
class Faults:
    url: str  # http://127.0.0.1:<port>/faults
    metrics_url: str
    upstream: FakeUpstream
    stream_port: int  # where the killable upstream process listens (model fault-stream)

    @property
    def chat_url(self) -> str:
        return f"{self.url}/v1/chat/completions"


def fault_config(upstream: FakeUpstream, stream_port: int) -> dict[str, Any]:
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "fault-a"},
            "models": [
                priced_model("fault-a", upstream.host_url),
                priced_model("fault-stream", f"http://127.0.0.1:{stream_port}"),
            ],
        },
        "routing": {
            "signals": {
                "keywords": [{"name": "stream_words", "operator": "OR", "keywords": ["streamkill"]}],
                **learned_signals("code_help", 0.5),
            },
            "decisions": [
                {
                    "name": "streamkill",
                    "priority": 200,
                    "rules": any_of(("keyword", "stream_words")),
                    "modelRefs": [{"model": "fault-stream"}],
                    "plugins": [{"type": "router_replay", "configuration": {"capture_request_body": False}}],
                },
                {
                    # Every request evaluates these families: each model deployment is on its path.
                    "name": "signals",
                    "priority": 100,
                    "rules": any_of(
                        ("domain", "math"),
                        ("pii", "any_pii"),
                        ("jailbreak", "attack"),
                        ("embedding", "code_help"),
                    ),
                    "modelRefs": [{"model": "fault-a"}],
                },
            ],
        },
        "global": {"stores": {"response_cache": {"enabled": False}}},
    }


@pytest.fixture(scope="module")
def faults(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Faults]:
    from ray import serve

    from deployments.graph import GraphArgs, build_app

    work = tmp_path_factory.mktemp("faults")
    with FakeUpstream(name="faults", delay_s=UPSTREAM_DELAY_S) as upstream:
        stream_port, metrics_port = free_port(), free_port()
        config_path = work / "faults.yaml"
        config_path.write_text(yaml.safe_dump(fault_config(upstream, stream_port)))
        serve.run(
            build_app(
                GraphArgs(
                    config_path=str(config_path),
                    metrics={"port": metrics_port},
                    router_local_encoder=False,  # the Router calls the Embedding deployment
                    router_local_heads=False,  # and the DomainClassifier and Guard for every head
                    decision_model=False,
                    deployments={"Ingress": {"num_replicas": 2}},
                )
            ),
            name=APP,
            route_prefix=PREFIX,
        )
        try:
            wait_http_ok(f"{stack.base_url}{PREFIX}/health", 120)
            yield Faults(
                f"{stack.base_url}{PREFIX}", f"http://127.0.0.1:{metrics_port}/metrics", upstream, stream_port
            )
        finally:
            serve.delete(APP)


# ----------------------------------------------------------------------------- helpers


def replica_actors(deployment: str) -> list[str]:
    import ray

    prefix = f"SERVE_REPLICA::{APP}#{deployment}#"
    return sorted(
        a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(prefix)
    )


def kill_replica(deployment: str) -> float:
    """ray.kill one replica of `deployment` (no restart: Serve starts a replacement); returns
    when Ray reports the actor dead (time.monotonic())."""
    import ray
    from ray.exceptions import RayActorError

    handle = ray.get_actor(replica_actors(deployment)[0], namespace="serve")
    ray.kill(handle, no_restart=True)
    with pytest.raises(RayActorError):  # answers only once the actor is dead
        ray.get(handle.__ray_ready__.remote(), timeout=30)
    return time.monotonic()


def wait_replaced(deployment: str, replicas: int) -> None:
    """Until Serve reports `deployment` HEALTHY with `replicas` running replicas."""
    from ray import serve

    deadline = time.monotonic() + RECOVERY_TIMEOUT_S
    while True:
        status = serve.status().applications[APP].deployments[deployment]
        states = dict(status.replica_states)
        if status.status == "HEALTHY" and states == {"RUNNING": replicas}:
            return
        assert time.monotonic() < deadline, f"{deployment} not replaced: {status.status} {states}"
        time.sleep(0.5)


def prompt(i: int) -> str:
    return f"Request {i}: tell me about topic {i % 13}"


def describe(outcomes: list[Outcome]) -> str:
    return "\n".join(o.describe() for o in outcomes)


# ----------------------------------------------------------------------------- tests


def test_haproxy_answers_for_itself_with_the_spec_error_body(faults: Faults) -> None:
    """What HAProxy answers when no Ingress replica could (none up, every retry used, a replica
    died under a body too big to re-send): the page the Ingress replicas put in place of
    Serve's plain-text 500 (deployments/error_page.py; tests/unit/deployments/test_error_page.py shows
    HAProxy accepts it)."""
    pages = list(Path(os.environ["RAY_SERVE_HAPROXY_CONFIG_FILE_LOC"]).parent.glob(f"*/{PAGE_NAME}"))
    assert pages and all(page.read_bytes() == error_page() for page in pages)


BALANCER_UPDATE_S = 1.0  # the controller's 0.5 s loop and HAProxy's reload, with margin


def test_killing_one_of_two_ingress_replicas_fails_only_its_in_flight_requests(faults: Faults) -> None:
    assert len(replica_actors("Ingress")) == 2
    # Clients that keep their connection and clients that open one per request (HAProxy may treat
    # a request on a reused client connection unlike the first one on a new connection).
    loads = [
        ChatLoad(faults.chat_url, workers=4, stream_workers=2, prompt=prompt).start(),
        ChatLoad(faults.chat_url, workers=3, prompt=prompt, keep_alive=False).start(),
    ]
    try:
        loads[0].wait_for(40)
        dead_at = kill_replica("Ingress")
        for load in loads:  # traffic after the kill, on the surviving replica
            load.wait_for(load.answered() + 30)
        wait_replaced("Ingress", 2)
        for load in loads:  # and once the replacement serves too
            load.wait_for(load.answered() + 10)
    finally:
        for load in loads:
            load.stop()
    failures = [o for load in loads for o in load.failures()]
    # HAProxy learns of a crash from the Serve controller, whose loop runs every 0.5 s here
    # (deployments/serve_env.py), then reloads its server list: a request sent inside that
    # window may still be handed to the dead replica, like one in flight at the kill (the
    # bound below counts it). One sent after it must not fail.
    late = [o for o in failures if o.sent_at >= dead_at + BALANCER_UPDATE_S]
    assert not late, f"requests sent after the balancer's update failed:\n{describe(late)}"
    for outcome in failures:
        if outcome.error is not None:
            # The connection ended before a whole answer: HAProxy closed the client's connection
            # (no status), or the dying replica had sent the head (of a stream, or of a body it
            # could not finish). Nothing could carry an error body; the bound below counts these.
            continue
        error = outcome.error_body()  # never Serve's plain-text 500
        assert error is not None, f"not the spec's JSON error body: {outcome.describe()}"
        assert outcome.status >= 500, outcome.describe()
    # HAProxy re-sends what was in flight on the dead replica (deployments/serve_env.py). Without
    # that, 4 and 5 requests per kill failed here; with it none in 5 of 7 kills and one in 2.
    # What can fail is at most what was in flight at the kill: one request per client.
    clients = sum(load.concurrency for load in loads)
    assert len(failures) <= clients, describe(failures)
    assert sum(load.succeeded() for load in loads) >= 100


@pytest.mark.parametrize("deployment", ["Router", "Guard", "DomainClassifier", "Embedding"])
def test_killing_the_only_replica_of_a_routing_deployment_fails_no_request(
    faults: Faults, deployment: str
) -> None:
    assert len(replica_actors(deployment)) == 1
    load = ChatLoad(faults.chat_url, workers=4, stream_workers=1, prompt=prompt).start()
    try:
        load.wait_for(20)
        kill_replica(deployment)
        wait_replaced(deployment, 1)
        load.wait_for(load.answered() + 20)  # served by the replacement
    finally:
        load.stop()
    assert not load.failures(), describe(load.failures())
    assert load.succeeded() >= 40


def test_an_upstream_killed_mid_stream_ends_the_stream_with_an_error_event(faults: Faults) -> None:
    upstream = subprocess.Popen(
        [
            sys.executable, "-m", "tests.fakes.upstream",
            "--port", str(faults.stream_port), "--name", "killme", "--chunk-delay", "0.3",
        ],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_http_ok(f"http://127.0.0.1:{faults.stream_port}/v1/models", 30)
        before = scrape(faults.metrics_url)
        client = openai.OpenAI(base_url=f"{faults.url}/v1", api_key="unused", max_retries=0)
        question = "streamkill: tell me a long story about seven brave little robots crossing a desert"
        raw = client.chat.completions.with_raw_response.create(
            model="MoM", stream=True, messages=[{"role": "user", "content": question}]
        )
        assert raw.headers["x-selected-model"] == "fault-stream"
        replay_id = raw.headers["x-vsr-replay-id"]
        received = []
        with pytest.raises(openai.APIError) as broken:
            for chunk in raw.parse():
                if chunk.choices and chunk.choices[0].delta.content:
                    received.append(chunk.choices[0].delta.content)
                    if len(received) == 2:
                        os.kill(upstream.pid, signal.SIGKILL)  # the upstream LLM process dies mid-answer
        assert received and "robots crossing a desert" not in "".join(received)
        assert broken.value.body["type"] == "upstream_error"
        assert "broke off" in broken.value.message
    finally:
        upstream.kill()
        upstream.wait(timeout=10)

    def recorded() -> None:
        after = scrape(faults.metrics_url)

        def d(name: str, **labels: str) -> float:
            return value(after, name, **labels) - value(before, name, **labels)

        assert d("llm_model_requests_total", model="fault-stream") == 1
        assert d("llm_request_errors_total", model="fault-stream", reason="upstream_5xx") == 1
        assert d("llm_model_cost_total", model="fault-stream", currency="USD") == 0  # no usage came

    eventually(recorded)
    deadline = time.monotonic() + 20
    while (
        record := httpx.get(f"{faults.url}/api/v1/observability/replays/{replay_id}", timeout=10)
    ).status_code == 404:
        assert time.monotonic() < deadline, "no replay record"
        time.sleep(0.2)
    assert record.status_code == 200, record.text
    replay = record.json()
    assert replay["error"] == "upstream_5xx" and replay["response_path"] == "error", replay
    assert replay["stream"] is True and replay["served_model"] == "fault-stream"
    assert replay["cost"] == {"amount": 0.0, "currency": "USD"} and replay["usage"] == {}
