"""A listener's public model grants (the Ingress app in process, the real pipeline, the OpenAI
SDK, a fake upstream on 127.0.0.1): they bound every key's grants (a key never widens them),
alone apply to a caller without a key, MoM never leaves them, an explicit model outside them is
403, and a document whose listener grants an unknown model is refused."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from app.config.loader import ConfigError, parse_config
from app.management.documents import restart_required
from tests.fakes.configs import keyed
from tests.fakes.upstream import FakeUpstream
from tests.unit.keys.test_keys_api import http, ingress, issue, sdk


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream(name="llm") as fake:
        yield fake


async def routed(client: openai.AsyncOpenAI, model: str = "MoM") -> str:
    answer = await client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "hello there"}]
    )
    return answer.headers["x-selected-model"]


async def test_without_keys_the_listeners_grants_alone_apply(upstream: FakeUpstream) -> None:
    app = ingress(upstream, required=False, listener_models=["cheap", "other"])
    anyone = sdk(app, "sk-svc-not-a-key")  # unknown where none is required: served without one
    assert await routed(anyone) == "cheap"  # MoM's default `pricey` is outside: the listener's first
    with pytest.raises(openai.PermissionDeniedError) as refused:
        await routed(anyone, "pricey")
    assert refused.value.code == "model_not_granted"
    assert await routed(anyone, "other") == "other"
    assert [m.id async for m in anyone.models.list()] == ["MoM", "cheap", "other"]


async def test_a_key_never_widens_the_listeners_grants(upstream: FakeUpstream) -> None:
    app = ingress(upstream, listener_models=["cheap", "other"])
    wide = sdk(app, (await issue(app, name="wide", models=["pricey", "cheap"]))["key"])
    assert await routed(wide) == "cheap"
    for outside in ("pricey", "other"):  # the listener's alone, the key's alone
        with pytest.raises(openai.PermissionDeniedError) as refused:
            await routed(wide, outside)
        assert refused.value.body["details"]["granted"] == ["cheap"]  # type: ignore[index]
    assert [m.id async for m in wide.models.list()] == ["MoM", "cheap"]


async def test_without_listener_grants_a_caller_without_a_key_reaches_every_model(
    upstream: FakeUpstream,
) -> None:
    app = ingress(upstream, required=False)
    async with http(app) as client:
        answer = await client.post(
            "/v1/chat/completions", json={"model": "MoM", "messages": [{"role": "user", "content": "hi"}]}
        )
    assert answer.status_code == 200 and answer.headers["x-selected-model"] == "pricey"


def test_a_listener_granting_an_unknown_model_is_refused() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(keyed("http://127.0.0.1:9", listener_models=["cheap", "nope"]))
    assert "grants unknown models: nope" in str(refused.value)


def test_a_change_of_a_listeners_grants_needs_a_restart() -> None:
    """Both doors must agree: the ext_proc sidecar reads the listeners at start."""
    old = parse_config(keyed("http://127.0.0.1:9")).config
    new = parse_config(keyed("http://127.0.0.1:9", listener_models=["cheap"])).config
    assert [r.path for r in restart_required(old, new)] == ["listeners[0].models"]
