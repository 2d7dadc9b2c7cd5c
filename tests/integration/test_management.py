"""The management API on the real Ray graph (docs/management-api.md; hot reload as docs/design.md describes it).

The session stack's svc-sr app (two Router replicas) serves the management routes on its
Ingress; an activation redeploys the app with only user_config changed, so both Router
replicas reconfigure in place. The module restores the stack's original configuration at
the end (the other integration tests share the stack).
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from click.testing import CliRunner

from app.cli.main import cli
from app.management.audit import AuditEntry, verify_chain
from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

BYPASS = {"x-vsr-cache-control": "bypass"}  # keep the math decision's semantic cache out of it
MATH = "What is the derivative of x^3 + 2x? ({})"


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.base_url, timeout=90) as client:
        yield client
        # Restore the stack's configuration (a new version with the original document).
        current = client.get("/api/v1/config")
        restored = client.put(
            "/api/v1/config", json=stack.routed_config, headers={"If-Match": current.headers["etag"]}
        )
        assert restored.status_code == 200, restored.text
        assert client.get("/api/v1/config/hash").json()["activation_status"] == "active"


def router_generations(calls: int = 16) -> dict[str, dict[str, Any]]:
    """Router replica id -> what it reports serving (handle calls spread over both replicas)."""
    from ray import serve

    handle = serve.get_deployment_handle("Router", "svc-sr")
    out: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + 30
    while len(out) < 2 and time.monotonic() < deadline:
        for report in [handle.generation.remote() for _ in range(calls)]:
            result = report.result(timeout_s=30)
            out[result["replica"]] = result
    return out


def chat(stack: Stack, text: str) -> httpx.Response:
    return httpx.post(
        f"{stack.v1}/chat/completions",
        headers=BYPASS,
        timeout=60,
        json={"model": "MoM", "messages": [{"role": "user", "content": text}]},
    )


def decisions_with(document: dict[str, Any], name: str, **changes: Any) -> list[dict[str, Any]]:
    decisions = copy.deepcopy(document["routing"]["decisions"])
    for decision in decisions:
        if decision["name"] == name:
            decision.update(changes)
    return decisions


def test_ready_and_startup_status(api: httpx.Client) -> None:
    ready = api.get("/ready")
    assert ready.status_code == 200 and ready.json()["phase"] == "complete"
    status = api.get("/startup-status").json()
    names = {m["name"] for m in status["model_deployments"]}
    assert {"Router", "Embedding", "DomainClassifier", "Guard", "ResponseCache", "Observability"} <= names
    assert "Ingress" not in names
    assert all(m["ready"] and m["state"] == "ready" for m in status["model_deployments"])
    assert status["ready_models"] == status["total_models"] == len(names) and status["pending_models"] == []
    conditions = {c["type"]: c for c in api.get("/api/v1/status").json()["conditions"]}
    assert conditions["StartupComplete"]["reason"] == "StartupComplete"
    assert conditions["ConfigConverged"]["status"] == "True"
    runtime = api.get("/api/v1/inventory/model-runtime").json()["deployments"]
    assert {d["name"] for d in runtime} == names


def test_routing_preview_runs_on_a_router_replica(api: httpx.Client) -> None:
    response = api.post(
        "/api/v1/routing/preview",
        json={"model": "MoM", "messages": [{"role": "user", "content": MATH.format("preview")}]},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["decision"] == "math" and body["selected_model"] == "model-a" and body["backend_calls"] == 0


def test_config_read_and_if_match_preconditions(api: httpx.Client) -> None:
    got = api.get("/api/v1/config")
    assert got.status_code == 200
    etag = got.headers["etag"]
    assert etag.startswith('"') and got.headers["x-svc-config-hash"] == etag.strip('"')
    assert int(got.headers["x-svc-config-version"]) >= 1
    assert got.json()["routing"]["decisions"]
    missing = api.patch("/api/v1/config", json={"routing": {"strategy": "confidence"}})
    assert missing.status_code == 428 and missing.json()["error"]["code"] == "PRECONDITION_REQUIRED"
    stale = api.patch(
        "/api/v1/config",
        json={"routing": {"strategy": "confidence"}},
        headers={"If-Match": '"' + "0" * 64 + '"'},
    )
    assert stale.status_code == 412 and stale.headers["etag"] == etag
    assert api.get("/api/v1/config").headers["etag"] == etag  # nothing persisted
    listener = api.patch(
        "/api/v1/config",
        headers={"If-Match": etag},
        json={"listeners": [{"name": "extra", "address": "127.0.0.1", "port": 18999}]},
    )
    assert listener.status_code == 409 and listener.json()["error"]["code"] == "RESTART_REQUIRED"
    assert api.get("/api/v1/config").headers["etag"] == etag


def test_concurrent_patches_one_wins(api: httpx.Client) -> None:
    got = api.get("/api/v1/config")
    etag, document = got.headers["etag"], got.json()
    results: list[int] = []

    def patch(description: str) -> None:
        body = {"routing": {"decisions": decisions_with(document, "code", description=description)}}
        with httpx.Client(base_url=str(api.base_url), timeout=90) as client:
            results.append(client.patch("/api/v1/config", json=body, headers={"If-Match": etag}).status_code)

    threads = [threading.Thread(target=patch, args=(f"writer {i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [200, 412]
    assert api.get("/api/v1/config/hash").json()["activation_status"] == "active"


# Requests the load answers before the activation starts, and again after it ends.
LOAD_AROUND_PATCH = 5


class ChatLoad:
    """A client sending chat requests back to back on a thread until stopped; records the model
    that answered each one and every failure."""

    def __init__(self, stack: Stack) -> None:
        self.client = openai.OpenAI(base_url=stack.v1, api_key="unused", max_retries=0, timeout=60)
        self.stop = threading.Event()
        self.seen: list[str] = []
        self.failures: list[str] = []
        self.worker = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            try:
                response = self.client.chat.completions.with_raw_response.create(
                    model="MoM",
                    messages=[{"role": "user", "content": MATH.format(f"load {i}")}],
                    extra_headers=BYPASS,
                )
                self.seen.append(response.headers["x-selected-model"])
            except Exception as exc:  # any failure counts
                self.failures.append(f"{type(exc).__name__}: {exc}")

    def wait_for(self, answered: int, timeout_s: float = 60.0) -> None:
        """Until `answered` requests (served or failed) have completed."""
        deadline = time.monotonic() + timeout_s
        while len(self.seen) + len(self.failures) < answered and time.monotonic() < deadline:
            time.sleep(0.02)


def math_to_model_b_with_replay(document: dict[str, Any]) -> dict[str, Any]:
    """A patch routing the math decision to model-b, with router replay on (request bodies not captured)."""
    plugins = [
        p for d in document["routing"]["decisions"] if d["name"] == "math" for p in d.get("plugins", [])
    ]
    return {
        "routing": {
            "decisions": decisions_with(
                document,
                "math",
                modelRefs=[{"model": "model-b"}],
                plugins=[
                    *plugins,
                    {"type": "router_replay", "configuration": {"capture_request_body": False}},
                ],
            )
        }
    }


def patch_under_load(
    api: httpx.Client, stack: Stack, patch: dict[str, Any], etag: str
) -> tuple[httpx.Response, ChatLoad, float]:
    """Apply the patch while a client sends requests back to back (a few answered before the
    activation and a few after it); also returns how long the PATCH took, in seconds."""
    load = ChatLoad(stack)
    load.worker.start()
    load.wait_for(LOAD_AROUND_PATCH)
    started = time.monotonic()
    response = api.patch("/api/v1/config", json=patch, headers={"If-Match": etag})
    activation_s = time.monotonic() - started
    load.wait_for(len(load.seen) + len(load.failures) + LOAD_AROUND_PATCH)
    load.stop.set()
    load.worker.join(timeout=60)
    return response, load, activation_s


def assert_new_generation_served_in_place(
    api: httpx.Client, before: dict[str, dict[str, Any]], instance: str, version: int, etag: str
) -> None:
    """Both replicas serve the new generation; no replica was restarted (nor the Ingress)."""
    after = router_generations()
    assert set(after) == set(before)
    assert api.get("/api/v1/status").json()["instance_id"] == instance
    view = api.get("/api/v1/config/hash").json()
    assert view["generated_runtime_hash"] == view["active_runtime_hash"]
    assert {g["hash"] for g in after.values()} == {view["active_runtime_hash"]}
    assert view["activation"]["state"] == "active" and view["config_version"] == version
    read = api.get("/api/v1/config")
    assert int(read.headers["x-svc-config-version"]) == version
    assert read.headers["etag"] == etag


def chats_routed_to_model_b(stack: Stack, count: int) -> list[str]:
    """Send `count` math requests, check each reached model-b; returns their replay ids."""
    upstream_b = stack.upstream_b.request_count
    replay_ids = []
    for i in range(count):
        answer = chat(stack, MATH.format(f"after {i}"))
        assert answer.status_code == 200 and answer.headers["x-selected-model"] == "model-b"
        assert answer.headers["x-vsr-selected-decision"] == "math"
        replay_ids.append(answer.headers["x-vsr-replay-id"])
    assert stack.upstream_b.request_count == upstream_b + count
    assert stack.upstream_b.last_request.headers.get("x-route-source") == "svc-sr"
    return replay_ids


def assert_replays_recorded(api: httpx.Client, replay_ids: list[str], replicas: set[str]) -> None:
    """Replays of requests routed by either replica, in the one shared store (recorded by
    complete(), which runs after the answer was sent)."""
    deadline = time.monotonic() + 10
    while (
        record := api.get(f"/api/v1/observability/replays/{replay_ids[-1]}")
    ).status_code == 404 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert record.status_code == 200
    assert record.json()["decision"] == "math" and record.json()["selected_model"] == "model-b"
    assert "request" not in record.json()  # capture_request_body is off
    deadline = time.monotonic() + 10
    while True:
        page = api.get("/api/v1/observability/replays", params={"decision": "math", "limit": 1000}).json()
        ids = {r["id"] for r in page["records"]}
        if set(replay_ids) <= ids or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert set(replay_ids) <= ids
    assert {r["router_replica"] for r in page["records"]} == replicas  # (load requests included)
    aggregate = api.get("/api/v1/observability/replays/aggregate", params={"decision": "math"}).json()
    assert aggregate["by_model"]["model-b"]["requests"] >= len(replay_ids) and aggregate["total"] >= len(
        replay_ids
    )
    assert api.get("/api/v1/observability/replays/replay-unknown").status_code == 404


def test_routing_change_reaches_both_router_replicas_under_load(api: httpx.Client, stack: Stack) -> None:
    before = router_generations()
    assert len(before) == 2
    instance = api.get("/api/v1/status").json()["instance_id"]  # changes if the Ingress restarts
    got = api.get("/api/v1/config")
    version_before = int(got.headers["x-svc-config-version"])
    document = got.json()
    assert chat(stack, MATH.format("before")).headers["x-selected-model"] == "model-a"

    # a client sending requests back to back while the change activates: none may fail
    response, load, activation_s = patch_under_load(
        api, stack, math_to_model_b_with_replay(document), got.headers["etag"]
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "active" and body["activation_status"] == "active"
    assert body["config_version"] == version_before + 1
    assert load.failures == [], load.failures[:3]
    assert "model-a" in load.seen and load.seen[-1] == "model-b"
    print(f"\nactivation {activation_s:.2f} s; {len(load.seen)} requests during the reload window, 0 failed")

    assert_new_generation_served_in_place(api, before, instance, version_before + 1, body["etag"])
    replay_ids = chats_routed_to_model_b(stack, 12)
    assert_replays_recorded(api, replay_ids, set(before))


def serving_replicas(deployment: str) -> set[str]:
    from ray.serve.context import _get_global_client

    details = _get_global_client().get_serve_details()["applications"]["svc-sr"]["deployments"][deployment]
    return {r["replica_id"] for r in details["replicas"] if r["state"] == "RUNNING"}


def test_a_model_deployment_change_rolls_out_a_new_version(api: httpx.Client, stack: Stack) -> None:
    """A setting the DecisionModel is built with: a new deployment version replaces its replica
    while the old one keeps answering; the Routers and the Ingress are only reconfigured."""
    models_before, routers_before = serving_replicas("DecisionModel"), set(router_generations())
    instance = api.get("/api/v1/status").json()["instance_id"]
    stop = threading.Event()
    codes: list[int] = []
    question = {
        "state": "I was charged twice, please refund one payment.",
        "questions": {"refund": {"type": "noul", "instructions": "Does the customer ask for money back?"}},
    }

    def ask() -> None:
        while not stop.is_set():
            codes.append(httpx.post(f"{stack.base_url}/v1/decisions", json=question, timeout=60).status_code)

    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    etag = api.get("/api/v1/config").headers["etag"]
    response = api.patch(
        "/api/v1/config",
        json={"global": {"model_catalog": {"signal_timeout_ms": 4321}}},
        headers={"If-Match": etag},
    )
    stop.set()
    worker.join(timeout=60)
    assert response.status_code == 200 and response.json()["status"] == "active", response.text
    models_after = serving_replicas("DecisionModel")
    assert models_after and models_after.isdisjoint(models_before)  # rolled out
    assert set(router_generations()) == routers_before  # reconfigured in place
    assert api.get("/api/v1/status").json()["instance_id"] == instance
    assert codes and set(codes) == {200}, codes


def test_invalid_candidate_is_rejected_and_the_previous_generation_serves(
    api: httpx.Client, stack: Stack
) -> None:
    got = api.get("/api/v1/config")
    etag, document = got.headers["etag"], got.json()
    bad = {"routing": {"decisions": decisions_with(document, "math", modelRefs=[{"model": "model-missing"}])}}
    response = api.patch("/api/v1/config", json=bad, headers={"If-Match": etag})
    assert response.status_code == 400 and response.json()["error"]["code"] == "INVALID_CONFIG"
    reasons = response.json()["error"]["details"]["reasons"]
    assert reasons and reasons[0]["stage"] in ("parse", "validate")
    assert api.get("/api/v1/config").headers["etag"] == etag  # nothing persisted
    view = api.get("/api/v1/config/hash").json()
    assert view["activation_status"] == "active" and view["last_rejection"]["persisted"] is False
    assert chat(stack, MATH.format("after rejection")).headers["x-selected-model"] == "model-b"


def test_an_explicit_model_an_activation_adds_answers_at_the_front_door(
    api: httpx.Client, stack: Stack
) -> None:
    """The Ingress routes explicit models itself (app/pipeline/direct_route.py), on the config
    each activation hands it: a model added by a PATCH answers as soon as the PATCH returns."""

    def explicit(model: str) -> httpx.Response:
        body = {"model": model, "messages": [{"role": "user", "content": "hello"}]}
        return httpx.post(f"{stack.v1}/chat/completions", headers=BYPASS, timeout=60, json=body)

    missing = explicit("model-added")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    got = api.get("/api/v1/config")
    models = copy.deepcopy(got.json()["providers"]["models"])
    added = copy.deepcopy(next(m for m in models if m["name"] == "model-b")) | {"name": "model-added"}
    response = api.patch(
        "/api/v1/config",
        json={"providers": {"models": [*models, added]}},
        headers={"If-Match": got.headers["etag"]},
    )
    assert response.status_code == 200 and response.json()["activation_status"] == "active", response.text
    answered = explicit("model-added")
    assert answered.status_code == 200, answered.text
    assert answered.headers["x-selected-model"] == "model-added"
    assert answered.json()["choices"][0]["message"]["content"]


def test_rollback_reactivates_a_recorded_version(api: httpx.Client, stack: Stack) -> None:
    versions = api.get("/api/v1/config/versions").json()["versions"]
    active = next(v for v in versions if v["active"])
    target = next(
        v
        for v in versions
        if v["config_version"] is not None
        and v["config_version"] < active["config_version"]
        and v["result"] == "active"
        and v["source"] != "api.patch"
    )  # the version the stack started with
    etag = api.get("/api/v1/config").headers["etag"]
    response = api.post(
        "/api/v1/config/rollback",
        json={"config_version": target["config_version"]},
        headers={"If-Match": etag},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "active" and body["rollback_of"] == target["version"]
    assert body["config_version"] == active["config_version"] + 1
    assert chat(stack, MATH.format("after rollback")).headers["x-selected-model"] == "model-a"
    newest = api.get("/api/v1/config/versions").json()["versions"][0]
    assert newest["active"] and newest["rollback_of"] == target["version"] and newest["source"] == "rollback"
    assert {g["hash"] for g in router_generations().values()} == {
        api.get("/api/v1/config/hash").json()["active_runtime_hash"]
    }


def test_cli_status_and_config_commands(api: httpx.Client, stack: Stack, tmp_path: Path) -> None:
    runner = CliRunner()
    endpoint = ["--endpoint", stack.base_url]
    status = runner.invoke(cli, ["status", *endpoint])
    assert status.exit_code == 0, status.output
    report = json.loads(status.stdout)
    assert report["ready"]["phase"] == "complete" and report["active_config"]["activation_status"] == "active"

    saved = tmp_path / "config.yaml"
    got = runner.invoke(cli, ["config", "get", "-o", str(saved), *endpoint])
    assert got.exit_code == 0, got.output
    assert saved.exists()
    before = int(api.get("/api/v1/config").headers["x-svc-config-version"])
    patch = tmp_path / "patch.json"
    patch.write_text(json.dumps({"routing": {"strategy": "confidence"}}))
    applied = runner.invoke(cli, ["config", "apply", "--config", str(patch), "--mode", "merge", *endpoint])
    assert applied.exit_code == 0, applied.output
    assert json.loads(applied.stdout)["status"] == "active"
    assert api.get("/api/v1/config").json()["routing"]["strategy"] == "confidence"

    listed = runner.invoke(cli, ["config", "versions", "--json", *endpoint])
    assert listed.exit_code == 0, listed.output
    versions = json.loads(listed.stdout)["versions"]
    assert versions[0]["active"] and versions[0]["config_version"] == before + 1
    rolled = runner.invoke(cli, ["config", "rollback", str(before), *endpoint])
    assert rolled.exit_code == 0, rolled.output
    assert json.loads(rolled.stdout)["status"] == "active"
    assert api.get("/api/v1/config").json()["routing"].get("strategy", "priority") == "priority"
    replaced = runner.invoke(
        cli, ["config", "apply", "--config", str(saved), *endpoint]
    )  # PUT of what `get` wrote
    assert replaced.exit_code == 0, replaced.output


def test_audit_chain_covers_the_changes(api: httpx.Client) -> None:
    page = api.get("/api/v1/observability/audit", params={"limit": 1000}).json()
    entries = [AuditEntry.model_validate(e) for e in page["entries"]]
    verification = verify_chain(entries)
    assert verification.ok, verification
    actions = {e.action for e in entries}
    assert {"config.activate", "config.reject", "config.patch", "config.rollback", "config.put"} <= actions
    activations = [e for e in entries if e.action == "config.activate"]
    assert all(e.config and e.config["result"] == "active" and e.method is None for e in activations)
    rejected = [e for e in entries if e.action == "config.patch" and e.status in (400, 409, 412, 428)]
    assert {e.status for e in rejected} >= {400, 409, 412, 428}


def test_an_app_deployed_from_a_serve_config_reloads_in_place(stack: Stack) -> None:
    """`serve deploy` (declarative) apps are updated through the controller's config with
    user_config overrides: the same replicas take the change, nothing restarts."""
    from ray import serve
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    name = "decl-mgmt"
    client = _get_global_client()
    client.deploy_apps(
        ServeDeploySchema.model_validate(
            {
                "applications": [
                    {
                        "name": name,
                        "route_prefix": f"/{name}",
                        "import_path": "deployments.graph:build_app",
                        "args": {
                            "config_path": str(stack.config_path),
                            "metrics": {"enabled": False},
                            "decision_model": False,
                        },
                        "deployments": [{"name": "Router", "num_replicas": 1}],
                    }
                ]
            }
        )
    )
    try:
        deadline = time.monotonic() + 240
        while str(getattr(serve.status().applications.get(name), "status", "")).split(".")[-1] != "RUNNING":
            assert time.monotonic() < deadline, serve.status().applications.get(name)
            time.sleep(0.5)
        with httpx.Client(base_url=f"{stack.base_url}/{name}", timeout=90) as mgmt:
            while mgmt.get("/ready").status_code != 200:
                assert time.monotonic() < deadline
                time.sleep(0.5)
            instance = mgmt.get("/api/v1/status").json()["instance_id"]
            got = mgmt.get("/api/v1/config")
            patch = {
                "routing": {"decisions": decisions_with(got.json(), "math", modelRefs=[{"model": "model-b"}])}
            }
            response = mgmt.patch("/api/v1/config", json=patch, headers={"If-Match": got.headers["etag"]})
            assert response.status_code == 200 and response.json()["status"] == "active", response.text
            answer = httpx.post(
                f"{stack.base_url}/{name}/v1/chat/completions",
                headers=BYPASS,
                timeout=60,
                json={"model": "MoM", "messages": [{"role": "user", "content": MATH.format("decl")}]},
            )
            assert answer.status_code == 200 and answer.headers["x-selected-model"] == "model-b"
            assert mgmt.get("/api/v1/status").json()["instance_id"] == instance  # the Ingress kept running
        deployed = client.get_serve_details()["applications"][name]["deployed_app_config"]
        overrides = {d["name"]: d for d in deployed["deployments"]}
        assert overrides["Router"]["num_replicas"] == 1 and "user_config" in overrides["Router"]
    finally:
        serve.delete(name)
