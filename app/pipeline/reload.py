"""A Router replica's pipeline across configuration versions (hot reload), without Ray.

The first configuration builds the pipeline; a failure then fails the replica (its host
retries it). Each later one is built and warmed aside and swapped in; when that fails the
replica keeps serving the previous generation and says so in `generation()`, which the
activator reads before it declares a change active (a host that replaced a replica whose
reload raised would lose the previous generation too). Workers of the model deployments the
configuration binds (`BindingRuntimes`) follow the same rule: new ones start first, the old
ones retire once the new generation serves.
"""

from __future__ import annotations

import logging
from typing import Any

from app.config.loader import config_hash, parse_config
from app.pipeline.pipeline import RouterPipeline
from app.pipeline.services import PipelineServices
from app.srun.hosting import BindingRuntimes

log = logging.getLogger("svc_sr.router")


class ReloadingPipeline:
    def __init__(self, services: PipelineServices, bindings: BindingRuntimes) -> None:
        self.services = services
        self.bindings = bindings
        self._pipeline: RouterPipeline | None = None
        self._state: dict[str, Any] = {"hash": None, "error": None, "failed_hash": None}

    @property
    def pipeline(self) -> RouterPipeline:
        if self._pipeline is None:
            raise RuntimeError("Router has no configuration yet (user_config missing)")
        return self._pipeline

    def generation(self) -> dict[str, Any]:
        """Which configuration serves (hash of the parsed config), and the last reload that
        failed (`failed_hash`, `error`)."""
        return dict(self._state)

    async def apply(self, document: dict[str, Any]) -> None:
        """Serve `document`: at startup or raise; later, or keep the previous generation."""
        if self._pipeline is None:
            await self._start(document)
            return
        digest = None
        previous = self.bindings.current
        try:
            config = parse_config(document).config
            digest = config_hash(config)
            if digest == self._state["hash"]:
                return
            # kept when unchanged, else new ones first; a model that fails to load fails the reload
            runtimes = await self.bindings.update(config, require_loaded=True)
            self.services.bound_workers = runtimes
            await self._pipeline.update_config(config)  # builds and warms aside, then swaps
        except Exception as exc:
            self.services.bound_workers = previous
            self.bindings.settle(previous)
            log.exception(
                "reload to configuration %s failed; the previous generation keeps serving",
                (digest or "(unparsed)")[:12],
            )
            self._state = {**self._state, "error": f"{type(exc).__name__}: {exc}", "failed_hash": digest}
            return
        self.bindings.settle(runtimes)
        self._state = {"hash": digest, "error": None, "failed_hash": None}

    async def _start(self, document: dict[str, Any]) -> None:
        config = parse_config(document).config
        runtimes = await self.bindings.update(config)
        self.services.bound_workers = runtimes
        pipeline = RouterPipeline(config, self.services)
        await pipeline.warm_up()
        self.bindings.settle(runtimes)
        self._pipeline = pipeline
        self._state = {"hash": config_hash(config), "error": None, "failed_hash": None}
