"""How long switching the response cache to Milvus Lite through the management API takes to
become active, and whether any request fails meanwhile (docs/configuration.md "One owner").

Against a running stack (`make run`, or `svc-sr serve --config ...`): `--clients` threads keep
sending chat requests through the OpenAI SDK while the cache is PATCHed `memory` -> `milvus`
(no uri: Milvus Lite in the state directory) and back, `--rounds` times; each PATCH is timed
from its send to its answer (the activation is `active` then), and the stats route is read
after it. The cache is left on the backend it had. Prints one JSON line per PATCH and a summary.

    .venv/bin/python bench/bench_cache_switch.py --base http://127.0.0.1:8080 --rounds 5
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import threading
import time
from typing import Any

import httpx
import openai

PROMPTS = [f"What is the derivative of x^{n}?" for n in range(2, 40)]
PROMPTS += [f"Explain photosynthesis in one sentence ({n})." for n in range(30)]


def keep_asking(base: str, stop: threading.Event, results: list[int | str]) -> None:
    chat = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)
    for prompt in itertools.cycle(PROMPTS):
        if stop.is_set():
            return
        try:
            reply = chat.chat.completions.with_raw_response.create(
                model="MoM", messages=[{"role": "user", "content": prompt}]
            )
            results.append(reply.http_response.status_code)
        except openai.OpenAIError as exc:
            results.append(type(exc).__name__)


def patch(client: httpx.Client, backend: str) -> dict[str, Any]:
    tag = client.get("/api/v1/config").headers["etag"]
    began = time.monotonic()
    reply = client.patch(
        "/api/v1/config",
        json={"global": {"stores": {"response_cache": {"backend_type": backend}}}},
        headers={"If-Match": tag},
    )
    took = time.monotonic() - began
    stats = [client.get("/api/v1/storage/response-cache/stats") for _ in range(5)]
    return {
        "backend": backend,
        "seconds": round(took, 3),
        "status": reply.status_code,
        "activation": reply.json().get("activation_status"),
        "stats": [s.json().get("backend") if s.status_code == 200 else s.status_code for s in stats],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="http://127.0.0.1:8080")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=2)
    args = parser.parse_args()
    stop, results = threading.Event(), list[int | str]()
    clients = [
        threading.Thread(target=keep_asking, args=(args.base, stop, results)) for _ in range(args.clients)
    ]
    rows = []
    with httpx.Client(base_url=args.base, timeout=300) as client:
        stores = client.get("/api/v1/config").json().get("global", {}).get("stores", {})
        before = stores.get("response_cache", {}).get("backend_type", "memory")  # left out: the default
        for thread in clients:
            thread.start()
        try:
            for _ in range(args.rounds):
                for backend in ("memory", "milvus") if before == "milvus" else ("milvus", "memory"):
                    rows.append(patch(client, backend))
                    print(json.dumps(rows[-1]), flush=True)
                    time.sleep(3)
            if before not in ("memory", "milvus"):
                patch(client, before)
        finally:
            stop.set()
            for thread in clients:
                thread.join()
    to_milvus = [row["seconds"] for row in rows if row["backend"] == "milvus"]
    failed = [r for r in results if r != 200]
    summary = {
        "to_milvus_s": to_milvus,
        "median_s": statistics.median(to_milvus),
        "requests": len(results),
        "failed": len(failed),
        "failures": failed[:10],
        "left_on": before,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
