"""deployments/versioning.py without a Ray cluster (it needs `ray.serve` to bind a graph):
stable deployment versions for hot reload, and the Serve builder's signature. The
activation logic itself is tested without Ray in test_management_rollout.py."""

from __future__ import annotations

from typing import Any

from ray import serve

from deployments.versioning import graph_versions, stamp_versions


@serve.deployment
class Leaf:
    def __init__(self, setting: dict[str, Any] | None = None) -> None:
        self.setting = setting


@serve.deployment
class Root:
    def __init__(self, leaf: Any, args: dict[str, Any]) -> None:
        self.leaf = leaf


def graph(leaf_setting: dict[str, Any], user_config: dict[str, Any]) -> Any:
    leaf = Leaf.options(user_config=user_config).bind(leaf_setting)
    return stamp_versions(Root.bind(leaf, {"config_path": "x.yaml"}))


def test_versions_are_stable_and_follow_constructor_arguments_only() -> None:
    first = graph_versions(graph({"model": "m1"}, {"config": 1}))
    assert set(first) == {"Root", "Leaf"} and all(first.values())
    assert graph_versions(graph({"model": "m1"}, {"config": 2})) == first  # user_config: reconfigure only
    changed = graph_versions(graph({"model": "m2"}, {"config": 1}))
    assert changed["Leaf"] != first["Leaf"] and changed["Root"] == first["Root"]


def test_the_serve_builder_takes_exactly_one_parameter() -> None:
    """`serve deploy` refuses builders with more parameters; activations use build_graph."""
    import inspect

    from deployments.graph import build_app, build_graph

    assert len(inspect.signature(build_app).parameters) == 1
    assert "document" in inspect.signature(build_graph).parameters
