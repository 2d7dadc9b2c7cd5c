"""The Ray transport of the signal interface (app/runtime/signal_engine.py): a model
deployment's engine reached by its handle. The DomainClassifier and Guard deployments each host
a `LocalEngines` (app/runtime/local_engines.py) and expose its `classify(family, request)`;
`HandleEngine` is that method as a `SignalEngine`, so a family asks a deployment exactly as it
asks an engine in its own process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from ray.serve.handle import DeploymentHandle

from app.runtime.local_engines import GRAPH_ENGINES
from app.runtime.signal_engine import SignalEngine, SignalItem, SignalRequest
from deployments import ray_compat

Remap = Callable[[BaseException], BaseException]


class HandleEngine:
    """`family`'s engine on the deployment behind `handle`. `retries`: a call whose replica died
    under it is sent again (to another replica or the replacement; every call changes nothing);
    `unavailable` / `overloaded` remap Ray's errors (ray_compat.call)."""

    def __init__(
        self,
        handle: DeploymentHandle,
        family: str,
        *,
        retries: int = 1,
        unavailable: Remap | None = None,
        overloaded: Remap | None = None,
    ) -> None:
        self.handle = handle
        self.family = family
        self.name, self.reads_vectors = GRAPH_ENGINES[family]
        self._options: dict[str, Any] = {
            "retries": retries,
            "unavailable": unavailable,
            "overloaded": overloaded,
        }

    async def classify(self, request: SignalRequest) -> list[SignalItem]:
        return cast(
            list[SignalItem],
            await ray_compat.call(self.handle, "classify", self.family, request, **self._options),
        )

    def failed(self, reason: str) -> Exception:
        return RuntimeError(reason)


def handle_engines(
    domain: DeploymentHandle | None, guard: DeploymentHandle | None, **options: Any
) -> dict[str, SignalEngine]:
    """The graph's learned families on the model deployments, by family."""
    engines: dict[str, SignalEngine] = {}
    if domain is not None:
        engines["domain"] = HandleEngine(domain, "domain", **options)
    if guard is not None:
        for family in ("pii", "jailbreak", "harmful"):
            engines[family] = HandleEngine(guard, family, **options)
    return engines
