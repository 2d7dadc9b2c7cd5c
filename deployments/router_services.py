"""What a Router replica calls over handles (deployments/router.py): the Embedding deployment,
the ResponseCache's lane, the learned signal families' engines on the DomainClassifier and Guard
(deployments/signal_engines.py), and the `rag` plugin's retrieval on the Storage deployment; as
PipelineServices (app/pipeline). Also what it reads from the shared store: the elo ratings,
knowledge bases, memories and sessions."""

from __future__ import annotations

from typing import Any

import numpy as np
from ray.serve.handle import DeploymentHandle

from app.management.state import state_dir_of
from app.pipeline import PipelineServices
from app.pipeline.elo_selector import RatingsFeed
from app.pipeline.learning.ratings import open_rating_store
from app.pipeline.local_models import engine_evaluators
from app.pipeline.signals.base import EvaluatorFactory
from app.pipeline.signals.kb import KnowledgeBaseFeed
from app.runtime.encoder import token_counter
from app.state.session_store import session_store
from app.state.shared_store import store_settings
from app.storage.knowledge_bases import open_kb_store
from app.storage.memories import router_memories
from deployments import ray_compat
from deployments.cache_lane import cache_lane
from deployments.handles import storage_client
from deployments.signal_engines import handle_engines


def classifier_evaluators(
    domain: DeploymentHandle | None, guard: DeploymentHandle | None
) -> dict[str, EvaluatorFactory]:
    """Evaluator factories of the learned families over the model deployments' engines; a call
    a replica died under is sent again (to another replica or the replacement), not errored."""
    return engine_evaluators(handle_engines(domain, guard))


def handle_services(
    embedding: DeploymentHandle,
    cache: DeploymentHandle,
    domain: DeploymentHandle | None = None,
    guard: DeploymentHandle | None = None,
    storage: DeploymentHandle | None = None,
) -> PipelineServices:
    async def embed(texts: list[str]) -> np.ndarray:  # retried as the classifiers' calls
        return await ray_compat.call(embedding, "embed", texts, retries=1)

    lane = cache_lane(cache)
    return PipelineServices(
        embed=embed,
        cache_lookup=lane.lookup,
        cache_store=lane.store,
        cache_epoch=lane.epoch,  # the token route() puts on the plan's write (stale-write guard)
        count_tokens=token_counter(),
        evaluators=classifier_evaluators(domain, guard),
        # The rag plugin searches the application's vector stores (None: `unavailable`).
        retrieve=storage_client(storage).retrieve if storage is not None else None,
    )


def read_shared_state(
    services: PipelineServices, ratings_at: tuple[Any, str | None, str | None], app: str
) -> None:
    """The elo ratings, knowledge bases and memories the Ingress writes, where it keeps them
    (GraphArgs' management store, named as app/management/stores.py names it)."""
    store, app_name, state_dir = ratings_at
    name = app_name or app
    settings, where = store_settings(store), state_dir_of(state_dir, name)
    services.ratings = RatingsFeed(open_rating_store(settings, name, where))
    services.knowledge_bases = KnowledgeBaseFeed(open_kb_store(settings, name, where))
    services.memories = router_memories(store, app_name, app)  # recall (Redis only)
    services.sessions = session_store(settings, name)  # session-aware routing's sessions
