"""Vector-store retrieval quality and speed (docs/storage.md has the figures and the method).

    PYTHONPATH=$PWD .venv/bin/python bench/bench_storage.py [--chunks 10000 100000]
        [--queries 200] [--backends memory milvus-lite redis] [--load-batch 32] [--skip-encoder]

Quality: recall@5 of each ranker (hybrid, vector, bm25, hybrid_rerank) on a labelled set
from MMLU-Pro (../shared/data/mmlu-pro): for each of the 56 MMLU subjects with at least 7
questions, 5 questions (text + correct answer) are the subject's documents and 2 others are
queries; a query's relevant set is its subject's 5 documents, so recall@5 is the share of
them in the top 5. Speed: MMLU-Pro questions as documents, chunked (64 words, 8 overlap) to
about --encoder-chunks chunks, ingested through VectorStores with the router's MiniLM encoder
(chunks/s, embedding included); then, per --chunks size, as many chunks ingested with 384-d
stand-in vectors (no encoder; past the ~13k chunks MMLU-Pro makes, its passages are cycled
into more files), the same chunks and vectors loaded into each backend (--load-batch chunks
per add) and searched with --queries questions (p50/p99 per ranker). bench_retrieval.py
compares the fusion variants on two labelled sets.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.storage.files import FileStore  # noqa: E402
from app.storage.schemas import FileAttach, SearchRequest, VectorStoreCreate  # noqa: E402
from app.storage.vector_index import Chunk, MemoryVectorIndex, VectorIndex  # noqa: E402
from app.storage.vector_stores import VectorStores  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "mmlu-pro" / "questions.jsonl"
RANKERS = ("hybrid", "vector", "bm25", "hybrid_rerank")


def questions() -> list[dict[str, Any]]:
    return [json.loads(line) for line in DATA.read_text().split("\n") if line.strip()]


def passage(q: dict[str, Any]) -> str:
    answer = q["options"][ord(q["answer"]) - ord("A")]
    return f"{q['question']} Answer: {answer}"


class Recording:
    """A backend wrapper keeping what ingestion stored, to load other backends identically."""

    def __init__(self, inner: VectorIndex) -> None:
        self.inner = inner
        self.rows: list[tuple[list[Chunk], np.ndarray]] = []

    def add(self, chunks: list[Chunk], vectors: np.ndarray) -> None:
        self.rows.append((chunks, vectors))
        self.inner.add(chunks, vectors)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def open_stores(folder: Path, backend: Any, embed: Any, words: int, overlap: int) -> VectorStores:
    files = FileStore(folder / "files", 1 << 26, 100_000)
    return VectorStores(folder, files, backend, embed, chunk_words=words, chunk_overlap_words=overlap)


def recall_at_5(embed: Any, qs: list[dict[str, Any]]) -> dict[str, Any]:
    by_subject: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for q in qs:
        if q["src"].startswith("ori_mmlu-"):
            by_subject[q["src"]].append(q)
    subjects = sorted(s for s, items in by_subject.items() if len(items) >= 7)
    with tempfile.TemporaryDirectory() as tmp:
        stores = open_stores(Path(tmp), MemoryVectorIndex(), embed, 160, 32)
        store = stores.create(VectorStoreCreate(name="recall"))
        subject_of: dict[str, str] = {}
        for subject in subjects:
            for q in by_subject[subject][:5]:
                record = stores.files.create(f"q{q['question_id']}.txt", passage(q).encode(), "assistants")
                subject_of[record.id] = subject
                stores.attach(store.id, FileAttach(file_id=record.id))
        stores.wait_idle(600)
        recalls: dict[str, list[float]] = {r: [] for r in RANKERS}
        for subject in subjects:
            for q in by_subject[subject][5:7]:
                for ranker in RANKERS:
                    request = SearchRequest(
                        query=q["question"], max_num_results=5, ranking_options={"ranker": ranker}
                    )
                    hits = stores.search(store.id, request).data
                    recalls[ranker].append(sum(subject_of[h.file_id] == subject for h in hits) / 5)
        stores.close()
    return {
        "subjects": len(subjects),
        "documents": len(subject_of),
        "queries": len(recalls["hybrid"]),
        **{f"recall@5_{r}": round(statistics.mean(v), 4) for r, v in recalls.items()},
    }


def ingest(embed: Any, qs: list[dict[str, Any]], target: int) -> tuple[dict[str, Any], Recording, str]:
    """About `target` chunks of MMLU-Pro passages through VectorStores.ingest_now (memory backend)."""
    words, overlap = 64, 8
    per_chunk = words - overlap
    texts, total = [], 0
    while total / per_chunk < target:  # past one pass over MMLU-Pro: its passages again
        for q in qs:
            texts.append(passage(q))
            total += len(texts[-1].split())
            if total / per_chunk >= target:
                break
    folder = Path(tempfile.mkdtemp())
    recording = Recording(MemoryVectorIndex())
    stores = open_stores(folder, recording, embed, words, overlap)
    store = stores.create(VectorStoreCreate(name="speed"))
    per_file = 100
    ids = []
    for start in range(0, len(texts), per_file):
        body = "\n".join(texts[start : start + per_file]).encode()
        ids.append(stores.files.create(f"part{start}.txt", body, "assistants").id)
    began = time.perf_counter()
    chunks = sum(stores.ingest_now(store.id, file_id)[0] for file_id in ids)
    seconds = time.perf_counter() - began
    stores.close()
    return (
        {
            "chunks": chunks,
            "files": len(ids),
            "seconds": round(seconds, 1),
            "chunks_per_s": round(chunks / seconds, 1),
        },
        recording,
        store.id,
    )


@contextmanager
def backend_named(name: str, folder: Path) -> Iterator[VectorIndex]:
    if name == "memory":
        yield MemoryVectorIndex()
    elif name == "milvus-lite":
        from app.config.cache_stores import MilvusCacheSettings
        from app.storage.milvus_index import MilvusVectorIndex

        backend = MilvusVectorIndex(MilvusCacheSettings(), str(folder / "vectors.db"))
        yield backend
        backend.close()
    else:
        from app.config.cache_stores import RedisCacheSettings
        from app.storage.redis_index import RedisVectorIndex
        from tests.fakes.stores import redis_with_search

        with redis_with_search(folder) as url:
            yield RedisVectorIndex(RedisCacheSettings(url=url, index_name="bench_vs", key_prefix="bench:vs:"))


def search_speed(
    name: str,
    recording: Recording,
    store_id: str,
    embed: Any,
    queries: list[str],
    load_batch: int = 32,
    load_budget_s: float = 600.0,
) -> dict[str, Any]:
    """Load the recorded chunks into backend `name` (`load_batch` per add; stops after
    `load_budget_s`, searching what was loaded) and time each ranker's search."""
    with tempfile.TemporaryDirectory() as tmp, backend_named(name, Path(tmp)) as backend:
        began = time.perf_counter()
        count = 0
        pending: list[Chunk] = []
        pending_vectors: list[np.ndarray] = []
        for chunks, vectors in recording.rows:
            pending += chunks
            pending_vectors.append(vectors)
            if len(pending) >= load_batch:
                backend.add(pending, np.concatenate(pending_vectors))
                count += len(pending)
                pending, pending_vectors = [], []
                if time.perf_counter() - began > load_budget_s:
                    break
        else:
            if pending:
                backend.add(pending, np.concatenate(pending_vectors))
                count += len(pending)
        load_s = time.perf_counter() - began
        stores = open_stores(Path(tmp), backend, embed, 64, 8)
        # the store's record, as ingestion would have left it
        store = stores.create(VectorStoreCreate(name="speed"))
        file_ids = sorted({c.file_id for chunks, _ in recording.rows for c in chunks})
        record = stores._records.stores.pop(store.id)
        record.store = record.store.model_copy(update={"id": store_id})
        for file_id in file_ids:
            record.files[file_id] = record.files.get(file_id) or _completed(store_id, file_id)
        stores._records.stores[store_id] = record
        out: dict[str, Any] = {
            "backend": name,
            "chunks": count,
            "load_batch": load_batch,
            "insert_chunks_per_s": round(count / load_s, 1),
        }
        for ranker in RANKERS:
            began = time.perf_counter()
            stores.search(
                store_id, SearchRequest(query=queries[0], ranking_options={"ranker": ranker})
            )  # warm (BM25 build)
            if ranker == "hybrid":  # the first search after a change builds the BM25 index
                out["first_search_s"] = round(time.perf_counter() - began, 1)
            times = []
            for query in queries:
                request = SearchRequest(query=query, max_num_results=5, ranking_options={"ranker": ranker})
                t = time.perf_counter()
                stores.search(store_id, request)
                times.append((time.perf_counter() - t) * 1000)
            times.sort()
            out[f"{ranker}_p50_ms"] = round(times[len(times) // 2], 2)
            out[f"{ranker}_p99_ms"] = round(times[min(len(times) - 1, int(len(times) * 0.99))], 2)
        stores.close()
        return out


def _completed(store_id: str, file_id: str) -> Any:
    from app.storage.schemas import VectorStoreFileObject

    return VectorStoreFileObject(id=file_id, created_at=0, vector_store_id=store_id, status="completed")


def fast_embed(texts: list[str]) -> np.ndarray:
    """384-d hashed bag of words: the encoder's shape at none of its cost (the 10k-chunk runs)."""
    from tests.fakes.embedding import hashed_embed

    return hashed_embed(texts, 384)


def encoder_query_ms(embed: Any, queries: list[str], passages: list[str]) -> dict[str, float]:
    """One query's embedding; and 20 passages' (what a rerank that embedded its candidates
    again would add: hybrid_rerank reuses the vector ranking's cosines instead)."""
    times = []
    for query in queries:
        t = time.perf_counter()
        embed([query])
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    candidates = []
    for start in range(0, min(len(passages), 200), 20):
        t = time.perf_counter()
        embed(passages[start : start + 20])
        candidates.append((time.perf_counter() - t) * 1000)
    candidates.sort()
    return {
        "query_embed_p50_ms": round(times[len(times) // 2], 2),
        "query_embed_p99_ms": round(times[int(len(times) * 0.99)], 2),
        "rerank_embed_20_p50_ms": round(candidates[len(candidates) // 2], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, nargs="+", default=[10_000])
    parser.add_argument(
        "--encoder-chunks", type=int, default=300, help="chunks ingested with the real encoder"
    )
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--backends", nargs="+", default=["memory", "milvus-lite", "redis"])
    parser.add_argument("--load-batch", type=int, default=32, help="chunks per backend add")
    parser.add_argument("--load-budget-s", type=float, default=600.0, help="per backend load")
    parser.add_argument("--skip-recall", action="store_true")
    parser.add_argument("--skip-encoder", action="store_true", help="no MiniLM: the speed runs only")
    args = parser.parse_args()
    qs = questions()
    queries = [q["question"] for q in qs[-args.queries :]]
    if not args.skip_encoder:
        from app.runtime.encoder import shared_encoder

        encoder = shared_encoder()
        encoder.warm_up()
        if not args.skip_recall:
            print(json.dumps({"recall": recall_at_5(encoder.encode, qs)}), flush=True)
        report = ingest(encoder.encode, qs, args.encoder_chunks)[0]
        print(json.dumps({"ingest_minilm": report}), flush=True)
        embed_ms = encoder_query_ms(encoder.encode, queries[:50], [passage(q) for q in qs[:200]])
        print(json.dumps({"encoder": embed_ms}), flush=True)
    for size in args.chunks:
        report, recording, store_id = ingest(fast_embed, qs, size)
        print(json.dumps({"ingest_without_encoder": report}), flush=True)
        for backend in args.backends:
            figures = search_speed(
                backend, recording, store_id, fast_embed, queries, args.load_batch, args.load_budget_s
            )
            print(json.dumps(figures), flush=True)
        del recording


if __name__ == "__main__":
    main()
