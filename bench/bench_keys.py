"""What an issued API key adds to a request at the front door: `KeyGate.admit` (the key looked
up, its budgets read), `reserve` and `settle` (app/keys/gate.py), with the keys and spend in this
process's memory and on Redis (a local Redis-compatible server, as the tests start one).

    .venv/bin/python bench/bench_keys.py [--rounds 2000] [--json out.json]

Printed: p50/p99 in ms of the whole gate per request, for a key without a budget and one with a
budget (and a team), and, for comparison, a request without a key on a listener that allows it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.config.global_config import ApiKeysConfig, Budget  # noqa: E402
from app.config.pricing import Pricing  # noqa: E402
from app.keys.gate import KeyGate  # noqa: E402
from app.keys.records import KeySpec, KeyStore, open_key_store  # noqa: E402
from app.keys.spend import MemorySpend, RedisSpend, SpendStore  # noqa: E402
from app.state.shared_store import ManagementStoreSettings, redis_client  # noqa: E402
from bench.latency import p50_p99_ms  # noqa: E402

PRICING = {"m": Pricing(prompt_per_1m=1.0, completion_per_1m=2.0)}
BODY = {"messages": [{"role": "user", "content": "What is the derivative of x^2?"}], "max_tokens": 64}
SETTINGS = ApiKeysConfig(teams={"t": Budget(usd=1e9, period="month")})


async def one_request(gate: KeyGate, headers: dict[str, str]) -> None:
    admission = await gate.admit(headers)
    if admission is not None:
        await (await admission.reserve(PRICING, "m", BODY)).settle(0.0001)


async def timed(run: Callable[[], Awaitable[None]], rounds: int) -> dict[str, float]:
    for _ in range(min(50, rounds)):
        await run()
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        await run()
        samples.append(time.perf_counter() - started)
    return p50_p99_ms(samples)


async def measure(store: KeyStore, spend: SpendStore, rounds: int) -> dict[str, Any]:
    gate = KeyGate(store, required=lambda: False, settings=lambda: SETTINGS, spend=spend)
    _, plain = store.issue(KeySpec(name="plain", models=["m"]))
    _, budgeted = store.issue(KeySpec(name="budgeted", models=["m"], budget=Budget(usd=1e9), team="t"))
    return {
        "no_key": await timed(lambda: one_request(gate, {}), rounds),
        "key": await timed(lambda: one_request(gate, {"authorization": f"Bearer {plain}"}), rounds),
        "key_with_budgets": await timed(lambda: one_request(gate, {"x-api-key": budgeted}), rounds),
    }


async def main(rounds: int) -> dict[str, Any]:
    from tests.fakes.stores import redis_with_search

    out: dict[str, Any] = {"memory": await measure(KeyStore(), MemorySpend(), rounds)}
    with tempfile.TemporaryDirectory() as tmp, redis_with_search(Path(tmp)) as url:
        settings = ManagementStoreSettings(backend="redis", url=url)
        client = redis_client(settings)
        prefix = f"svc_sr:bench:{uuid.uuid4().hex}:"
        store = open_key_store(settings, "bench", Path(tmp), client)
        out["redis"] = await measure(store, RedisSpend(client, prefix), rounds)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    result = asyncio.run(main(args.rounds))
    print(json.dumps(result, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
