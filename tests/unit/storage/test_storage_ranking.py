"""Vector-store search ranking (app/storage/ranking.py): BM25's terms (stopwords,
light stemmer), weighted RRF and convex fusion, and the hybrid_rerank option end to end on a
tiny store where the rerank changes the order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from app.config.plugins import RagPlugin
from app.storage import ranking
from app.storage.files import FileStore
from app.storage.schemas import FileAttach, RankingOptions, SearchRequest, VectorStoreCreate
from app.storage.vector_index import Bm25, Chunk, MemoryVectorIndex
from app.storage.vector_stores import VectorStores


def chunk(cid: str, text: str = "") -> Chunk:
    return Chunk(cid, "s", f"f{cid}", 0, text)


def test_stemmer_brings_inflections_together() -> None:
    for forms in (
        ("file", "files", "filed"),
        ("copy", "copies", "copied", "copying"),
        ("create", "created", "creates", "creating"),
        ("stop", "stopped", "stopping", "stops"),
        ("entry", "entries"),
        ("box", "boxes"),
    ):
        assert len({ranking.stem(w) for w in forms}) == 1, forms
    assert ranking.stem("class") == "class" and ranking.stem("status") == "status"  # -ss, -us kept
    assert ranking.stem("string") == "string"  # no vowel before -ing: not a suffix
    assert ranking.stem("md5") == "md5" and ranking.stem("run") == "run"


def test_terms_drop_stopwords_and_case() -> None:
    assert ranking.terms("The Files of THE system, and 42 copies") == ["fil", "system", "42", "copi"]
    assert ranking.terms("what is it") == []


def test_bm25_with_terms_matches_inflected_forms() -> None:
    chunks = [chunk("0", "the file was copied to the backup disk"), chunk("1", "bake bread in the oven")]
    stemmed = Bm25(chunks, tokenize=ranking.terms)
    assert [c.id for c, _ in stemmed.search("copying files", 5, None)] == ["0"]
    assert Bm25(chunks).search("copying files", 5, None) == []  # plain words: no common term
    assert stemmed.search("the of and", 5, None) == []  # stopwords alone match nothing


def test_weighted_rrf_orders_by_weight() -> None:
    x, z = chunk("x"), chunk("z")
    vector, lexical = [(x, 0.9)], [(z, 7.0)]
    assert [c.id for c, _ in ranking.rrf([vector, lexical], 2, [2.0, 1.0])] == ["x", "z"]
    assert [c.id for c, _ in ranking.rrf([vector, lexical], 2, [1.0, 2.0])] == ["z", "x"]
    fused = ranking.rrf([vector, lexical], 2, [2.0, 1.0])
    assert fused[0][1] == pytest.approx(2 / 61) and fused[1][1] == pytest.approx(1 / 61)


def test_convex_fusion_normalizes_each_ranking() -> None:
    x, y, z = chunk("x"), chunk("y"), chunk("z")
    vector = [(x, 0.9), (y, 0.5), (z, 0.1)]
    lexical = [(z, 10.0), (y, 5.0)]
    fused = ranking.convex([vector, lexical], 3, [0.7, 0.3])
    assert [(c.id, round(s, 3)) for c, s in fused] == [("x", 0.7), ("y", 0.35), ("z", 0.3)]
    lexical_heavy = ranking.convex([vector, lexical], 3, [0.2, 0.8])
    assert [c.id for c, _ in lexical_heavy] == ["z", "x", "y"]
    # one candidate (no spread) counts fully; an empty ranking adds nothing
    assert ranking.convex([[(x, 0.3)], []], 1, [0.7, 0.3]) == [(x, pytest.approx(0.7))]
    assert ranking.hybrid(vector, lexical, 1)[0][0] == x


def test_ranker_option_accepts_hybrid_rerank() -> None:
    assert RankingOptions(ranker="hybrid_rerank").ranker == "hybrid_rerank"
    assert RankingOptions().ranker == "hybrid"
    with pytest.raises(ValidationError):
        RankingOptions.model_validate({"ranker": "rerank"})
    assert RagPlugin(vector_store_id="kb", ranker="hybrid_rerank").ranker == "hybrid_rerank"
    with pytest.raises(ValidationError):
        RagPlugin.model_validate({"vector_store_id": "kb", "ranker": "cross_encoder"})


QUERY = "rocket orbit"
VECTORS = {  # cosine with the query: A 0.95, B 0.70, C 0
    QUERY: [1.0, 0.0, 0.0],
    "rocket launch pad today": [0.95, float(np.sqrt(1 - 0.95**2)), 0.0],
    "rocket orbit rocket orbit": [0.70, float(np.sqrt(1 - 0.70**2)), 0.0],
    "bread dough yeast": [0.0, 0.0, 1.0],
}


def table_embed(texts: list[str]) -> np.ndarray:
    return np.array([VECTORS[t] for t in texts], np.float32)


def test_hybrid_rerank_rescores_the_hybrid_candidates(tmp_path: Path) -> None:
    files = FileStore(tmp_path / "files", 1 << 20, 100)
    stores = VectorStores(
        tmp_path, files, MemoryVectorIndex(), table_embed, chunk_words=50, chunk_overlap_words=5
    )
    try:
        store = stores.create(VectorStoreCreate(name="tiny"))
        names = {}
        for text in list(VECTORS)[1:]:
            record = files.create(f"{text.split()[0]}-{len(names)}.txt", text.encode(), "assistants")
            names[record.id] = text
            stores.attach(store.id, FileAttach(file_id=record.id))
        stores.wait_idle(30)

        def top(ranker: str) -> list[tuple[str, float]]:
            request = SearchRequest(query=QUERY, max_num_results=3, ranking_options={"ranker": ranker})
            return [(names[h.file_id], h.score) for h in stores.search(store.id, request).data]

        hybrid, reranked = top("hybrid"), top("hybrid_rerank")
        # hybrid: min-max BM25 gives the two-term chunk the full lexical 0.3, ahead of A's cosine
        assert [t for t, _ in hybrid][:2] == ["rocket orbit rocket orbit", "rocket launch pad today"]
        assert hybrid[0][1] == pytest.approx(0.7 * (0.70 / 0.95) + 0.3, abs=1e-4)
        # the reranker's absolute fusion (0.7 x (cos+1)/2 + 0.3 x BM25 squashed) favours cosine
        assert [t for t, _ in reranked][:2] == ["rocket launch pad today", "rocket orbit rocket orbit"]
        assert all(0.0 <= s < 1.0 for _, s in reranked)
        assert reranked == sorted(reranked, key=lambda r: -r[1])
    finally:
        stores.close()
