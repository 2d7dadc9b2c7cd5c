"""Router deployment: the request pipeline behind DeploymentHandles.

Routing configuration arrives as Serve `user_config` so a routing change reaches live
replicas through `reconfigure()` without a restart (deployments/activation.py drives it).
A reload builds and warms the new generation aside and swaps it in; when that fails the
replica keeps serving the previous generation and reports the failure through
`generation()`, which the activator reads before it declares the change active (Serve
would otherwise replace a replica whose reconfigure raised, previous generation and all).

route() marks the requests whose decision records replays (`router_replay` plugin); the
front door that completes the request (Ingress, ext_proc sidecar) sends the record to the
Observability deployment, shared by every replica.

The learned signal families (`domain`, `pii`, `jailbreak`) call the DomainClassifier and
Guard deployments; the request's query vector from the Embedding deployment is passed
along, so the text is encoded once per request. A family the configuration binds to a
`model_deployments` entry (`prompt_guard`, `pii_classifier`, `domain_classifier`) calls that
deployment's `svc-srun` workers instead, which each replica runs itself (sockets under
SVC_SRUN_DIR/<replica id>/, stopped with the replica; app/srun/hosting.py BindingRuntimes).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
from ray import serve
from ray.serve.handle import DeploymentHandle

from app.common.heap import freeze_startup_heap
from app.config.loader import config_hash, parse_config
from app.pipeline.pipeline import PipelineServices, RouterPipeline, encoder_embed
from app.pipeline.plan import RoutePlan
from app.pipeline.signals.base import EvaluatorFactory
from app.pipeline.signals.domain import domain_factory
from app.pipeline.signals.jailbreak import jailbreak_factory
from app.pipeline.signals.pii import pii_factory
from app.runtime.encoder import MiniLMEncoder, token_counter
from app.srun.hosting import BindingRuntimes
from app.srun.runtime_metrics import RuntimeMetrics
from deployments.observability import replica_pusher
from deployments.response_cache import cache_lane
from deployments.serve_env import process_transport

log = logging.getLogger("svc_sr.router")


def classifier_evaluators(
    domain: DeploymentHandle | None, guard: DeploymentHandle | None
) -> dict[str, EvaluatorFactory]:
    """Evaluator factories of the learned families over the model deployments' handles."""
    evaluators: dict[str, EvaluatorFactory] = {}
    if domain is not None:
        async def classify(texts: list[str], vectors: np.ndarray | None, threshold: float | None,
                           fallback: str) -> list[Any]:
            return await domain.classify.remote(texts, vectors, threshold, fallback)

        evaluators["domain"] = domain_factory(classify)
    if guard is not None:
        async def detect_pii(texts: list[str], entity_types: list[str] | None, threshold: float | None) -> list[Any]:
            return await guard.detect_pii.remote(texts, entity_types, threshold)

        async def detect_jailbreak(texts: list[str], vectors: np.ndarray | None, method: str, threshold: float,
                                   patterns: list[str], benign: list[str]) -> list[Any]:
            return await guard.detect_jailbreak.remote(texts, vectors, method, threshold, patterns, benign)

        evaluators["pii"] = pii_factory(detect_pii)
        evaluators["jailbreak"] = jailbreak_factory(detect_jailbreak)
    return evaluators


def handle_services(
    embedding: DeploymentHandle, cache: DeploymentHandle,
    domain: DeploymentHandle | None = None, guard: DeploymentHandle | None = None,
) -> PipelineServices:
    async def embed(texts: list[str]) -> np.ndarray:
        return await embedding.embed.remote(texts)

    lane = cache_lane(cache)
    return PipelineServices(embed=embed, cache_lookup=lane.lookup, cache_store=lane.store,
                            count_tokens=token_counter(), evaluators=classifier_evaluators(domain, guard))


@serve.deployment(max_ongoing_requests=1024, ray_actor_options={"num_cpus": 0.25})
class Router:
    def __init__(
        self, embedding: DeploymentHandle, cache: DeploymentHandle,
        domain: DeploymentHandle | None = None, guard: DeploymentHandle | None = None,
        local_encoder: bool = False, observability: DeploymentHandle | None = None,
    ) -> None:
        embedding, cache, domain, guard, observability = (
            process_transport(h) for h in (embedding, cache, domain, guard, observability))
        self._services = handle_services(embedding, cache, domain, guard)
        self._pusher = replica_pusher(self._services.metrics.recorder, observability)
        if local_encoder:
            # The request's one encoder pass runs in this replica: one Ray hop and the batch
            # wait fewer per request, at the cost of a ~265 MB encoder per Router replica.
            # Two intra-op threads: encoder_embed runs one (micro-batched) forward at a time,
            # and on 2 cores a short prompt takes 4.6 ms with two threads against 6.4 with one.
            encoder = MiniLMEncoder(threads=int(os.environ.get("SVC_SR_ROUTER_ENCODER_THREADS", "2")))
            encoder.warm_up()
            self._services.embed = encoder_embed(encoder)
        self._pipeline: RouterPipeline | None = None
        self._generation: dict[str, Any] = {"hash": None, "error": None, "failed_hash": None}
        self._replica = serve.get_replica_context().replica_id.unique_id
        # Workers of the model deployments the configuration binds; their metrics are pushed
        # with the replica's own.
        self._bindings = BindingRuntimes(self._replica, RuntimeMetrics(self._services.metrics.recorder))
        # The front doors complete requests and send their replay records to Observability;
        # route() only marks the requests whose decision records replays.
        self._services.capture_replays = observability is not None

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        services = self._services
        if self._pipeline is None:  # startup: a failure here fails the replica (Serve retries it)
            config = parse_config(user_config["config"]).config
            services.model_runtimes = await self._bindings.update(config)
            self._pipeline = RouterPipeline(config, services)
            await self._pipeline.warm_up()
            self._bindings.settle(services.model_runtimes)
            self._generation = {"hash": config_hash(config), "error": None, "failed_hash": None}
            freeze_startup_heap()
            return
        digest = None
        previous = services.model_runtimes
        try:
            config = parse_config(user_config["config"]).config
            digest = config_hash(config)
            if digest == self._generation["hash"]:
                return
            # The bound deployments' workers: kept when unchanged, else new ones started first.
            services.model_runtimes = await self._bindings.update(config)
            await self._pipeline.update_config(config)  # builds and warms aside, then swaps
        except Exception as exc:
            services.model_runtimes = previous
            self._bindings.settle(previous)
            log.exception("reload to configuration %s failed; the previous generation keeps serving",
                          (digest or "(unparsed)")[:12])
            self._generation = {**self._generation, "error": f"{type(exc).__name__}: {exc}", "failed_hash": digest}
            return
        self._bindings.settle(services.model_runtimes)
        self._generation = {"hash": digest, "error": None, "failed_hash": None}

    async def check_health(self) -> None:
        """Serve's periodic probe: a bound deployment's worker is restarted by its supervisor,
        not by failing the replica; this only keeps the health watch running."""
        self._bindings.start_watch()

    def __del__(self) -> None:
        # Serve calls this when the replica stops: end the bound deployments' workers (SIGTERM,
        # then SIGKILL after 10 s); workers of a replica killed outright stop on their own.
        bindings = getattr(self, "_bindings", None)
        if bindings is not None:
            bindings.stop_processes()

    async def generation(self) -> dict[str, Any]:
        """Which configuration this replica serves (hash of the parsed config), and the last
        reload that failed on it (the activator's warm check)."""
        return {"replica": self._replica, **self._generation}

    @property
    def pipeline(self) -> RouterPipeline:
        if self._pipeline is None:
            raise RuntimeError("Router has no configuration yet (user_config missing)")
        return self._pipeline

    async def route(self, body: dict[str, Any], headers: dict[str, str], request_id: str) -> RoutePlan:
        plan = await self.pipeline.route(body, headers, request_id=request_id)
        plan.router_replica = self._replica  # replay records name it (the front door completes)
        return plan

    async def preview(self, body: dict[str, Any], headers: dict[str, str] | None = None,
                      seed: int | None = None) -> dict[str, Any]:
        """Routing preview (no backend call, no cache access); see RouterPipeline.preview."""
        return await self.pipeline.preview(body, headers, seed=seed)
