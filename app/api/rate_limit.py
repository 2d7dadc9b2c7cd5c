"""Request rate limits of the data plane (`global.services.ratelimit`), a FastAPI dependency of
every data-plane route (/v1/chat/completions, /v1/responses*, /v1/models).

    global:
      services:
        ratelimit:
          enabled: true
          per_key: {requests_per_minute: 60, burst: 10}     # each API key's own bucket
          routes:                                            # one bucket per route, all callers
            /v1/chat/completions: {requests_per_minute: 600}
            /v1/responses/{response_id}: {requests_per_minute: 120, burst: 20}

Token buckets: each holds `burst` tokens (default: `requests_per_minute`) and refills at
`requests_per_minute`; a request takes one token from its key's bucket and from its route's,
or, when one is empty, from neither and answers 429 `RATE_LIMIT_EXCEEDED` with Retry-After
(whole seconds until the empty bucket holds a token again, at least 1). The API key is the
`Authorization: Bearer` token, else `x-api-key`; requests without one share the bucket
`anonymous`. Keys are kept hashed, never as sent. Routes are named by their template, as the
OpenAPI document lists them. The settings are read from the live configuration per request.

The buckets live in the management store's Redis when there is one (`backend: auto` or
`redis`: every Ingress replica on every node takes from the same buckets), else in the
replica's memory (`memory`, or no Redis: each replica limits on its own). A store that is
down lets the request through and says so in the log (at most every 30 s); a limiter never
fails a request.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping

from fastapi import Request

from app.api.dataplane import ConfigView
from app.common.errors import rate_limited
from app.config.global_config import RateLimitConfig, RateLimitRule
from app.keys.gate import api_key
from app.state.rate_buckets import Bucket, BucketStore, MemoryBuckets

log = logging.getLogger("svc_sr.rate_limit")

ANONYMOUS = "anonymous"
LOG_EVERY_S = 30.0


def key_bucket_name(key: str | None) -> str:
    if key is None:
        return f"key:{ANONYMOUS}"
    return "key:" + hashlib.sha256(key.encode()).hexdigest()[:32]


def _bucket(name: str, rule: RateLimitRule) -> Bucket:
    return Bucket(name, rule.capacity, rule.requests_per_minute / 60.0)


class RateLimiter:
    def __init__(self, config: ConfigView, shared: BucketStore | None = None) -> None:
        self._config = config
        self._shared = shared
        self._local = MemoryBuckets()
        self._logged_at = -LOG_EVERY_S

    def settings(self) -> RateLimitConfig:
        return self._config.current().global_.services.ratelimit

    def backend(self, settings: RateLimitConfig) -> BucketStore:
        if settings.backend == "memory" or self._shared is None:
            return self._local
        return self._shared

    def buckets(self, settings: RateLimitConfig, route: str, headers: Mapping[str, str]) -> list[Bucket]:
        out: list[Bucket] = []
        if settings.per_key is not None:
            out.append(_bucket(key_bucket_name(api_key(headers)), settings.per_key))
        rule = settings.routes.get(route)
        if rule is not None:
            out.append(_bucket(f"route:{route}", rule))
        return out

    async def check(self, route: str, headers: Mapping[str, str]) -> None:
        """Take this request's tokens; raises SvcError 429 when a bucket is empty."""
        settings = self.settings()
        if not settings.enabled:
            return
        buckets = self.buckets(settings, route, headers)
        if not buckets:
            return
        try:
            taken = await self.backend(settings).take(buckets)
        except Exception as exc:  # a store that is down, or anything else: let the request through
            self._log_degraded(exc)
            return
        if taken.empty is not None:
            scope = "per_key" if taken.empty.name.startswith("key:") else "route"
            error = rate_limited(taken.wait_s)
            error.details = {
                "limit": scope,
                "route": route,
                "requests_per_minute": round(taken.empty.per_second * 60),
            }
            raise error

    def _log_degraded(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            self._logged_at = now
            log.warning("rate limits not applied (requests let through): %s", exc)

    async def __call__(self, request: Request) -> None:
        """The FastAPI dependency: the matched route's template names its bucket."""
        route = getattr(request.scope.get("route"), "path", None) or request.url.path
        await self.check(route, {k.lower(): v for k, v in request.headers.items()})
