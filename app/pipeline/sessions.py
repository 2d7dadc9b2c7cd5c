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
6. a turn that matched no decision (a bare "ok, go ahead" asks for no model): `kept`,
   `no_decision`, unless `step_down` lets it move to a cheaper default on the saving alone;
7. otherwise the switch is weighed, priced as turns are paid (`Pricing.turn_cost`; the session
   remembers how much of the conversation each model it used has in its prefix cache): its
   price is the prefix-cache checkout (`Pricing.prefix_cache_checkout_per_1m`, cache write
   minus cached read) of the prompt the new model has not cached; its expected gain is the
   decision's value (`switch_value` times its confidence) plus what this turn saves (the old
   model's read of its cache and write of the rest, against the new model's cached price) plus
   what each of the `horizon_turns` later turns saves on the new model (cached read and
   answer): `switched`, `gain_beats_price`, or `kept`, `price_beats_gain`. The old model's
   cache is not lost by a switch (a provider keeps one per model), so coming back to it pays
   only what it has not seen.

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


def remember(previous: SessionState | None, model: str | None, tokens: int) -> dict[str, int]:
    """Each model's prefix cache of the session after a turn `model` served: this turn's prompt
    (its answer comes back as new text next turn); the others keep theirs."""
    cached = dict(previous.cached) if previous is not None else {}
    if model is not None:
        cached[model] = tokens
    return cached


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def prefix_tokens(ctx: SignalContext) -> int:
    """The prompt a provider caches as the conversation's prefix: the messages' text and the
    tool definitions (an agent sends them on every turn)."""
    tools = ctx.body.get("tools")
    return ctx.token_count + (estimate_tokens(json.dumps(tools, default=str)) if tools else 0)


def switch_terms(
    plan: RoutePlan,
    old: Pricing | None,
    new: Pricing | None,
    tokens: int,
    policy: SessionAffinity,
    cached: tuple[int, int] | None = None,
) -> tuple[float, float]:
    """(expected gain, price) of moving the session to the turn's model, in USD (the module's
    step 7). `cached`: the prompt tokens the old and the new model hold in their prefix caches
    of this conversation (default: the old one all of it, the new one nothing)."""
    held_old, held_new = cached if cached is not None else (tokens, 0)
    answer = policy.answer_tokens
    price = (
        (tokens - min(max(held_new, 0), tokens)) * (new.prefix_cache_checkout_per_1m if new else 0.0) / 1e6
    )
    now = _cost(old, tokens, held_old, answer) - _cost(new, tokens, tokens, answer)
    later = _cost(old, tokens, tokens, answer) - _cost(new, tokens, tokens, answer)
    value = 0.0 if plan.reason_code == "default_model" else plan.confidence * policy.switch_value
    return value + now + policy.horizon_turns * later, price


def _cost(pricing: Pricing | None, tokens: int, cached: int, answer: int) -> float:
    return pricing.turn_cost(tokens, cached, answer) if pricing is not None else 0.0


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
    if plan.reason_code == "default_model" and not policy.step_down:
        return "kept", "no_decision", None, None
    new = state.models.get(plan.selected_model or "")
    held = (previous.cached.get(previous.model, tokens), previous.cached.get(plan.selected_model or "", 0))
    gain, price = switch_terms(plan, old.pricing, new.pricing if new else None, tokens, policy, held)
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
    tokens = prefix_tokens(ctx)
    action, reason, gain, price = judge(previous, plan, state, tokens, pending, policy, tie, grant)
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
        cached=remember(previous, plan.selected_model, tokens),
        updated_at=time.time(),
    )
    try:
        await asyncio.wait_for(store.put(key, after, policy.ttl_seconds), policy.timeout_ms / 1000)
    except Exception as exc:  # the turn is routed; the next one starts the session again
        log.warning("session store write failed: %s", exc)


__all__ = ["judge", "session_key", "session_step", "switch_terms"]
