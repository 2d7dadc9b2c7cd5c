"""The key check both front doors run, once, in the exchange (app/exchange/exchange.py):

    admission = await gate.admit(headers)       # 401, 429 (the key's rate limit or its budget)
    plan = route(..., grant=admission.grant)    # grants and step-down applied by the Router
    await admission.reserve(pricing, model, body)  # 429 when the budget filled meanwhile
    ... the upstream answers ...
    await admission.settle(cost)                # the real cost replaces the estimate

The key is `Authorization: Bearer <key>`, else `x-api-key`. A listener with
`api_key_required` refuses a request without a known key (401); one without it serves a
request without a key, or with an unknown one, as before (no grants, no budget), and applies a
known key's grants and budget. A key store that does not answer keeps the keys this process
read last (a revocation is seen once it answers again); with none read yet a required key
answers 503. A spend store that does not answer lets the request through (logged).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from app.accounting.cost import compute_cost
from app.common.errors import SvcError, rate_limited, upstream_unavailable
from app.config.document import RouterConfig
from app.config.global_config import ApiKeysConfig
from app.config.pricing import Pricing
from app.keys.grant import ModelGrant
from app.keys.records import KeyRecord, KeyStore
from app.keys.spend import Counter, MemorySpend, SpendStore, counter
from app.observability.metrics import MetricsRecorder
from app.state.rate_buckets import Bucket, BucketStore, MemoryBuckets
from app.state.shared_store import StoreUnavailable
from app.state.state_stores import StoreCorrupt

log = logging.getLogger("svc_sr.keys")

# Completion tokens reserved for a request that sets no max_tokens.
DEFAULT_COMPLETION_ESTIMATE = 1024
LOG_EVERY_S = 30.0
SPEND_METRIC = "svc_router_api_key_spend_usd_total"


def api_key(headers: Mapping[str, str]) -> str | None:
    """The caller's API key: `Authorization: Bearer <key>`, else `x-api-key` (None: neither)."""
    auth = (headers.get("authorization") or "").strip()
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    key = (headers.get("x-api-key") or "").strip()
    return key or None


def keys_required(config: RouterConfig) -> bool:
    """A listener that requires keys closes the data plane: both front doors serve every
    listener's traffic (the Ingress and Envoy's ext_proc see the same requests)."""
    return any(listener.api_key_required for listener in config.listeners)


def listener_models(config: RouterConfig) -> list[str] | None:
    """The listeners' public model grants (None: none sets them). Both front doors serve every
    listener's traffic, so, as with keys_required, the strictest applies: the models every
    listener that sets grants allows, in the first one's order."""
    sets = [listener.models for listener in config.listeners if listener.models is not None]
    if not sets:
        return None
    return [m for m in sets[0] if all(m in other for other in sets[1:])]


def unauthorized(message: str, code: str) -> SvcError:
    return SvcError(401, message, "authentication_error", code, headers={"www-authenticate": "Bearer"})


class ModelNotGranted(SvcError):
    """403 for a model outside the caller's grants (its key's within the listeners'), in the
    data plane's security_violation shape.
    Raised on a Router replica: it pickles by its own arguments to reach the front door."""

    def __init__(self, model: str, granted: list[str]) -> None:
        super().__init__(
            403,
            f"model {model!r} is not granted to this caller (its API key's or the listener's grants)",
            "security_violation",
            "model_not_granted",
            details={"model": model, "granted": granted, "action_taken": "block"},
        )
        self.model, self.granted = model, granted

    def __reduce__(self) -> tuple[type[ModelNotGranted], tuple[str, list[str]]]:
        return ModelNotGranted, (self.model, self.granted)


def budget_exceeded(c: Counter, spent: float) -> SvcError:
    """429 at a budget's limit, Retry-After until its period ends."""
    wait = max(1.0, (c.period.end - datetime.now(UTC)).total_seconds())
    error = rate_limited(wait)
    error.code = "budget_exceeded"
    error.message = (
        f"budget exceeded: {c.owner} spent {spent:.6f} of {c.budget.usd} USD this {c.budget.period}"
    )
    error.details = {
        "budget": {
            "owner": c.owner,
            "usd": c.budget.usd,
            "period": c.budget.period,
            "spent_usd": round(spent, 6),
            "resets_at": c.period.end.isoformat(),
        }
    }
    return error


class SpendView(BaseModel):
    """One budget of a key (its own, or its team's) in the current period."""

    owner: str  # key:<id> or team:<name>
    usd: float
    period: str
    spent_usd: float
    resets_at: str


@dataclass
class Admission:
    """A known key's request: what the Router is told, and what it reserved."""

    gate: KeyGate
    record: KeyRecord
    counters: list[Counter]
    grant: ModelGrant
    reserved: float = 0.0
    settled: bool = field(default=False)

    async def reserve(
        self, pricing: Mapping[str, Pricing], model: str | None, body: Mapping[str, Any]
    ) -> Admission:
        """Reserve the estimated cost of `body` on `model` (priced by `pricing`)."""
        return await self.gate.reserve(self, pricing.get(model or ""), body)

    async def settle(self, cost: float | None) -> None:
        await self.gate.settle(self, cost)


class KeyGate:
    def __init__(
        self,
        store: KeyStore,
        required: Callable[[], bool],
        settings: Callable[[], ApiKeysConfig],
        listener_models: Callable[[], list[str] | None] = lambda: None,
        spend: SpendStore | None = None,
        buckets: BucketStore | None = None,
        on_spend: Callable[[KeyRecord, float], None] | None = None,
    ) -> None:
        """`on_spend`: called with each settled cost (the spend metrics); `listener_models`:
        the listeners' public model grants (None: none)."""
        self.store = store
        self.required = required
        self.listener_models = listener_models
        self.settings = settings
        self.spend = spend or MemorySpend()
        self.buckets = buckets or MemoryBuckets()
        self.on_spend = on_spend
        self._logged_at = -LOG_EVERY_S

    async def authenticate(self, headers: Mapping[str, str]) -> KeyRecord | None:
        """The caller's key (401 where keys are required and it has no known one); None: a
        caller without a known key where none is required. Every data-plane route asks this."""
        secret = api_key(headers)
        required = self.required()
        self.store.cache_seconds = self.settings().cache_seconds
        if secret is None:
            if required:
                raise unauthorized(
                    "an API key is required (Authorization: Bearer or x-api-key)", "missing_api_key"
                )
            return None
        record = await self._lookup(secret, required)
        if record is None and required:
            raise unauthorized("invalid API key (unknown or revoked)", "invalid_api_key")
        return record

    def granted(self, record: KeyRecord | None) -> list[str] | None:
        """The provider models a caller may use (None: any): its key's grants within the
        listeners' (a key never widens them), the listeners' alone without a key."""
        bound = self.listener_models()
        if record is None:
            return bound
        return [m for m in record.models if bound is None or m in bound]

    def listener_grant(self) -> ModelGrant | None:
        """What the Router is told about a request without a known key: the listeners' grants."""
        bound = self.listener_models()
        return None if bound is None else ModelGrant(key_id=None, models=bound)

    async def admit(self, headers: Mapping[str, str]) -> Admission | None:
        """The request's key checked (module doc); None: served without one."""
        record = await self.authenticate(headers)
        if record is None:
            return None
        await self._rate_limit(record)
        counters = self._counters(record)
        spent = await self._spent(counters)
        return Admission(self, record, counters, self._grant(record, counters, spent))

    async def _lookup(self, secret: str, required: bool) -> KeyRecord | None:
        if self.store.fresh():  # no I/O, no thread hop: most requests (SDKs always send a key)
            found = self.store.last_read(secret)
            # a miss where keys are required is re-checked, at most every MISS_RECHECK_S
            if found is not None or not required or self.store.miss_settled():
                return found
        try:
            return await asyncio.to_thread(self.store.lookup, secret)
        except (StoreUnavailable, StoreCorrupt) as exc:
            stale = self.store.last_read(secret)
            if stale is not None or self.store.has_read:
                self._log_degraded(exc)
                return stale
            if required:
                raise upstream_unavailable(
                    retry_after=1, message="the API key store does not answer"
                ) from None
            return None

    async def _rate_limit(self, record: KeyRecord) -> None:
        rule = record.rate_limit
        if rule is None:
            return
        try:
            taken = await self.buckets.take(
                [Bucket(f"apikey:{record.id}", rule.capacity, rule.requests_per_minute / 60)]
            )
        except Exception as exc:  # a store that is down: let the request through
            self._log_degraded(exc)
            return
        if not taken.allowed:
            error = rate_limited(taken.wait_s)
            error.details = {
                "limit": "api_key",
                "key": record.id,
                "requests_per_minute": rule.requests_per_minute,
            }
            raise error

    def _counters(self, record: KeyRecord) -> list[Counter]:
        now = datetime.now(UTC)
        out = []
        if record.budget is not None:
            out.append(counter(f"key:{record.id}", record.budget, now))
        team = self.settings().teams.get(record.team) if record.team else None
        if team is not None:
            out.append(counter(f"team:{record.team}", team, now))
        return out

    async def _spent(self, counters: list[Counter]) -> list[float]:
        if not counters:
            return []
        try:
            return await self.spend.spent(counters)
        except Exception as exc:
            self._log_degraded(exc)
            return [0.0] * len(counters)

    def _grant(self, record: KeyRecord, counters: list[Counter], spent: list[float]) -> ModelGrant:
        grant = ModelGrant(key_id=record.id, models=self.granted(record) or [])
        if not counters:
            return grant
        # The budget nearest its limit speaks for the request.
        c, used = max(zip(counters, spent, strict=True), key=lambda pair: pair[1] / pair[0].budget.usd)
        fraction = used / c.budget.usd
        if fraction >= 1.0:
            raise budget_exceeded(c, used)
        grant.spent_usd, grant.limit_usd = round(used, 6), c.budget.usd
        grant.step_down = fraction >= self.settings().step_down_at
        return grant

    async def spend_of(self, record: KeyRecord) -> list[SpendView]:
        """The key's budgets in their current periods, with what was spent (reservations
        in flight included); raises StoreUnavailable."""
        counters = self._counters(record)
        spent = await self.spend.spent(counters) if counters else []
        return [
            SpendView(
                owner=c.owner,
                usd=c.budget.usd,
                period=c.budget.period,
                spent_usd=round(s, 6),
                resets_at=c.period.end.isoformat(),
            )
            for c, s in zip(counters, spent, strict=True)
        ]

    async def reserve(
        self, admission: Admission, pricing: Pricing | None, body: Mapping[str, Any]
    ) -> Admission:
        """Reserve the request's estimated cost on its budgets (429 when one filled meanwhile)."""
        if not admission.counters:
            return admission
        amount = estimate_cost(pricing, body)
        try:
            reserved = await self.spend.reserve(admission.counters, amount)
        except Exception as exc:
            self._log_degraded(exc)
            return admission
        if reserved.full is not None:
            raise budget_exceeded(reserved.full, reserved.spent)
        admission.reserved = amount
        return admission

    async def settle(self, admission: Admission, cost: float | None) -> None:
        """The real cost replaces the reservation, once (None: unknown, the estimate stays
        spent); never raises."""
        if admission.settled:
            return
        admission.settled = True
        cost = admission.reserved if cost is None else cost
        delta = cost - admission.reserved
        try:
            if admission.counters and delta:
                await self.spend.settle(admission.counters, delta)
        except Exception as exc:
            self._log_degraded(exc)
        if self.on_spend is not None and cost > 0:
            try:
                self.on_spend(admission.record, cost)
            except Exception:  # metrics must never fail a request
                log.exception("spend metric failed for key %s", admission.record.id)

    def _log_degraded(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            self._logged_at = now
            log.warning("API keys degraded (the store does not answer): %s", exc)


def estimate_cost(pricing: Pricing | None, body: Mapping[str, Any]) -> float:
    """An upper estimate of a request's cost: a token per 3 bytes of its messages, and its
    max_tokens (else DEFAULT_COMPLETION_ESTIMATE) of completion."""
    if pricing is None:
        return 0.0
    prompt = math.ceil(len(str(body.get("messages") or body.get("input") or "")) / 3)
    limit = body.get("max_completion_tokens") or body.get("max_tokens") or body.get("max_output_tokens")
    completion = limit if isinstance(limit, int) and limit > 0 else DEFAULT_COMPLETION_ESTIMATE
    return float(compute_cost({"prompt_tokens": prompt, "completion_tokens": completion}, pricing))


def key_gate(
    keys: KeyStore,
    config: Callable[[], RouterConfig],
    recorder: Callable[[], MetricsRecorder],
    spend: SpendStore | None = None,
    buckets: BucketStore | None = None,
) -> KeyGate:
    """A front door's gate: `config` the configuration it serves (its listeners and
    `global.services.api_keys`), each settled cost into `recorder` (the spend metric)."""

    def spent(record: KeyRecord, cost: float) -> None:
        recorder().inc(SPEND_METRIC, cost, key_id=record.id, key_name=record.name)

    return KeyGate(
        keys,
        required=lambda: keys_required(config()),
        listener_models=lambda: listener_models(config()),
        settings=lambda: config().global_.services.api_keys,
        spend=spend,
        buckets=buckets,
        on_spend=spent,
    )
