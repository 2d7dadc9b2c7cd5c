"""Wire shapes of the vector-store routes: OpenAI's vector-store objects where the contract is
silent (it shows no fields; docs/storage.md), plus `chunk_count` on a store file and `ranker` on a search."""

from __future__ import annotations

import operator
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from app.config.model_base import Strict

AttributeValue = str | float | bool
FileStatus = Literal["in_progress", "completed", "failed", "cancelled"]


class FileCounts(BaseModel):
    in_progress: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    total: int = 0


class VectorStoreObject(BaseModel):
    id: str
    object: Literal["vector_store"] = "vector_store"
    created_at: int
    name: str | None = None
    usage_bytes: int = 0
    file_counts: FileCounts = Field(default_factory=FileCounts)
    status: Literal["in_progress", "completed"] = "completed"
    metadata: dict[str, str] = Field(default_factory=dict)
    last_active_at: int | None = None


class VectorStoreCreate(Strict):
    name: str | None = Field(default=None, max_length=256)
    file_ids: list[str] = Field(default_factory=list, max_length=500)
    metadata: dict[str, Annotated[str, Field(max_length=512)]] = Field(default_factory=dict, max_length=16)


class VectorStoreUpdate(Strict):
    name: str | None = Field(default=None, max_length=256)
    metadata: dict[str, Annotated[str, Field(max_length=512)]] | None = Field(default=None, max_length=16)


class VectorStoreList(BaseModel):
    object: Literal["list"] = "list"
    data: list[VectorStoreObject]


class VectorStoreDeleted(BaseModel):
    id: str
    object: Literal["vector_store.deleted"] = "vector_store.deleted"
    deleted: bool = True


class LastError(BaseModel):
    code: str
    message: str


class VectorStoreFileObject(BaseModel):
    id: str = Field(description="the file's id")
    object: Literal["vector_store.file"] = "vector_store.file"
    created_at: int
    vector_store_id: str
    status: FileStatus
    last_error: LastError | None = None
    usage_bytes: int = 0
    chunk_count: int = 0
    attributes: dict[str, AttributeValue] = Field(default_factory=dict)


class FileAttach(Strict):
    file_id: str = Field(min_length=1, max_length=64)
    attributes: dict[str, AttributeValue] = Field(default_factory=dict, max_length=16)


class VectorStoreFileList(BaseModel):
    object: Literal["list"] = "list"
    data: list[VectorStoreFileObject]


class VectorStoreFileDeleted(BaseModel):
    id: str
    object: Literal["vector_store.file.deleted"] = "vector_store.file.deleted"
    deleted: bool = True


class ComparisonFilter(Strict):
    """A file attribute compared with a value (OpenAI's comparison filter)."""

    type: Literal["eq", "ne", "gt", "gte", "lt", "lte"]
    key: str = Field(min_length=1)
    value: AttributeValue


class CompoundFilter(Strict):
    type: Literal["and", "or"]
    filters: list[ComparisonFilter | CompoundFilter] = Field(min_length=1, max_length=32)


class RankingOptions(Strict):
    # hybrid_rerank: hybrid's candidates re-scored by the reranker's fusion (docs/storage.md)
    ranker: Literal["hybrid", "vector", "bm25", "hybrid_rerank"] = "hybrid"
    score_threshold: float = Field(default=0.0, ge=0.0)


class SearchRequest(Strict):
    query: str = Field(min_length=1, max_length=8192, pattern=r"\S")
    max_num_results: int = Field(default=10, ge=1, le=50)
    filters: ComparisonFilter | CompoundFilter | None = None
    ranking_options: RankingOptions = Field(default_factory=RankingOptions)


class SearchContent(BaseModel):
    type: Literal["text"] = "text"
    text: str


class SearchResult(BaseModel):
    file_id: str
    filename: str
    score: float = Field(
        description="hybrid: 0.7 x min-max cosine + 0.3 x min-max BM25 over the candidates, in [0, 1];"
        " hybrid_rerank: the reranker's relevance in [0, 1); vector: cosine; bm25: BM25"
    )
    attributes: dict[str, AttributeValue] = Field(default_factory=dict)
    chunk_id: str
    content: list[SearchContent]


class SearchResults(BaseModel):
    object: Literal["vector_store.search_results.page"] = "vector_store.search_results.page"
    search_query: str
    data: list[SearchResult]
    has_more: bool = False
    next_page: str | None = None


def matches(
    condition: ComparisonFilter | CompoundFilter | None, attributes: dict[str, AttributeValue]
) -> bool:
    """Whether a file's attributes pass the filter (a missing key never matches a comparison)."""
    if condition is None:
        return True
    if isinstance(condition, CompoundFilter):
        results = (matches(f, attributes) for f in condition.filters)
        return all(results) if condition.type == "and" else any(results)
    if condition.key not in attributes:
        return False
    have, want = attributes[condition.key], condition.value
    if condition.type == "eq":
        return have == want
    if condition.type == "ne":
        return have != want
    same_kind = (_numeric(have) and _numeric(want)) or (isinstance(have, str) and isinstance(want, str))
    return same_kind and bool(_ORDER[condition.type](have, want))


def _numeric(value: AttributeValue) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_ORDER = {"gt": operator.gt, "gte": operator.ge, "lt": operator.lt, "lte": operator.le}
