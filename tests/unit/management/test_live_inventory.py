"""Live inventory (docs/management-api.md): the prepared bindings of every binding name
with the facts a RuntimeFactsProvider reports (readiness, replica starts and restarts, the
device of the process that hosts each deployment), the served model cards, and
system.gpu_available true exactly when an active prepared binding runs on a local GPU."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from app.config.model_deployments import BINDINGS
from app.management import StartupTracker
from app.management.graph_schemas import GRAPH_MODELS, TYPED_BINDINGS, describe
from app.management.live_inventory import DeploymentFacts, ReplicaStartCounter, ServeFacts, device_of
from tests.unit.management.test_management_support import Harness, base_document


class FakeFacts:
    def __init__(self, facts: dict[str, DeploymentFacts]) -> None:
        self.value = facts

    async def facts(self) -> Mapping[str, DeploymentFacts]:
        return self.value


def counted(deployment: str, observations: list[list[str]], device: str = "cpu") -> DeploymentFacts:
    counter = ReplicaStartCounter()
    for ids in observations:
        counter.observe(deployment, ids)
    return DeploymentFacts(
        deployment=deployment,
        ready=True,
        replicas=len(observations[-1]),
        replica_starts=counter.starts(deployment),
        restarts=counter.restarts(deployment),
        devices=[device],
    )


def test_replica_starts_count_replacements_not_scale_ups():
    counter = ReplicaStartCounter()
    for ids in (["a"], ["a", "b"], ["a", "b"], ["a", "c"], ["d", "c"]):
        counter.observe("Guard", ids)
    assert (counter.starts("Guard"), counter.restarts("Guard")) == (4, 2)  # b->c... a->d replaced
    assert (counter.starts("Other"), counter.restarts("Other")) == (0, 0)


def test_device_of_reads_the_hosting_process_report():
    assert device_of({"device": "cuda:0"}) == "cuda:0"
    assert device_of({"model": {"device": "cpu"}}) == "cpu"
    assert device_of({"device": "mps"}) == "cpu"  # not a CUDA device: no GPU execution claimed
    assert device_of({"loaded": False}) is None and device_of(None) is None


def test_every_spec_binding_name_is_described_once():
    assert set(BINDINGS) <= set(GRAPH_MODELS)
    assert describe("fact_check_classifier").model == "fact-check-head"
    assert describe("fact_check_classifier").engine.startswith("head+")  # reads the encoder's vector
    assert describe("feedback_detector").engine == "rules"
    hallucination = describe("hallucination_detector")
    assert (hallucination.model, hallucination.deployment) == ("minilm-embedding", "Embedding")
    assert describe("rag.reranker").model == describe("reranker").model
    assert "rag.reranker" not in TYPED_BINDINGS and "reranker" in TYPED_BINDINGS


async def inventory(h: Harness) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]], bool]:
    async with h.client() as c:
        body = (await c.get("/api/v1/inventory/models")).json()
        runtime = (await c.get("/api/v1/inventory/model-runtime")).json()["deployments"]
        info = (await c.get("/info/models")).json()
    return body["models"], body["system"], runtime, info["system"]["gpu_available"]


@pytest.mark.slow
async def test_inventory_reports_live_restarts_devices_and_cards():
    tracker = StartupTracker()
    tracker.register("Guard", artifact="jailbreak-guard", process="ray_serve")
    tracker.seal()
    tracker.mark_ready("Guard")
    facts = {
        "Guard": counted("Guard", [["g1"], ["g2"]]),
        "Embedding": counted("Embedding", [["e1", "e2"]], device="cuda:0"),
    }
    h = Harness(startup=tracker, runtime_facts=FakeFacts(facts))
    models, system, runtime, legacy_gpu = await inventory(h)
    by_binding = {m["binding"]: m for m in models}
    assert set(BINDINGS) == set(by_binding)  # every binding name, `reranker` listed once
    guard = by_binding["prompt_guard"]
    assert (guard["device"], guard["restarts"], guard["ready"]) == ("cpu", 1, True)
    assert guard["card"]["path"] == "docs/model-cards/jailbreak-guard.md" and guard["card"]["summary"]
    assert by_binding["embedding"]["device"] == "cuda:0" and by_binding["embedding"]["restarts"] == 0
    assert by_binding["fact_check_classifier"]["card"]["path"] == "docs/model-cards/fact-check.md"
    assert system["gpu_available"] is True and legacy_gpu is True  # Embedding runs on cuda:0
    by_name = {d["name"]: d for d in runtime}
    assert by_name["Guard"]["restarts"] == 1 and by_name["Guard"]["replica_starts"] == 2
    assert by_name["Guard"]["process"] == "ray_serve" and by_name["Guard"]["state"] == "ready"
    cards = [c["path"] for c in by_name["Guard"]["model_cards"]]
    assert cards == ["docs/model-cards/jailbreak-guard.md", "docs/model-cards/pii-detector.md"]
    assert by_name["Embedding"]["devices"] == ["cuda:0"] and by_name["Embedding"]["replicas"] == 2


@pytest.mark.slow
async def test_gpu_available_only_for_local_gpu_execution():
    cpu_only = Harness(runtime_facts=FakeFacts({"Embedding": counted("Embedding", [["e"]])}))
    assert (await inventory(cpu_only))[1]["gpu_available"] is False
    doc = base_document()
    doc["model_deployments"] = {
        "remote": {"artifact": "jailbreak-guard", "endpoint": "http://10.0.0.9:8080"},
        "local": {"artifact": "domain-classifier", "device": "cuda:1"},
    }
    doc.setdefault("global", {})["model_catalog"] = {"modules": {"prompt_guard": {"deployment": "remote"}}}
    attached = Harness(doc)
    models, system, _, _ = await inventory(attached)
    guard = next(m for m in models if m["binding"] == "prompt_guard")
    assert (guard["provider"], guard["deployment"], guard["local"]) == ("model_runtime", "remote", False)
    assert system["gpu_available"] is False  # a GPU elsewhere is not local execution
    doc["global"]["model_catalog"]["modules"]["classifier"] = {"domain": {"deployment": "local"}}
    models, system, _, _ = await inventory(Harness(doc))
    domain = next(m for m in models if m["binding"] == "domain_classifier")
    assert domain["device"] == "cuda:1" and system["gpu_available"] is True


async def test_serve_facts_count_replica_starts_from_serve_details():
    """The Ray graph's provider over plain calls: Serve's replica list, the deployment's info()."""
    replicas = [["r1"], ["r1"], ["r2"]]  # r1 replaced by r2 (a crash or failed health check)
    infos: list[str] = []

    def details() -> dict[str, Any]:
        ids = replicas.pop(0) if len(replicas) > 1 else replicas[0]
        return {
            "deployments": {
                "Embedding": {
                    "status": "HEALTHY",
                    "replicas": [{"replica_id": i, "state": "RUNNING"} for i in ids]
                    + [{"replica_id": "gone", "state": "STOPPING"}],
                },
                "Ingress": {"status": "HEALTHY", "replicas": [{"replica_id": "i", "state": "RUNNING"}]},
            }
        }

    def info(name: str) -> dict[str, Any]:
        infos.append(name)
        return {"model": "minilm-embedding", "device": "cuda:0"}

    facts = ServeFacts(details, info, exclude=frozenset({"Ingress"}))
    facts.sample()
    facts.sample()
    final = (await facts.facts())["Embedding"]
    assert (final.replica_starts, final.restarts, final.replicas, final.ready) == (2, 1, 1, True)
    assert final.devices == ["cuda:0"] and infos == ["Embedding"]  # asked once
    assert set(await facts.facts()) == {"Embedding"}
