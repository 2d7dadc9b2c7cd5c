"""How decision evaluation grows with the number of decisions: 10, 100 and 1,000 decisions over
50 signals, each decision a rule tree of 2-6 leaves (AND/OR, some NOT) over random signals, with
random priorities; each request's 50 signal results are random too (about a third matched).

Times the decide phase exactly as route() runs it (the config version's `DecisionTable.select`
over the indexed signal matches, then ranking by priority), on configs validated by the real loader. The
reference router publishes < 0.1 ms at 10 decisions and < 0.5 ms at 100.

    .venv/bin/python bench/bench_decisions.py [--requests 2000]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.config.loader import parse_config  # noqa: E402
from app.pipeline.decisions import DecisionTable, index_matches  # noqa: E402
from app.pipeline.plan import SignalMatch  # noqa: E402
from bench.documents import MODEL, one_model_document  # noqa: E402
from bench.latency import percentile  # noqa: E402

SIGNALS = 50


def rule(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    if depth >= 2 or rng.random() < 0.35:
        return {"type": "keyword", "name": f"k{rng.randrange(SIGNALS)}"}
    operator = rng.choice(["AND", "OR", "OR", "NOT"])
    count = 1 if operator == "NOT" else rng.randint(2, 3)
    return {"operator": operator, "conditions": [rule(rng, depth + 1) for _ in range(count)]}


def document(decisions: int, rng: random.Random) -> dict[str, Any]:
    signals = {
        "keywords": [{"name": f"k{i}", "operator": "OR", "keywords": [f"w{i}"]} for i in range(SIGNALS)]
    }
    return one_model_document(
        [
            {
                "name": f"d{n}",
                "priority": rng.randrange(1000),
                "rules": {"operator": "AND", "conditions": [rule(rng), rule(rng)]},
                "modelRefs": [{"model": MODEL}],
            }
            for n in range(decisions)
        ],
        signals,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    rng = random.Random(22)
    out: dict[str, Any] = {"signals": SIGNALS}
    for count in (10, 100, 1000):
        config = parse_config(document(count, rng)).config
        table = DecisionTable(config.routing.decisions, config.routing.strategy)  # as CompiledConfig does
        requests = [
            index_matches(
                SignalMatch(type="keyword", name=f"k{i}", matched=rng.random() < 0.33) for i in range(SIGNALS)
            )
            for _ in range(args.requests)
        ]
        for signals in requests[:50]:  # warm-up
            table.select(signals)
        samples, matched = [], 0
        for signals in requests:
            began = time.perf_counter()
            winner, _ = table.select(signals)
            samples.append(time.perf_counter() - began)
            matched += winner is not None
        out[f"{count}_decisions"] = {
            "p50_ms": round(percentile(samples, 50, scale=1000), 4),
            "p99_ms": round(percentile(samples, 99, scale=1000), 4),
            "requests_with_a_match": round(matched / len(requests), 3),
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
