"""The order a local graph is stopped in (deployments/shutdown.py): every deployment after every
deployment that calls it, read from the controller's topology."""

from __future__ import annotations

from typing import Any

import pytest

from deployments.shutdown import NoTopology, app_calls, replica_actor_names, stop_levels

# svc-sr's graph as the controller reports it (deployments/graph.py's bindings).
SVC_SR_CALLS = {
    "Ingress": [
        "Router",
        "DomainClassifier",
        "Guard",
        "Observability",
        "DecisionModel",
        "ResponseCache",
        "Storage",
    ],
    "Router": ["Observability", "Storage"],
    "DecisionModel": ["Embedding"],
    "DomainClassifier": ["Embedding"],
    "Guard": ["Embedding"],
    "ResponseCache": ["Observability"],
    "Embedding": [],
    "Observability": [],
    "Storage": [],
}


def test_callers_stop_before_what_they_call() -> None:
    levels = stop_levels(SVC_SR_CALLS)
    position = {name: n for n, level in enumerate(levels) for name in level}
    assert levels[0] == ["Ingress"]
    assert set(position) == set(SVC_SR_CALLS)
    for caller, callees in SVC_SR_CALLS.items():
        for callee in callees:
            assert position[caller] < position[callee], (caller, callee, levels)
    # As few levels as the order allows: each level waits for its slowest replica.
    assert len(levels) == 3


def test_a_cycle_is_stopped_last_instead_of_never() -> None:
    levels = stop_levels({"A": ["B"], "B": ["C"], "C": ["B"]})
    assert levels == [["A"], ["B", "C"]]


def test_a_deployment_only_called_still_stops() -> None:
    assert stop_levels({"A": ["Z"]}) == [["A"], ["Z"]]


def details() -> dict[str, Any]:
    return {
        "applications": {
            "svc-sr": {
                "deployments": {
                    "Ingress": {"replicas": [{"actor_name": "SERVE_REPLICA::svc-sr#Ingress#a"}, {}]},
                    "Router": {"replicas": [{"actor_name": "SERVE_REPLICA::svc-sr#Router#b"}]},
                    "Embedding": {"replicas": []},
                },
                "deployment_topology": {
                    "nodes": {
                        "Ingress": {
                            "outbound_deployments": [
                                {"name": "Router", "app_name": "svc-sr"},
                                {"name": "LLMServer", "app_name": "llm"},  # another application
                            ]
                        },
                        "Router": {"outbound_deployments": [{"name": "Embedding", "app_name": "svc-sr"}]},
                    }
                },
            }
        }
    }


def test_calls_come_from_the_topology_and_stay_inside_the_application() -> None:
    calls = app_calls(details(), "svc-sr")
    assert calls == {"Ingress": ["Router"], "Router": ["Embedding"], "Embedding": []}
    assert stop_levels(calls) == [["Ingress"], ["Router"], ["Embedding"]]


def test_an_application_without_a_topology_is_not_guessed() -> None:
    """Stopping in an unknown order could fail requests in flight: svc-sr falls back to
    serve.shutdown() (app/cli/serve.py)."""
    bare = details()
    del bare["applications"]["svc-sr"]["deployment_topology"]
    with pytest.raises(NoTopology):
        app_calls(bare, "svc-sr")
    assert app_calls(bare, "absent") == {}


def test_replica_actor_names_skip_replicas_without_one() -> None:
    assert replica_actor_names(details(), "svc-sr", "Ingress") == ["SERVE_REPLICA::svc-sr#Ingress#a"]
    assert replica_actor_names(details(), "svc-sr", "Embedding") == []
    assert replica_actor_names(details(), "svc-sr", "Absent") == []
