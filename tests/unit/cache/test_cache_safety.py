"""The response-cache rules users get burned by, through the real pipeline (MiniLM encoder,
in-memory cache): a negation is never a hit, an answer never crosses a system prompt, a
tool list, a tenant or a user, error answers / cut-off streams / fallback answers are never
stored, and a hit on a streamed request is a well-formed event stream."""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pytest
from openai.types.chat import ChatCompletionChunk

from app.cache import InMemorySemanticCache
from app.exchange.client_api import ChatApi, ClientApi, ResponsesApi
from app.exchange.exchange import Exchange, ExchangeSettings, Forward, Reply
from app.pipeline import PipelineServices, RouterPipeline, cache_calls, encoder_embed
from app.pipeline.cache_guard import polarity_signature
from app.pipeline.completion import CompletionServices, complete_request
from app.pipeline.plan import CompletionReport, RoutePlan
from app.runtime.encoder import shared_encoder
from app.upstream.sse import SSEParser, StreamAccumulator
from tests.unit.pipeline.test_pipeline import base_document, chat, completion, config_of

THRESHOLD = 0.8  # the global default similarity_threshold
ANSWER = "Here is how."


@pytest.fixture(scope="module")
def encoder():
    enc = shared_encoder()
    enc.warm_up()
    return enc


@pytest.fixture
def cache() -> InMemorySemanticCache:
    return InMemorySemanticCache()


@pytest.fixture
def pipe(encoder, cache: InMemorySemanticCache) -> RouterPipeline:
    return caching_pipeline(encoder, cache, THRESHOLD)


def caching_pipeline(encoder, cache: InMemorySemanticCache, threshold: float) -> RouterPipeline:
    """Every request cached (the global store on, at `threshold`) on the default model."""
    calls = cache_calls(cache)
    doc = base_document(
        **{"global": {"stores": {"response_cache": {"enabled": True, "similarity_threshold": threshold}}}}
    )
    services = PipelineServices(
        embed=encoder_embed(encoder),
        cache_lookup=calls.lookup,
        cache_store=calls.store,
        cache_epoch=calls.epoch,
    )
    return RouterPipeline(config_of(doc), services, rng=random.Random(0))


async def answered(
    pipe: RouterPipeline, body: dict[str, Any], headers: dict[str, str] | None = None
) -> RoutePlan:
    """Route `body`; on a miss the upstream answers ANSWER and complete() stores it."""
    plan = await pipe.route(body, headers)
    if plan.immediate is None:
        report = CompletionReport(status=200, model=plan.selected_model, response=completion(ANSWER))
        assert (await pipe.complete(plan, report)).cache_written
    return plan


def is_hit(plan: RoutePlan) -> bool:
    return plan.immediate is not None and plan.immediate.kind == "cache_hit"


def cosine(encoder, a: str, b: str) -> float:
    u, v = encoder.encode([a, b])
    return float(np.dot(u, v) / (np.linalg.norm(u) * np.linalg.norm(v)))


# ------------------------------------------------------------------ negation

NEGATED = [  # near-duplicates by their vectors: only the polarity guard keeps them apart
    ("How do I enable 2FA on my account?", "How do I disable 2FA on my account?"),
    ("Is it safe to eat raw cookie dough?", "Is it unsafe to eat raw cookie dough?"),
    ("Is ibuprofen safe during pregnancy?", "Is ibuprofen not safe during pregnancy?"),
    ("Is this TLS configuration secure?", "Is this TLS configuration insecure?"),
    (
        "Is it legal to record a phone call in California?",
        "Is it illegal to record a phone call in California?",
    ),
    ("How do I allow inbound traffic on port 22?", "How do I deny inbound traffic on port 22?"),
    ("How do I lock my screen on Ubuntu?", "How do I unlock my screen on Ubuntu?"),
    ("How to install numpy with pip", "How to uninstall numpy with pip"),
    ("What should I pack in a carry-on?", "What should I not pack in a carry-on?"),
    ("Can I take ibuprofen with alcohol?", "Can't I take ibuprofen with alcohol?"),
    ("How do I make coffee with sugar?", "How do I make coffee without sugar?"),
    ("How to turn on dark mode in VS Code", "How to turn off dark mode in VS Code"),
    ("Is this mushroom harmful to dogs?", "Is this mushroom harmless to dogs?"),
    ("How can I prevent a memory leak in React?", "How can I cause a memory leak in React?"),
]

SAME_POLARITY = [  # paraphrases, negated or not, that must still be served
    ("What is not allowed in a carry-on?", "What is not allowed in a carry-on?"),
    ("What is not allowed in a carry-on?", "What isn't allowed in my carry-on?"),
    ("Is it unsafe to eat raw cookie dough?", "Is it not safe to eat raw cookie dough?"),
    ("How do I disable 2FA on my account?", "How do I disable two-factor authentication on my account?"),
    ("Why doesn't my Docker container start?", "Why won't my Docker container start?"),
    ("How to install numpy with pip", "How do I install numpy using pip?"),
    ("Should I discuss salary in an interview?", "Should I talk about salary in an interview?"),
]


@pytest.mark.parametrize(("first", "second"), NEGATED + [(b, a) for a, b in NEGATED[:4]])
async def test_a_negated_question_is_never_served_the_other_answer(encoder, cache, first, second):
    # A threshold the pair passes (the default, or just under the pair's similarity where the
    # int8 encoder's kernels on this CPU put it slightly below): the threshold alone would serve it.
    similarity = cosine(encoder, first, second)
    assert similarity >= 0.75, "not a near-duplicate pair: the test would prove nothing"
    pipe = caching_pipeline(encoder, cache, min(THRESHOLD, similarity - 0.01))
    await answered(pipe, chat(first))
    plan = await pipe.route(chat(second))
    assert not is_hit(plan) and plan.response_headers["x-cache-status"] == "miss"


@pytest.mark.parametrize(("first", "second"), SAME_POLARITY)
async def test_a_paraphrase_of_the_same_polarity_still_hits(pipe, first, second):
    await answered(pipe, chat(first))
    plan = await pipe.route(chat(second))
    assert is_hit(plan) and plan.immediate is not None
    assert plan.immediate.body["choices"][0]["message"]["content"] == ANSWER


# ------------------------------------------------------------------ isolation

QUESTION = "What is the capital of Australia?"


def with_system(prompt: str) -> dict[str, Any]:
    return {
        "model": "MoM",
        "messages": [{"role": "system", "content": prompt}, {"role": "user", "content": QUESTION}],
    }


TOOL = {"type": "function", "function": {"name": "lookup_city", "parameters": {"type": "object"}}}
OTHER_TOOL = {"type": "function", "function": {"name": "book_flight", "parameters": {"type": "object"}}}


@pytest.mark.parametrize(
    ("stored", "asked", "headers_stored", "headers_asked"),
    [
        (with_system("Answer in French."), with_system("Answer in one word."), {}, {}),
        (with_system("Answer in French."), chat(QUESTION), {}, {}),
        (chat(QUESTION, tools=[TOOL]), chat(QUESTION, tools=[OTHER_TOOL]), {}, {}),
        (chat(QUESTION, tools=[TOOL]), chat(QUESTION), {}, {}),
        (chat(QUESTION), chat(QUESTION), {"x-vsr-tenant": "acme"}, {"x-vsr-tenant": "globex"}),
        (chat(QUESTION), chat(QUESTION), {"X-VSR-Tenant": "acme"}, {}),
        (chat(QUESTION, user="alice"), chat(QUESTION, user="bob"), {}, {}),
        (chat(QUESTION, user="alice"), chat(QUESTION), {}, {}),
    ],
    ids=[
        "system-prompts",
        "system-prompt-vs-none",
        "tool-lists",
        "tools-vs-none",
        "tenants",
        "tenant-vs-none",
        "users",
        "user-vs-none",
    ],
)
@pytest.mark.slow
async def test_an_answer_never_crosses_context_tenant_or_user(
    pipe, stored, asked, headers_stored, headers_asked
):
    await answered(pipe, stored, headers_stored)
    assert not is_hit(await pipe.route(asked, headers_asked))
    assert is_hit(await pipe.route(stored, headers_stored))  # the same scope still hits


# ------------------------------------------------------------------ what is stored


@pytest.mark.parametrize(
    "report",
    [
        CompletionReport(status=500, model="small", response=completion(ANSWER)),
        CompletionReport(status=400, model="small", response=completion(ANSWER)),
        CompletionReport(
            status=200, model="small", stream=True, stream_finished=False, response=completion("Here")
        ),
        CompletionReport(status=200, model="backup", response=completion(ANSWER)),  # a fallback answered
    ],
    ids=["status-500", "status-400", "cut-off-stream", "fallback-model"],
)
async def test_only_a_whole_answer_of_the_selected_model_is_stored(pipe, cache, report):
    store = cache_calls(cache).store
    plan = await pipe.route(chat(QUESTION))
    assert plan.selected_model == "small" and plan.cache_write is not None
    accounting = await complete_request(CompletionServices(cache_store=store), plan, report)
    assert not accounting.cache_written and len(cache) == 0
    assert not is_hit(await pipe.route(chat(QUESTION)))
    finished = CompletionReport(status=200, model="small", stream=True, response=completion(ANSWER))
    assert (await complete_request(CompletionServices(cache_store=store), plan, finished)).cache_written


# ------------------------------------------------------------------ a streamed hit


async def exchange_answer(pipe: RouterPipeline, api: ClientApi, body: dict[str, Any]) -> Reply:
    """One request through the exchange; a miss is answered by a JSON upstream answer."""
    exchange = Exchange(ExchangeSettings(pipe), api)
    step = await exchange.begin(json.dumps(body).encode(), {})
    if isinstance(step, Forward):
        exchange.respond(200, {"content-type": "application/json"}, step.plan.candidates[0])
        step = exchange.whole_body(json.dumps(completion(ANSWER)).encode())
    await exchange.finish()
    return step


async def test_a_hit_on_a_streamed_chat_request_is_a_well_formed_event_stream(pipe):
    await exchange_answer(pipe, ChatApi(), chat(QUESTION))
    reply = await exchange_answer(pipe, ChatApi(), chat(QUESTION, stream=True))
    assert reply.status == 200 and reply.content_type == "text/event-stream"
    assert reply.headers["x-cache-status"] == "hit"
    events = SSEParser().feed(reply.body)
    assert events[-1].data == "[DONE]"
    for event in events[:-1]:
        ChatCompletionChunk.model_validate(event.json())  # what SDK clients parse
    rebuilt = StreamAccumulator()
    rebuilt.feed_bytes(reply.body)
    assert rebuilt.done and rebuilt.to_chat_completion()["choices"][0]["message"]["content"] == ANSWER


async def test_a_hit_on_a_streamed_responses_request_ends_with_response_completed(pipe):
    await exchange_answer(pipe, ChatApi(), chat(QUESTION))
    request = {"model": "MoM", "input": QUESTION, "stream": True}
    reply = await exchange_answer(pipe, ResponsesApi(), request)
    assert reply.status == 200 and reply.content_type == "text/event-stream"
    events = [event.json() for event in SSEParser().feed(reply.body)]
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == ANSWER


# ------------------------------------------------------------------ the polarity rules


@pytest.mark.parametrize(
    "text",
    [
        "How do I install Docker on Ubuntu?",
        "How do I understand recursion?",
        "Should I discuss salary in an interview?",
        "How do I display images in React?",
        "What is an index in a database?",
        "Describe the universal declaration of human rights",
        "What are important features of Rust?",
        "Explain the initial conditions of a differential equation",
        "Whether or not to use sudo with pip",
        "Is it not unsafe to fly?",  # a double negation negates nothing
    ],
)
def test_words_that_only_look_negated_leave_the_partition_alone(text):
    assert polarity_signature(text) == ""


def test_equal_negations_share_a_signature_and_opposite_ones_do_not():
    assert polarity_signature("Is it unsafe?") == polarity_signature("Is it not safe?") != ""
    assert polarity_signature("Which items are disallowed?") == polarity_signature(
        "Which items aren't allowed?"
    )
    assert polarity_signature("Unblock the user") == "" != polarity_signature("Block the user")
    assert polarity_signature("Stop the service") != polarity_signature("Avoid the sugar")
