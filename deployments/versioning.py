"""Stable Serve deployment versions for the graph.

`serve.run` gives every deployment a random code version unless one is set, so running
the same graph again restarts every replica. The management API's activation redeploys
the graph with a new configuration document (deployments/activation.py) and needs the
opposite: a deployment whose constructor arguments did not change keeps its replicas
(Serve calls `reconfigure()` on them when only `user_config` changed), and one whose
arguments changed gets a new version that Serve rolls out while the old replicas serve.

The version of a deployment is a digest of: the svc-sr source and packaged artifacts
(`app/`, `deployments/`: new code or a new model file restarts everything), the
deployment's name and class, and its bound arguments (handles to other deployments
count by name). Serve itself compares `ray_actor_options`, placement and `user_config`.

A graph deployed from a Serve config (`serve deploy`) gets one code version from Serve
instead; these versions only matter to `serve.run` deploys.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from ray.serve import Application

from deployments.ray_compat import bound_deployment, set_code_version

_ROOTS = ("app", "deployments")
_SKIP_DIRS = frozenset({"__pycache__"})


@lru_cache(maxsize=1)
def code_digest() -> str:
    """Digest of every file of the `app` and `deployments` packages (not bytecode caches)."""
    import app
    import deployments

    digest = hashlib.sha256()
    for package in (app, deployments):
        root = Path(str(package.__file__)).resolve().parent
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            rel = path.relative_to(root.parent)
            if _SKIP_DIRS.intersection(rel.parts) or path.suffix in (".pyc", ".pyo"):
                continue
            digest.update(str(rel).encode())
            digest.update(b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:20]


def _canonical(value: Any) -> Any:
    """A JSON-able form of a bound argument that is equal exactly when the argument is."""
    if isinstance(value, Application):
        return {"$deployment": bound_deployment(value).name}
    if isinstance(value, BaseModel):
        return {"$model": type(value).__qualname__, "value": value.model_dump(mode="json")}
    if isinstance(value, dict):
        return {"$dict": [[_canonical(k), _canonical(v)] for k, v in value.items()]}
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Path):
        return {"$path": str(value)}
    try:
        blob = pickle.dumps(value, protocol=5)
    except Exception:  # not picklable here: its repr is the best identity there is
        blob = repr(value).encode()
    return {
        "$object": f"{type(value).__module__}.{type(value).__qualname__}",
        "sha256": hashlib.sha256(blob).hexdigest(),
    }


def deployment_version(app: Application) -> str:
    bound = bound_deployment(app)
    target = bound.func_or_class
    identity = {
        "code": code_digest(),
        "name": bound.name,
        "class": f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', repr(target))}",
        "args": _canonical(list(bound.init_args)),
        "kwargs": _canonical(dict(bound.init_kwargs)),
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    return f"{code_digest()[:8]}-{digest}"


def _children(value: Any) -> list[Application]:
    if isinstance(value, Application):
        return [value]
    if isinstance(value, dict):
        return [child for item in value.values() for child in _children(item)]
    if isinstance(value, list | tuple):
        return [child for item in value for child in _children(item)]
    return []


def graph_nodes(root: Application) -> list[Application]:
    """Every application node of the graph under `root` (each deployment once)."""
    nodes: list[Application] = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        nodes.append(node)
        bound = bound_deployment(node)
        stack.extend(_children(list(bound.init_args)) + _children(dict(bound.init_kwargs)))
    return nodes


def stamp_versions(root: Application) -> Application:
    """Give every deployment of the graph under `root` its stable version (in place)."""
    for node in graph_nodes(root):
        set_code_version(node, deployment_version(node))
    return root


def graph_versions(root: Application) -> dict[str, str]:
    """Deployment name -> version of a stamped graph (what a redeploy would change)."""
    return {bound_deployment(node).name: bound_deployment(node).version or "" for node in graph_nodes(root)}
