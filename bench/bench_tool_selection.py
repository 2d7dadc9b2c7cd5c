"""The `tool_selection` plugin: selection accuracy on a small written set, and the latency it
adds to route().

Accuracy: 18 realistic tools (a personal-assistant agent's), 30 queries written by hand, each
with the tool(s) it needs. With the router's own encoder (MiniLM, as the embedding signals),
the plugin scores every tool against the query; reported: top-1 hit rate (the best-scored
tool is one the query needs), top-k recall (every needed tool is among the k best, k = 1..3),
and with the configured threshold how many tools are kept on average and how often every
needed one is among them.

Latency: route() of the same requests (18 tools each) through a decision with the plugin and
through one without it, interleaved, on one pipeline with no other embedding user (so the
query embedding is counted as the plugin's cost); tool vectors are warm after the first
request (the per-config LRU). p50/p99 of each and of the difference.

    .venv/bin/python bench/bench_tool_selection.py [--requests 300] [--top-k 3] [--threshold 0.25]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.config.loader import parse_config  # noqa: E402
from app.pipeline import PipelineServices, RouterPipeline, encoder_embed  # noqa: E402
from app.pipeline.tools import ToolSelectionPolicy, ToolVectorCache, rank, select_tools, tool_text  # noqa: E402
from app.runtime.encoder import shared_encoder  # noqa: E402
from bench.documents import keyword_decision, one_model_document  # noqa: E402
from bench.latency import percentile  # noqa: E402

TOOL_SPECS = {
    "get_weather": "Get the current weather and forecast for a city",
    "search_flights": "Search for airline flights between two airports on a date",
    "book_hotel": "Book a hotel room in a city for given check-in and check-out dates",
    "send_email": "Send an email message to a recipient with a subject and body",
    "read_inbox": "List and read the latest emails in the user's inbox",
    "create_calendar_event": "Create a meeting or event in the user's calendar",
    "list_calendar_events": "List the user's upcoming calendar events and meetings",
    "convert_currency": "Convert an amount of money from one currency to another",
    "get_stock_price": "Get the latest stock market price of a company ticker",
    "translate_text": "Translate text from one language to another",
    "search_web": "Search the web for pages about a topic",
    "get_directions": "Get driving, walking or transit directions between two places",
    "set_reminder": "Set a reminder that alerts the user at a given time",
    "play_music": "Play a song, album or playlist on the user's speaker",
    "order_food": "Order food delivery from a restaurant",
    "create_note": "Write down a note in the user's notebook",
    "calculate": "Evaluate a mathematical expression",
    "delete_file": "Delete a file from the user's cloud drive",
}
QUERIES: list[tuple[str, set[str]]] = [
    ("What's the weather going to be like in Chicago tomorrow?", {"get_weather"}),
    ("Will it rain in London this weekend?", {"get_weather"}),
    ("Find me a flight from Boston to Denver next Friday", {"search_flights"}),
    ("Are there any cheap flights to Tokyo in March?", {"search_flights"}),
    ("Book me a room in a hotel in Rome from June 3 to June 6", {"book_hotel"}),
    ("I need somewhere to stay in Berlin for two nights", {"book_hotel"}),
    ("Email my landlord that the heating is broken", {"send_email"}),
    ("Send a message to alice@example.com saying I'll be late", {"send_email"}),
    ("Do I have any new emails from my boss?", {"read_inbox"}),
    ("Schedule a meeting with the design team on Tuesday at 3pm", {"create_calendar_event"}),
    ("Put the dentist appointment on my calendar for May 2", {"create_calendar_event"}),
    ("What meetings do I have this afternoon?", {"list_calendar_events"}),
    ("How many yen is 300 dollars?", {"convert_currency"}),
    ("Convert 50 euros to pounds", {"convert_currency"}),
    ("What is Apple's share price right now?", {"get_stock_price"}),
    ("How is the NVDA ticker doing today?", {"get_stock_price"}),
    ("Translate 'where is the train station' into German", {"translate_text"}),
    ("How do you say good morning in Korean?", {"translate_text"}),
    ("Look up recent news about the Mars rover", {"search_web"}),
    ("How do I get from the airport to downtown by train?", {"get_directions"}),
    ("Give me driving directions to the nearest gas station", {"get_directions"}),
    ("Remind me to call my mother at 6pm", {"set_reminder"}),
    ("Play some relaxing jazz", {"play_music"}),
    ("I'd like a pizza delivered to my place", {"order_food"}),
    ("Write down that the wifi password is blue42", {"create_note"}),
    ("What is 17 times 243 divided by 3?", {"calculate"}),
    ("Remove the old tax_2019.pdf from my drive", {"delete_file"}),
    ("Find a flight to Paris and tell me the weather there", {"search_flights", "get_weather"}),
    ("Book a hotel in Madrid and convert 200 dollars to euros", {"book_hotel", "convert_currency"}),
    ("Check my calendar for tomorrow and email Bob the agenda", {"list_calendar_events", "send_email"}),
]


def tools() -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": n, "description": d}} for n, d in TOOL_SPECS.items()]


async def accuracy(top_k: int, threshold: float) -> dict[str, Any]:
    embed = encoder_embed(shared_encoder())
    listed = tools()
    names = list(TOOL_SPECS)
    tool_vectors = np.asarray(await embed([tool_text(t) for t in listed]), dtype=np.float32)
    query_vectors = np.asarray(await embed([q for q, _ in QUERIES]), dtype=np.float32)
    top1 = 0
    recall_at = {k: 0 for k in (1, 2, 3)}
    kept_sizes: list[int] = []
    kept_all = 0
    misses: list[str] = []
    for (query, needed), vector in zip(QUERIES, query_vectors, strict=True):
        sims = tool_vectors @ vector
        order = [names[i] for i in np.argsort(-sims)]
        if order[0] in needed:
            top1 += 1
        else:
            misses.append(f"{query!r}: best {order[0]}, needed {sorted(needed)}")
        for k in recall_at:
            recall_at[k] += needed <= set(order[:k])
        chosen, _, _ = rank(vector, tool_vectors, names, ToolSelectionPolicy(top_k, threshold, False))
        kept_sizes.append(len(chosen))
        kept_all += needed <= set(chosen)
    n = len(QUERIES)
    return {
        "tools": len(names),
        "queries": n,
        "top1_hit_rate": round(top1 / n, 3),
        "recall_at_k": {k: round(v / n, 3) for k, v in recall_at.items()},
        "configured": {"top_k": top_k, "similarity_threshold": threshold},
        "configured_all_needed_kept": round(kept_all / n, 3),
        "configured_mean_tools_kept": round(float(np.mean(kept_sizes)), 2),
        "top1_misses": misses,
    }


def document(top_k: int, threshold: float) -> dict[str, Any]:
    selection = {
        "type": "tool_selection",
        "configuration": {"top_k": top_k, "similarity_threshold": threshold},
    }
    signals = {
        "keywords": [
            {"name": "with", "keywords": ["zwith"]},
            {"name": "without", "keywords": ["zwithout"]},
        ]
    }
    decisions = [keyword_decision("with", "with", [selection]), keyword_decision("without", "without", [])]
    return one_model_document(decisions, signals)


async def latency(requests: int, top_k: int, threshold: float) -> dict[str, Any]:
    pipeline = RouterPipeline(
        parse_config(document(top_k, threshold)).config,
        PipelineServices(embed=encoder_embed(shared_encoder())),
    )
    await pipeline.warm_up()
    listed = tools()
    timings: dict[str, list[float]] = {"with": [], "without": []}
    for i in range(requests + 10):
        query, _ = QUERIES[i % len(QUERIES)]
        for arm in ("with", "without"):
            body = {
                "model": "MoM",
                "messages": [{"role": "user", "content": f"z{arm} {query}"}],
                "tools": listed,
            }
            started = time.perf_counter()
            plan = await pipeline.route(body)
            elapsed = (time.perf_counter() - started) * 1000
            assert plan.decision == arm
            if i >= 10:  # the first requests warm the tool vectors and the encoder
                timings[arm].append(elapsed)
    added = [w - o for w, o in zip(timings["with"], timings["without"], strict=True)]
    parts = await split(requests, top_k, threshold)
    out: dict[str, Any] = {"requests": requests, "tools_per_request": len(listed)}
    for name, values in (*timings.items(), ("added", added), *parts.items()):
        out[name] = {"p50_ms": round(percentile(values, 50), 3), "p99_ms": round(percentile(values, 99), 3)}
    return out


async def split(requests: int, top_k: int, threshold: float) -> dict[str, list[float]]:
    """The added time's two parts: the query's embedding, and the selection given the query
    vector (warm tool vectors: a matrix-vector product over 18 tools, then the rewrite)."""
    embed = encoder_embed(shared_encoder())
    cache = ToolVectorCache()
    policy = ToolSelectionPolicy(top_k, threshold, False)
    out: dict[str, list[float]] = {"query_embedding": [], "selection_given_vector": []}
    for i in range(requests + 10):
        query, _ = QUERIES[i % len(QUERIES)]
        started = time.perf_counter()
        vector = np.asarray(await embed([query]), dtype=np.float32).reshape(-1)
        embedded = time.perf_counter()

        async def ready(v: np.ndarray = vector) -> np.ndarray:
            return v

        await select_tools({"tools": tools()}, None, policy, query_vector=ready, embed=embed, cache=cache)
        if i >= 10:
            out["query_embedding"].append((embedded - started) * 1000)
            out["selection_given_vector"].append((time.perf_counter() - embedded) * 1000)
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--threshold", type=float, default=0.25)
    args = parser.parse_args()
    result = {
        "accuracy": await accuracy(args.top_k, args.threshold),
        "latency": await latency(args.requests, args.top_k, args.threshold),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
