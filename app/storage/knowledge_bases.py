"""Knowledge bases (docs/knowledge-bases.md): where they are kept and how a mutation activates.

Kept alongside the management state, as JSON documents (app/state/json_document.py) over its backends
and their compare-and-set, so every Ingress replica and every Router replica sees the same bases:
- memory: one process (tests; the standalone app);
- file: `<state_dir>/knowledge_bases.json`, and `kb_vectors_<name>.json` per base, each
  under its own lock file;
- redis: keys `<prefix>kb:state|revision` and `<prefix>kb:vectors:<name>:state|revision`.

A mutation (create, update, delete) is persisted with activation_status `pending` and the
base's content hash (generated_runtime_hash), answered 202, and activated in the background:
the router's encoder embeds the entries, the vectors are saved tagged with that hash, and the
base turns `active` (or `failed` with the reason); Router replicas pick it up from the store
(app/pipeline/signals/kb.py). While any base is pending, another knowledge-base mutation is
refused with 409 CONFIG_ACTIVATION_PENDING and nothing is written (docs/management-api.md,
"Changing the configuration"); the check and the write are one compare-and-set, so two replicas cannot both
win. A pending base older than `pending_timeout_s` (its replica died mid-activation) reads
as failed and no longer blocks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from app.common.background import BackgroundTasks
from app.common.mgmt_errors import MgmtError, not_found, unavailable
from app.pipeline.signals.base import EmbedFn
from app.pipeline.signals.kb_data import (
    KbEntry,
    KbOperation,
    KbVectors,
    KnowledgeBase,
    KnowledgeBasesDocument,
    content_hash,
)
from app.state.json_document import DocumentStores, JsonDocumentStore
from app.state.shared_store import ManagementStoreSettings
from app.state.state_stores import MemoryStateStore, StateStore

if TYPE_CHECKING:
    import redis

KB_FILE = "knowledge_bases.json"
KB_LOCK = ".knowledge_bases.lock"
EMBED_CHUNK = 64  # the encoder's efficient batch on CPU (as the embedding signal)
PENDING_TIMEOUT_S = 600.0


class KnowledgeBaseStore(JsonDocumentStore[KnowledgeBasesDocument]):
    """The bases document and each base's vectors, over state backends (module doc)."""

    def __init__(
        self,
        backend: StateStore | None = None,
        vectors_backend: Callable[[str], StateStore] | None = None,
    ) -> None:
        super().__init__(KnowledgeBasesDocument, "knowledge bases", backend)
        memory: dict[str, StateStore] = {}
        self._vectors_backend = vectors_backend or (lambda name: memory.setdefault(name, MemoryStateStore()))

    def _vectors(self, name: str) -> JsonDocumentStore[KbVectors]:
        return JsonDocumentStore(KbVectors, f"knowledge base {name!r} vectors", self._vectors_backend(name))

    def vectors(self, name: str) -> KbVectors | None:
        return self._vectors(name).read()

    def save_vectors(self, name: str, matrix: np.ndarray, hash_: str) -> None:
        self._vectors(name).replace(lambda current: KbVectors.of(matrix, hash_, current + 1))


def open_kb_store(
    settings: ManagementStoreSettings, app_name: str, state_dir: Path, client: redis.Redis | None = None
) -> KnowledgeBaseStore:
    """The knowledge bases of application `app_name`, where its management state lives."""
    backends = DocumentStores(settings, app_name, state_dir, client)
    return KnowledgeBaseStore(
        backends.open("kb:", KB_FILE, KB_LOCK),
        lambda name: backends.open(f"kb:vectors:{name}:", f"kb_vectors_{name}.json", f".kb_{name}.lock"),
    )


def now_stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class KnowledgeBaseService:
    """Reads and mutations of the knowledge bases of one Ingress replica (module doc).
    `embed`: the router's encoder (None: no runtime here, mutations answer 503)."""

    def __init__(
        self,
        store: KnowledgeBaseStore | None = None,
        embed: EmbedFn | None = None,
        pending_timeout_s: float = PENDING_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store or KnowledgeBaseStore()
        self.embed = embed
        self.pending_timeout_s = pending_timeout_s
        self._clock = clock
        self._tasks = BackgroundTasks()

    # -- reads ------------------------------------------------------------------------------
    async def list_bases(self) -> list[KnowledgeBase]:
        document = await asyncio.to_thread(self.store.load)
        return [self._as_seen(base) for _, base in sorted(document.bases.items())]

    async def get(self, name: str) -> KnowledgeBase:
        base = (await asyncio.to_thread(self.store.load)).bases.get(name)
        if base is None:
            raise not_found(f"no knowledge base named {name!r}")
        return self._as_seen(base)

    async def vectors(self, name: str) -> KbVectors | None:
        return await asyncio.to_thread(self.store.vectors, name)

    def _stale(self, base: KnowledgeBase) -> bool:
        since = base.pending_since
        return (
            base.status == "pending" and since is not None and self._clock() - since > self.pending_timeout_s
        )

    def _as_seen(self, base: KnowledgeBase) -> KnowledgeBase:
        if self._stale(base):
            return base.model_copy(update={"status": "failed", "error": "activation abandoned (timed out)"})
        return base

    # -- mutations --------------------------------------------------------------------------
    async def create(self, name: str, description: str | None, entries: list[KbEntry]) -> KnowledgeBase:
        def change(document: KnowledgeBasesDocument, now: float) -> KnowledgeBase:
            if name in document.bases:
                raise MgmtError(409, f"knowledge base {name!r} already exists", code="ALREADY_EXISTS")
            stamp = now_stamp()
            return KnowledgeBase(
                name=name,
                description=description,
                entries=entries,
                content_hash=content_hash(name, entries),
                operation="create",
                created_at=stamp,
                updated_at=stamp,
                pending_since=now,
            )

        return await self._mutate(name, change)

    async def update(self, name: str, description: str | None, entries: list[KbEntry]) -> KnowledgeBase:
        def change(document: KnowledgeBasesDocument, now: float) -> KnowledgeBase:
            old = self._existing(document, name)
            return old.model_copy(
                update={
                    "description": description if description is not None else old.description,
                    "entries": entries,
                    "content_hash": content_hash(name, entries),
                    "status": "pending",
                    "operation": "update",
                    "error": None,
                    "updated_at": now_stamp(),
                    "pending_since": now,
                }
            )

        return await self._mutate(name, change)

    async def delete(self, name: str) -> KnowledgeBase:
        def change(document: KnowledgeBasesDocument, now: float) -> KnowledgeBase:
            old = self._existing(document, name)
            update: dict[str, Any] = {"status": "pending", "operation": "delete", "error": None}
            return old.model_copy(update={**update, "updated_at": now_stamp(), "pending_since": now})

        return await self._mutate(name, change)

    def _existing(self, document: KnowledgeBasesDocument, name: str) -> KnowledgeBase:
        if name not in document.bases:
            raise not_found(f"no knowledge base named {name!r}")
        return document.bases[name]

    async def _mutate(
        self, name: str, change: Callable[[KnowledgeBasesDocument, float], KnowledgeBase]
    ) -> KnowledgeBase:
        if self.embed is None:
            raise unavailable("no router runtime in this process to activate knowledge bases")
        base = await asyncio.to_thread(self._persist, name, change)
        assert base.pending_since is not None
        self._tasks.spawn(self._activate(name, base.operation, base.pending_since))
        return base

    def _persist(
        self, name: str, change: Callable[[KnowledgeBasesDocument, float], KnowledgeBase]
    ) -> KnowledgeBase:
        def mutate(document: KnowledgeBasesDocument) -> KnowledgeBasesDocument:
            pending = [b for b in document.bases.values() if b.status == "pending" and not self._stale(b)]
            if pending:
                first = pending[0]
                raise MgmtError(
                    409,
                    f"knowledge base {first.name!r} ({first.operation}) is still being activated; retry later",
                    code="CONFIG_ACTIVATION_PENDING",
                    details={"pending": first.name, "operation": first.operation},
                )
            bases = {**document.bases, name: change(document, self._clock())}
            return KnowledgeBasesDocument(revision=document.revision + 1, bases=bases)

        saved = self.store.update(mutate)
        assert saved is not None  # mutate always returns a document
        return saved.bases[name]

    async def _activate(self, name: str, operation: KbOperation, attempt: float) -> None:
        """Embed (or drop) the base in the background, then record the outcome."""
        error: str | None = None
        try:
            base = (await asyncio.to_thread(self.store.load)).bases.get(name)
            if base is None or base.pending_since != attempt:
                return  # replaced meanwhile (cannot happen while pending, but never clobber)
            if operation == "delete":
                empty = np.zeros((0, 1), dtype=np.float32)
                await asyncio.to_thread(self.store.save_vectors, name, empty, "")
            else:
                matrix = await self._embed_entries([e.text for e in base.entries])
                await asyncio.to_thread(self.store.save_vectors, name, matrix, base.content_hash)
        except Exception as exc:  # the encoder or the store failed: the base reads failed, with why
            error = f"{type(exc).__name__}: {exc}"
        await asyncio.to_thread(self._finish, name, attempt, error)

    async def _embed_entries(self, texts: list[str]) -> np.ndarray:
        assert self.embed is not None
        parts = []
        for start in range(0, len(texts), EMBED_CHUNK):
            chunk = texts[start : start + EMBED_CHUNK]
            vectors = np.asarray(await self.embed(chunk), dtype=np.float32)
            if vectors.shape[0] != len(chunk):
                raise RuntimeError(f"encoder returned {vectors.shape[0]} vectors for {len(chunk)} texts")
            parts.append(vectors)
        return np.concatenate(parts)

    def _finish(self, name: str, attempt: float, error: str | None) -> None:
        def record(document: KnowledgeBasesDocument) -> KnowledgeBasesDocument | None:
            base = document.bases.get(name)
            if base is None or base.pending_since != attempt:
                return None  # replaced meanwhile: nothing to record
            bases = dict(document.bases)
            if error is not None:
                bases[name] = base.model_copy(
                    update={"status": "failed", "error": error, "pending_since": None}
                )
            elif base.operation == "delete":
                del bases[name]
            else:
                update = {"status": "active", "active_hash": base.content_hash, "pending_since": None}
                bases[name] = base.model_copy(update=update)
            return KnowledgeBasesDocument(revision=document.revision + 1, bases=bases)

        self.store.update(record)

    async def drain(self) -> None:
        """Wait for the activations in flight (tests, shutdown)."""
        await self._tasks.drain()
