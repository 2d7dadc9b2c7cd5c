"""Storage deployment: the application's one files-and-vector-stores service (docs/storage.md).

The StorageService (app/storage `open_storage`) owns a records file, an ingestion
worker thread and, on `backend_type: milvus` without a server, a Milvus Lite file that opens in
one process only; so it lives in ONE replica here (the default, and the serve config's), and
every Ingress replica (the storage routes) and every Router replica (the `rag` plugin's
retrieval) reach it over this deployment's handle through a StorageClient
(app/storage/client.py). The methods are the client's operations by name; each
returns a StorageReply, the storage errors as data (client.py `serve_op`).

Always in the graph, whatever the document says (the Ingress's arguments must not depend on
the document: an activation runs in an Ingress replica). `global.stores.vector_store` arrives
as user_config: `enabled: false` closes the service (every operation answers 503); a changed
section closes it and opens it again with the new settings in this replica, no restart (the
records and files stay on disk; with `backend_type: memory` the chunks are lost, as at any
restart: `svc-sr storage rotate` re-ingests them); an unchanged one keeps it as it is.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ray import serve
from ray.serve import Application, Deployment

from app.config.storage import VectorStoreConfig
from app.management.state import state_dir_of
from app.management.stores import GraphStoreArgs
from app.runtime.threads import limit_blas_threads
from app.storage import StorageService, open_storage
from app.storage.client import StorageReply, serve_op
from deployments.rollout import SHUTDOWN_POLL_S, single_replica

log = logging.getLogger("svc_sr.storage")


def _op(name: str) -> Any:
    async def method(self: Storage, *args: Any) -> StorageReply:
        return await self.run(name, *args)

    method.__name__ = name
    return method


@serve.deployment(
    num_replicas=1,
    max_ongoing_requests=64,
    # Idle but for an ingestion or a search: a small reservation, so that adding it to every
    # application does not crowd out replicas that need their CPU (the test cluster's 6 CPUs
    # held four applications before it and none after, at 0.1).
    ray_actor_options={"num_cpus": 0.01},
    graceful_shutdown_wait_loop_s=SHUTDOWN_POLL_S,
)
class Storage:
    def __init__(self, state_dir: str | None = None, app_name: str | None = None) -> None:
        limit_blas_threads()  # app/runtime/threads.py
        # The Ingress used to open the service under the same directory (GraphArgs' names).
        self._state_dir = state_dir_of(state_dir, app_name or serve.get_replica_context().app_name)
        self._settings: dict[str, Any] | None = None
        self._service: StorageService | None = None

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        """`{"vector_store": <global.stores.vector_store>}`: (re)open when it changed."""
        raw = (user_config or {}).get("vector_store") or {}
        if raw == self._settings:
            return
        await asyncio.to_thread(self._reopen, raw)

    def _reopen(self, raw: dict[str, Any]) -> None:
        old, self._service = self._service, None
        if old is not None:  # let a running ingestion write its record before the file is reread
            try:
                old.vector_stores.wait_idle(timeout_s=30.0)
            except Exception as exc:  # noqa: BLE001 - a stuck ingestion is re-run when reopened
                log.warning("storage: ingestion still running at reconfigure (%s)", exc)
            old.vector_stores.close()
            close = getattr(old.vector_stores.backend, "close", None)
            if callable(close):
                close()  # Milvus Lite: release the file for the new client
        self._service = open_storage(VectorStoreConfig.model_validate(raw), self._state_dir)
        self._settings = raw
        state = "open" if self._service is not None else "unavailable (disabled or unusable)"
        log.info("storage %s: %s backend under %s", state, raw.get("backend_type", "memory"), self._state_dir)

    async def run(self, op: str, *args: Any) -> StorageReply:
        """One operation in a thread (file and store I/O, embedding block)."""
        return await asyncio.to_thread(serve_op, self._service, op, args)

    def __del__(self) -> None:
        service = getattr(self, "_service", None)
        if service is not None:
            service.vector_stores.close()

    # The StorageClient's operations (client.py OPS), one method each.
    files_create = _op("files_create")
    files_listing = _op("files_listing")
    files_get = _op("files_get")
    files_content = _op("files_content")
    files_remove = _op("files_remove")
    stores_create = _op("stores_create")
    stores_listing = _op("stores_listing")
    stores_get = _op("stores_get")
    stores_update = _op("stores_update")
    stores_delete = _op("stores_delete")
    stores_search = _op("stores_search")
    stores_rotate = _op("stores_rotate")
    stores_attach = _op("stores_attach")
    stores_list_files = _op("stores_list_files")
    stores_get_file = _op("stores_get_file")
    stores_detach = _op("stores_detach")
    retrieve = _op("retrieve")


def storage_node(
    config: VectorStoreConfig, graph_args: GraphStoreArgs, options: dict[str, Any]
) -> Application:
    """The graph's Storage node: the vector_store section as user_config, one replica, the
    state directory GraphArgs names (as the Ingress's management state)."""
    one = single_replica(options, "Storage", "one files and vector-store service")
    deployment: Deployment = Storage  # type: ignore[assignment]  # mypy types a decorated class as the class
    return deployment.options(user_config={"vector_store": config.model_dump(mode="json")}, **one).bind(
        graph_args.state_dir, graph_args.app_name
    )
