"""In-cluster LLMs without Ray or vLLM: the config block, the reserved addresses, candidate
order (engine first, HTTP fallback after), the upstream client's mount for those addresses,
the in-process ASGI exchange vLLM's app is called through, and the graph's LLMServer
deployments. The real engine behind Serve is tests/vllm (make test-vllm)."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError

from app.config.llm_serving import VLLM_PYTHON_ENV, LLMServingConfig
from app.config.loader import parse_config
from app.config.providers import ProviderModel
from app.llm import addressing
from app.llm.asgi_call import ResponseHead, asgi_exchange
from app.pipeline.selection import model_targets
from app.upstream.client import UpstreamClient
from tests.fakes.pipeline_router import PipelineRouter
from tests.fakes.upstream import FakeUpstream

LLM = {"model_loading_config": {"model_id": "tiny", "model_source": "/models/tiny"}}
BODY = {"model": "MoM", "messages": [{"role": "user", "content": "hi"}]}


# -- config and addresses --------------------------------------------------------------------
def test_a_model_served_in_the_cluster_needs_no_backend_refs() -> None:
    document = {
        "version": "v0.3",
        "providers": {"defaults": {"default_model": "tiny"}, "models": [{"name": "tiny", "llm_config": LLM}]},
    }
    model = parse_config(document).config.providers.models[0]
    assert model.llm_config is not None and model.llm_config.served_name("tiny") == "tiny"
    assert model.llm_config.llm_engine == "vLLM"


@pytest.mark.parametrize(
    "fields, fragment",
    [
        ({"api_format": "anthropic"}, "api_format must be openai"),
        ({"llm_config": {**LLM, "llm_engine": "tgi"}}, "only vLLM"),
        ({"llm_config": {**LLM, "deployment_config": {"func_or_class": "x"}}}, "unknown deployment option"),
        ({"llm_config": {"model_loading_config": {"model_id": "x"}}}, "model_source"),
    ],
)
def test_llm_config_mistakes_are_refused_with_the_reason(fields: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment):
        ProviderModel.model_validate({"name": "m", "llm_config": LLM, **fields})


def test_deployment_options_carry_accelerator_and_the_vllm_interpreter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(VLLM_PYTHON_ENV, "/opt/vllm/bin/python")
    config = LLMServingConfig.model_validate(
        {
            **LLM,
            "accelerator_type": "L4",
            "deployment_config": {
                "autoscaling_config": {"min_replicas": 1, "max_replicas": 4},
                "ray_actor_options": {"num_gpus": 0.5},
            },
        }
    )
    options = config.deployment_options()
    assert options["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 4}
    assert options["ray_actor_options"] == {
        "num_gpus": 0.5,
        "accelerator_type": "L4",
        "runtime_env": {"py_executable": "/opt/vllm/bin/python"},
    }
    explicit = LLMServingConfig.model_validate({**LLM, "runtime_env": {"py_executable": "/x/python"}})
    assert explicit.deployment_options()["ray_actor_options"]["runtime_env"]["py_executable"] == "/x/python"


@pytest.mark.parametrize("name", ["tiny", "meta-llama/Llama-3.1-8B-Instruct", "Qwen.Qwen3 Guard", "ü"])
def test_every_model_name_gets_a_host_that_leads_back_to_its_deployment(name: str) -> None:
    url = httpx.URL(addressing.base_url(name))
    label = url.host.split(".")[0]
    assert len(label) <= 63 and all(c.isalnum() or c == "-" for c in label)
    assert addressing.deployment_of_host(url.host) == addressing.deployment_name(name)
    assert addressing.deployment_name("tiny") != addressing.deployment_name("Tiny")
    assert addressing.deployment_of_host("api.openai.com") is None
    assert addressing.deployment_of_host(addressing.IN_CLUSTER_DOMAIN) is None


def test_the_engine_is_the_first_candidate_and_http_backends_its_fallback() -> None:
    model = ProviderModel.model_validate(
        {"name": "tiny", "llm_config": LLM, "backend_refs": [{"endpoint": "127.0.0.1:9"}]}
    )
    targets = model_targets(model, random.Random(0))
    assert [t.base_url for t in targets] == [addressing.base_url("tiny"), "http://127.0.0.1:9"]
    assert targets[0].upstream_model == "tiny" and targets[0].model == "tiny"
    alone = ProviderModel.model_validate({"name": "tiny", "llm_config": LLM})
    assert len(model_targets(alone, random.Random(0))) == 1


# -- the upstream client's mount ------------------------------------------------------------
async def test_in_cluster_urls_go_through_the_mount_and_fall_back_to_http_when_it_fails() -> None:
    seen: list[httpx.Request] = []
    failing = False

    def engine(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if failing:
            raise httpx.ConnectError("LLMServer: ActorDiedError", request=request)
        body = json.loads(request.content)
        answer = {"choices": [{"message": {"role": "assistant", "content": f"engine:{body['model']}"}}]}
        return httpx.Response(200, json=answer)

    with FakeUpstream(name="fallback") as fallback:
        model = ProviderModel.model_validate(
            {"name": "tiny", "llm_config": LLM, "backend_refs": [{"base_url": fallback.host_url}]}
        )
        targets = model_targets(model, random.Random(0))
        mounts = {addressing.IN_CLUSTER_PATTERN: httpx.MockTransport(engine)}
        async with UpstreamClient(mounts=mounts) as client:
            answered = await client.complete(targets, BODY)
            assert answered.json_body["choices"][0]["message"]["content"] == "engine:tiny"
            assert seen[0].url.path == "/v1/chat/completions" and not fallback.requests
            failing = True
            answered = await client.complete(targets, BODY)
        assert answered.ok and answered.target.base_url == fallback.host_url.rstrip("/")
        assert [a.error for a in answered.attempts][0] is not None and len(fallback.requests) == 1


# -- the in-process ASGI exchange -----------------------------------------------------------
def _app() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        if body.get("bad"):
            return JSONResponse({"error": {"message": "bad request"}}, status_code=400)
        if not body.get("stream"):
            return {"echo": body["messages"][0]["content"], "path": request.url.path}

        async def events() -> AsyncIterator[bytes]:
            yield b"data: 0\n\n"
            yield b"data: 1\n\n"
            await asyncio.Event().wait()  # a generation that goes on until the client leaves
            yield b"data: never\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/v1/boom")
    async def boom() -> Any:
        raise RuntimeError("engine died")

    return app


async def _collect(items: AsyncIterator[ResponseHead | bytes], limit: int | None = None) -> list[Any]:
    out: list[Any] = []
    async for item in items:
        out.append(item)
        if limit is not None and len(out) >= limit:
            break
    return out


async def test_asgi_exchange_answers_head_then_body() -> None:
    body = json.dumps(BODY).encode()
    out = await _collect(
        asgi_exchange(_app(), "POST", "/v1/chat/completions", {"content-type": "application/json"}, body)
    )
    head, *chunks = out
    assert isinstance(head, ResponseHead) and head.status == 200
    assert head.headers["content-type"] == "application/json"
    assert json.loads(b"".join(chunks)) == {"echo": "hi", "path": "/v1/chat/completions"}
    bad = await _collect(
        asgi_exchange(_app(), "POST", "/v1/chat/completions", {}, json.dumps({"bad": 1}).encode())
    )
    assert bad[0].status == 400 and b"bad request" in b"".join(bad[1:])


async def test_asgi_exchange_streams_chunks_as_sent_and_stops_the_app_when_closed() -> None:
    body = json.dumps({**BODY, "stream": True}).encode()
    items = asgi_exchange(_app(), "POST", "/v1/chat/completions", {}, body)
    first = await _collect(items, limit=3)
    assert first[0].headers["content-type"].startswith("text/event-stream")
    assert first[1:] == [b"data: 0\n\n", b"data: 1\n\n"]
    await items.aclose()  # the client went away: the app is cancelled, nothing hangs
    assert not [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]


async def test_asgi_exchange_turns_an_app_crash_into_its_500_page() -> None:
    out = await _collect(asgi_exchange(_app(), "POST", "/v1/boom", {}, b"{}"))
    assert out[0].status == 500


# -- the graph -------------------------------------------------------------------------------
def test_the_graph_adds_one_llm_server_per_in_cluster_model(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deployments.graph import GraphArgs, build_graph
    from deployments.ray_compat import bound_deployment
    from deployments.rollout import SHUTDOWN_POLL_S
    from deployments.versioning import graph_nodes

    monkeypatch.delenv(VLLM_PYTHON_ENV, raising=False)
    llm = {**LLM, "engine_kwargs": {"max_model_len": 256}, "deployment_config": {"num_replicas": 2}}
    document = {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "tiny"},
            "models": [
                {"name": "tiny", "llm_config": llm},
                {"name": "ext", "backend_refs": [{"endpoint": "h:1"}]},
            ],
        },
    }
    args = GraphArgs(state_dir=str(tmp_path), decision_model=False)
    nodes = {bound_deployment(n).name: bound_deployment(n) for n in graph_nodes(build_graph(args, document))}
    server = nodes[addressing.deployment_name("tiny")]
    assert server.init_args == ("/models/tiny", "tiny", {"max_model_len": 256})
    assert server.num_replicas == 2
    assert "LLMServers" in nodes
    # Replacements start before old replicas stop (deployments/rollout.py), except a second engine.
    surging = {name for name, node in nodes.items() if node._deployment_config.max_surge_percent == 100}
    assert surging >= {"Ingress", "Router", "Embedding", "DomainClassifier", "Guard", "Observability"}
    assert server._deployment_config.max_surge_percent == 0
    # Nor a replica that owns a store (docs/configuration.md "One owner"): the Storage (records and
    # Milvus Lite files) and the ResponseCache over the in-memory cache, this document's default.
    for owner in ("Storage", "ResponseCache"):
        assert nodes[owner]._deployment_config.max_surge_percent == 0 and nodes[owner].num_replicas == 1
    # A stopping replica polls its drain at SHUTDOWN_POLL_S, not Serve's 2 s (svc-sr stop, roll-outs).
    polling = {
        n
        for n, node in nodes.items()
        if node._deployment_config.graceful_shutdown_wait_loop_s == SHUTDOWN_POLL_S
    }
    assert polling == surging | {"Storage", "ResponseCache"}
    plain = {**document, "providers": {"models": [{"name": "ext", "backend_refs": [{"endpoint": "h:1"}]}]}}
    names = {bound_deployment(n).name for n in graph_nodes(build_graph(args, plain))}
    assert not any(name.startswith("LLMServer") for name in names)


# -- behind Envoy ------------------------------------------------------------------------------
def _in_cluster_router(with_http: bool) -> PipelineRouter:
    """A RouterClient whose plans name an in-cluster engine first, then (maybe) an HTTP backend."""
    from app.pipeline import PipelineServices, RouterPipeline

    refs = [{"endpoint": "127.0.0.1:9"}] if with_http else []
    document = {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "tiny"},
            "models": [{"name": "tiny", "llm_config": LLM, "backend_refs": refs}],
        },
    }
    return PipelineRouter(
        RouterPipeline(parse_config(document).config, PipelineServices(), rng=random.Random(0))
    )


async def test_the_ext_proc_bridge_forwards_an_in_cluster_model_to_its_http_backend_or_answers_503() -> None:
    from app.exchange.client_api import ChatApi
    from app.exchange.exchange import Exchange, Forward, Reply
    from app.extproc.bridge import ExtProcBridge

    raw = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}).encode()
    with_http = Exchange(ExtProcBridge(_in_cluster_router(with_http=True)).exchange_settings, ChatApi())
    step = await with_http.begin(raw, {})
    assert isinstance(step, Forward)
    assert [t.base_url for t in step.plan.candidates] == ["http://127.0.0.1:9"]
    only_engine = Exchange(ExtProcBridge(_in_cluster_router(with_http=False)).exchange_settings, ChatApi())
    reply = await only_engine.begin(raw, {})
    assert isinstance(reply, Reply) and reply.status == 503
    assert json.loads(reply.body)["error"]["code"] == "upstream_unavailable"


def test_the_embedding_replica_runs_on_cuda_only_when_serve_gave_it_a_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ray

    from deployments.embedding import replica_device

    monkeypatch.setattr(ray, "get_gpu_ids", lambda: [])
    assert replica_device("auto") == "cpu"
    monkeypatch.setattr(ray, "get_gpu_ids", lambda: [0])
    assert replica_device("auto") == "cuda"
    assert replica_device("cpu") == "cpu"  # an explicit device is kept
