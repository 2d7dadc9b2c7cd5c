"""What a prompt in another language costs (docs/performance.md, "Prompts in other languages"):
the multilingual-e5 pass and head the domain classifier adds for it, the guard head on the same
memoised vector, and the language check every English prompt pays.

    .venv/bin/python bench/bench_multilingual.py

Each text of the fresh chat set v6 is timed once (the encoder memoises texts, so a repeat would
time the memo): its 146 non-English prompts through `MultilingualDomain.probabilities`, then the
guard head on them, and its 134 English prompts through `read_by_english_heads` (cache cleared).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.models import multilingual  # noqa: E402
from app.models.domain import DOMAIN_CATEGORIES  # noqa: E402
from app.models.language import read_by_english_heads  # noqa: E402
from bench.latency import percentile  # noqa: E402

V6 = ROOT / "tests/data/domain_chat_eval_v6.jsonl"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    return 0.0


def timed(fn, items: list) -> list[float]:
    out = []
    for item in items:
        start = time.perf_counter()
        fn(item)
        out.append((time.perf_counter() - start) * 1000)
    return out


def line(name: str, ms: list[float]) -> str:
    return f"{name}: p50 {percentile(ms, 50):.2f} ms p99 {percentile(ms, 99):.2f} ms (n={len(ms)})"


def main() -> int:
    rows = [json.loads(x) for x in V6.read_text(encoding="utf-8").split("\n") if x.strip()]
    other = [r["text"] for r in rows if r["lang"] != "en"]
    english = [r["text"] for r in rows if r["lang"] == "en"]
    read_by_english_heads("warm up the language model")

    def check(text: str) -> None:
        read_by_english_heads.cache_clear()
        read_by_english_heads(text)

    print(line("language check, English prompts", timed(check, english)))
    before = rss_mb()
    start = time.perf_counter()
    domain = multilingual.shared_domain(DOMAIN_CATEGORIES)
    guard = multilingual.shared_guard()
    domain.probabilities(["warm up"])
    print(
        f"e5 engine load and first pass {1000 * (time.perf_counter() - start):.0f} ms, RSS +{rss_mb() - before:.0f} MB"
    )
    print(line("e5 pass + domain head, v6 non-English", timed(lambda t: domain.probabilities([t]), other)))
    print(line("guard head on the memoised vector", timed(guard.attack_score, other)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
