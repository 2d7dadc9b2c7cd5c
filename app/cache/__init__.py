"""Semantic response cache: backend-neutral protocol and the in-memory backend."""

from app.cache.base import CacheHit, CacheStats, CacheTuning, ResponseCacheStore
from app.cache.memory import InMemorySemanticCache

__all__ = ["CacheHit", "CacheStats", "CacheTuning", "InMemorySemanticCache", "ResponseCacheStore"]
