"""Session-aware routing (`global.router.session_affinity`, docs/routing-quality.md "Agent
traffic"): keep an agent's working session on one model.

Per-turn routing judges each request alone; in an agent's session that switches models in
the middle of a tool loop (the new model does not know the loop's calls) and throws away the
provider's prefix cache of the conversation. After the select phase chose the model the
human's ask wants, this step reads the session's state and decides, in order:

1. no state yet: `started` (the turn's model becomes the session's);
2. a provider-side state ties the request to a model (`ProviderState`, set by the front door
   for a Responses `previous_response_id`): served by the model that answered the stored
   response, `kept` (`switched` when the session was elsewhere), `provider_state` or
   `reasoning_state` (the stored response has reasoning items), a hard lock;
3. the same model: `kept`, `same_model`;
4. a tool call is pending (the request's tail answers the last assistant message's
   `tool_calls`, app/common/chat_text.py `pending_tool_call`): `kept`, `tool_call_pending`,
   a hard lock;
5. the session's model is no longer configured: `switched`, `model_unavailable`;
6. otherwise the switch is weighed: its expected gain (`switch_value` times the new decision's
   confidence plus what the new model saves on each later turn; when no decision matched, a
   turn that asks for no model as a bare "ok, go ahead", none, or with `step_down` the saving
   alone) against
   its price, the prompt's tokens at the new model's prefix-cache checkout price
   (`Pricing.prefix_cache_checkout_per_1m`: cache_write_per_1m minus cached_input_per_1m):
   `switched`, `gain_beats_price`, or `kept`, `price_beats_gain`.

A kept turn is served by the session's model (its candidates, reliability and pricing); the
decision stays the ask's, so plugins, metrics and accuracy read what the human asked. A store
that is down or slower than `timeout_ms` leaves the turn routed per turn (`per_turn`,
`store_unavailable`): a session never fails a request.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from app.common.chat_text import ask_text, is_ask, pending_tool_call, system_texts
from app.config.global_config import SessionAffinity
from app.config.pricing import Pricing
from app.keys.grant import ModelGrant
from app.pipeline.compiled import CompiledConfig
from app.pipeline.grants import price as model_price
from app.pipeline.phases.select import serve_model
from app.pipeline.plan import ProviderState, RoutePlan, SessionOutcome
from app.pipeline.signals.base import SignalContext, estimate_tokens
from app.state.session_store import SessionState, SessionStore

log = logging.getLogger("svc_sr.pipeline")

Source = Literal["header", "user", "fingerprint"]
Action = Literal["started", "kept", "switched"]
Named = tuple[str, Source]
TIED = ("provider_state", "reasoning_state")  # the reasons of a provider-side lock


def session_key(
    plan: RoutePlan, body: Mapping[str, Any], messages: Sequence[Any], fingerprint: bool
) -> Named | None:
    """The session a request belongs to: the client's `x-session-id`, else the body's `user`
    (digested: a user id is not for the records), else the conversation fingerprint (a digest
    of the system prompt and the first ask, the same on every turn of one conversation)."""
    if plan.session_id:
        return plan.session_id, "header"
    user = body.get("user")
    if isinstance(user, str) and user.strip():
        return f"user-{_digest(user.strip())}", "user"
    if not fingerprint:
        return None
    first = next((m for m in messages if is_ask(m)), None)
    if first is None:
        return None
    seed = "\x1e".join([*system_texts(messages), ask_text(first.get("content"))])
    return f"conv-{_digest(seed)}", "fingerprint"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def prefix_tokens(ctx: SignalContext) -> int:
    """The prompt a provider caches as the conversation's prefix: the messages' text and the
    tool definitions (an agent sends them on every turn)."""
    tools = ctx.body.get("tools")
    return ctx.token_count + (estimate_tokens(json.dumps(tools, default=str)) if tools else 0)


def switch_terms(
    plan: RoutePlan, old: Pricing | None, new: Pricing | None, tokens: int, policy: SessionAffinity
) -> tuple[float, float]:
    """(expected gain, price) of moving the session to the turn's model, in USD. Priced as a
    turn is paid: staying reads the prompt from the old model's prefix cache, switching writes it
    to the new one's (the checkout), and either answers `answer_tokens`; so the gain counts what
    each later turn saves (cached read and answer price), the price the checkout once."""
    price = tokens * (new.prefix_cache_checkout_per_1m if new else 0.0) / 1e6
    saved = (
        tokens * (_rate(old, "cached") - _rate(new, "cached"))
        + policy.answer_tokens * (_rate(old, "answer") - _rate(new, "answer"))
    ) / 1e6
    if plan.reason_code == "default_model":  # no decision matched: the turn asks for no model
        return (saved if policy.step_down else 0.0), price
    return plan.confidence * policy.switch_value + saved, price


def _rate(pricing: Pricing | None, part: Literal["cached", "answer"]) -> float:
    if pricing is None:
        return 0.0
    return pricing.effective_cached_input_per_1m if part == "cached" else pricing.completion_per_1m


def _tied(tie: ProviderState | None, state: CompiledConfig, grant: ModelGrant | None) -> bool:
    """A provider-side tie that binds: to a configured model the key may use."""
    return (
        tie is not None
        and state.models.get(tie.model) is not None
        and (grant is None or tie.model in grant.models)
    )


def judge(
    previous: SessionState | None,
    plan: RoutePlan,
    state: CompiledConfig,
    tokens: int,
    pending: bool,
    policy: SessionAffinity,
    tie: ProviderState | None = None,
    grant: ModelGrant | None = None,
) -> tuple[Action, str, float | None, float | None]:
    """(action, reason, gain, price) of one turn (the module's order); a tie to a model that is
    no longer configured, or that the request's API key may not use, is routed as if there were
    none: a session never widens a key's grants (docs/security.md "Keys and budgets")."""
    if _tied(tie, state, grant):
        assert tie is not None
        moved = previous is not None and previous.model not in (None, tie.model)
        return (
            ("switched" if moved else "kept"),
            ("reasoning_state" if tie.reasoning else "provider_state"),
            None,
            None,
        )
    if previous is None or previous.model is None:
        return "started", "new_session", None, None
    if previous.model == plan.selected_model:
        return "kept", "same_model", None, None
    old = state.models.get(previous.model)
    if old is None:
        return "switched", "model_unavailable", None, None
    if grant is not None and previous.model not in grant.models:
        return "switched", "not_granted", None, None
    if pending:
        return "kept", "tool_call_pending", None, None
    # the key's budget stepped the selection down: a session does not hold a dearer model past
    # it (a pending tool call above still does: the limit itself still answers 429)
    if (
        grant is not None
        and grant.step_down
        and plan.selected_model is not None
        and model_price(state.models, previous.model) > model_price(state.models, plan.selected_model)
    ):
        return "switched", "budget_step_down", None, None
    new = state.models.get(plan.selected_model or "")
    gain, price = switch_terms(plan, old.pricing, new.pricing if new else None, tokens, policy)
    if gain > price:
        return "switched", "gain_beats_price", gain, price
    return "kept", "price_beats_gain", gain, price


async def session_step(
    store: SessionStore | None,
    state: CompiledConfig,
    plan: RoutePlan,
    ctx: SignalContext,
    rng: random.Random,
    *,
    preview: bool,
    grant: ModelGrant | None = None,
) -> None:
    """Session-aware routing of one auto turn whose model is selected (see the module doc); a
    preview reads the session and writes nothing."""
    policy, tie = state.config.global_.router.session_affinity, plan.tie
    if not policy.enabled or store is None or plan.selected_model is None or plan.immediate is not None:
        return
    named = session_key(plan, ctx.body, ctx.messages, policy.fingerprint)
    if named is None:
        return
    key, source = named
    pending = pending_tool_call(ctx.messages)
    try:
        previous = await asyncio.wait_for(store.get(key), policy.timeout_ms / 1000)
    except Exception as exc:  # down, slow or unreadable: route this turn alone
        log.warning("session store unavailable, routing per turn: %s", exc)
        if _tied(tie, state, grant):  # the tie needs no store
            assert tie is not None
            serve_model(state, plan, tie.model, rng)
        plan.session = SessionOutcome(
            key=key, source=source, action="per_turn", reason="store_unavailable", tool_pending=pending
        )
        plan.session.model = plan.selected_model
        return
    action, reason, gain, price = judge(
        previous, plan, state, prefix_tokens(ctx), pending, policy, tie, grant
    )
    held = (
        tie.model
        if tie is not None and reason in TIED
        else (previous.model if action == "kept" and previous else None)
    )
    if held and held != plan.selected_model:
        serve_model(state, plan, held, rng)
    outcome = plan.session = SessionOutcome(
        key=key,
        source=source,
        action=action,
        reason=reason,
        model=plan.selected_model,
        previous_model=previous.model if previous else None,
        turns=previous.turns if previous else 0,
        tool_pending=pending,
        gain=gain,
        price=price,
    )
    if preview:
        return
    after = SessionState(
        model=plan.selected_model,
        decision=plan.decision,
        turns=outcome.turns + 1,
        tool_pending=pending,
        updated_at=time.time(),
    )
    try:
        await asyncio.wait_for(store.put(key, after, policy.ttl_seconds), policy.timeout_ms / 1000)
    except Exception as exc:  # the turn is routed; the next one starts the session again
        log.warning("session store write failed: %s", exc)


__all__ = ["judge", "session_key", "session_step", "switch_terms"]
