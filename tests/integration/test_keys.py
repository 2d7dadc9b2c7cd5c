"""API keys and budgets through both front doors (OpenAI SDK -> the Ingress over Serve's proxy,
and -> real Envoy -> the ext_proc sidecar process), two Ingress replicas, keys and spend on the
management store's Redis: no key 401, an ungranted model 403, MoM never leaves the grants, a
budget near its limit routes to the cheaper model with the header, at its limit 429 (on either
door: the spend is shared), a revoked key 401 on every replica within 1 s, and concurrent
requests on two replicas overspend a budget by at most one request per replica."""

from __future__ import annotations

import concurrent.futures
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
import yaml

from app.cli.gateway import wait_for_port
from app.common.ports import free_port
from app.common.supervisor import SupervisedProcess
from app.config.loader import parse_config
from app.envoy.config import EnvoyPorts, build_envoy_config
from app.envoy.process import EnvoyProcess, write_config
from tests.fakes.configs import keyed
from tests.fakes.upstream import FakeUpstream
from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

APP = "keys"


@dataclass
class Doors:
    ingress: str  # http://127.0.0.1:PORT/keys
    envoy: str

    def both(self) -> list[str]:
        return [self.ingress, self.envoy]


@pytest.fixture(scope="module")
def doors(stack: Stack, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Doors]:
    import ray
    from ray import serve

    from deployments.graph import GraphArgs, build_app

    work = tmp_path_factory.mktemp("keys")
    bridge_port, listener, admin = free_port(), free_port(), free_port()
    with FakeUpstream(name="keys") as upstream:
        document = keyed(upstream.base_url, listener_port=listener)
        document["global"]["services"]["api_keys"]["cache_seconds"] = 0.5  # revocation: within a second
        path = work / "keys.yaml"
        path.write_text(yaml.safe_dump(document))
        store = {"backend": "redis", "url": redis_url}
        serve.run(
            build_app(
                GraphArgs(
                    config_path=str(path),
                    metrics={"enabled": False},
                    decision_model=False,
                    management_store=store,
                    deployments={"Ingress": {"num_replicas": 2}},
                )
            ),
            name=APP,
            route_prefix=f"/{APP}",
        )
        sidecar = SupervisedProcess(
            "sidecar",
            [sys.executable, "-m", "deployments.extproc_sidecar", "--config", str(path)]
            + [
                "--ray-address",
                ray.get_runtime_context().gcs_address,
                "--app",
                APP,
                "--port",
                str(bridge_port),
            ],
            log_path=work / "sidecar.log",
            # The sidecar finds the keys where the Ingress keeps them (as on a cluster node).
            env={**os.environ, "SVC_SR_MANAGEMENT_STORE_URL": redis_url},
        ).start()
        envoy = None
        try:
            wait_for_port("127.0.0.1", bridge_port, 90)
            ports = EnvoyPorts.from_config(
                parse_config(document).config,
                listener_port=listener,
                ext_proc_port=bridge_port,
                admin_port=admin,
                management_port=int(stack.base_url.rsplit(":", 1)[1]),
            )
            envoy_yaml = write_config(
                build_envoy_config(parse_config(document).config, ports), work / "envoy.yaml"
            )
            envoy = EnvoyProcess(envoy_yaml, admin_port=admin, log_path=work / "envoy.log").start()
            envoy.wait_ready()
            yield Doors(f"{stack.base_url}/{APP}", f"http://127.0.0.1:{listener}")
        finally:
            if envoy is not None:
                envoy.stop()
            sidecar.stop()
            serve.delete(APP)


def issue(doors: Doors, **spec: Any) -> dict[str, Any]:
    answer = httpx.post(f"{doors.ingress}/api/v1/keys", json=spec, timeout=30)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def chat(door: str, key: str, model: str = "MoM", max_tokens: int | None = None) -> Any:
    client = openai.OpenAI(base_url=f"{door}/v1", api_key=key, max_retries=0, timeout=60)
    extra = {"max_tokens": max_tokens} if max_tokens else {}
    return client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "hello there"}], **extra
    )


def status(door: str, key: str | None, model: str = "MoM", max_tokens: int | None = None) -> int:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "hello there"}]}
    if max_tokens:
        body["max_tokens"] = max_tokens
    return httpx.post(f"{door}/v1/chat/completions", json=body, headers=headers, timeout=60).status_code


def test_no_key_or_unknown_key_401_and_an_ungranted_model_403_on_both_doors(doors: Doors) -> None:
    cheap_only = issue(doors, name="cheap-only", models=["cheap"])
    for door in doors.both():
        assert status(door, None) == 401, door
        with pytest.raises(openai.AuthenticationError):
            chat(door, "sk-svc-unknown")
        with pytest.raises(openai.PermissionDeniedError) as refused:
            chat(door, cheap_only["key"], "other")
        assert refused.value.body["code"] == "model_not_granted", door
        # MoM's default (pricey) is not granted: the selection stays inside the grants.
        for _ in range(3):
            assert chat(door, cheap_only["key"]).headers["x-selected-model"] == "cheap", door


def test_a_budget_steps_down_then_429_on_both_doors_with_the_spend_shared(doors: Doors) -> None:
    probe = issue(doors, name="probe", models=["cheap", "pricey"])
    cost = chat(doors.ingress, probe["key"]).parse().model_extra["routing_metadata"]["cost"]
    for door in doors.both():
        near = issue(
            doors,
            name=f"near-{door}",
            models=["cheap", "pricey"],
            budget={"usd": cost * 1.5, "period": "day"},
        )
        assert chat(door, near["key"]).headers["x-selected-model"] == "pricey"
        stepped = chat(door, near["key"])
        assert (stepped.headers["x-selected-model"], stepped.headers["x-vsr-budget"]) == (
            "cheap",
            "step_down",
        )
        assert stepped.parse().model_extra["routing_metadata"]["budget"]["to_model"] == "cheap"
    small = issue(doors, name="small", models=["pricey"], budget={"usd": cost / 2, "period": "day"})
    assert chat(doors.ingress, small["key"]).http_response.status_code == 200
    for door in doors.both():  # spent through the Ingress, refused through either door
        with pytest.raises(openai.RateLimitError) as limited:
            chat(door, small["key"])
        assert limited.value.body["code"] == "budget_exceeded", door
        assert limited.value.body["details"]["budget"]["usd"] == pytest.approx(cost / 2)
        assert int(limited.value.response.headers["retry-after"]) >= 1


def test_a_revoked_key_is_refused_by_every_replica_within_a_second(doors: Doors) -> None:
    key = issue(doors, name="soon-revoked", models=["cheap"])
    for door in doors.both():
        assert [status(door, key["key"]) for _ in range(6)] == [200] * 6  # both replicas know it
    revoked = httpx.delete(f"{doors.ingress}/api/v1/keys/{key['id']}", timeout=30)
    assert revoked.status_code == 200
    time.sleep(1.0)
    for door in doors.both():
        assert [status(door, key["key"]) for _ in range(10)] == [401] * 10, door


def test_concurrent_requests_on_two_replicas_overspend_by_at_most_one_request_each(doors: Doors) -> None:
    probe = issue(doors, name="probe-load", models=["pricey"])
    cost = chat(doors.ingress, probe["key"], max_tokens=16).parse().model_extra["routing_metadata"]["cost"]
    budget = cost * 4
    key = issue(doors, name="load", models=["pricey"], budget={"usd": budget, "period": "day"})
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(lambda _: status(doors.ingress, key["key"], "pricey", 16), range(48)))
    assert set(codes) <= {200, 429} and codes.count(200) >= 1
    listed = httpx.get(f"{doors.ingress}/api/v1/keys/{key['id']}", timeout=30).json()
    spent = listed["spend"][0]["spent_usd"]
    assert spent <= budget + 2 * cost * 1.01, (spent, budget, cost, codes.count(200))
