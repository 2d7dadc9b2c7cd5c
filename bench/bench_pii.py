"""Latency/throughput of app.models.pii.PIIDetector.

Texts: the look-alike negatives (tests/data/pii_negatives.txt), a built-in list of short PII
sentences, and (if ../shared/data is present beside the repo) MMLU-Pro questions as longer prompts.
Reports cold load time, p50/p99 per text at batch 1 (each text run `--repeat` times after a
warm-up) and throughput with detect_many in batches of `--batch`, for the full detector and
the regex/checksum-only tier (use_ner=False).

    .venv/bin/python bench/bench_pii.py [--repeat 3 --batch 32 --long 200 --json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.latency import percentile  # noqa: E402

NEGATIVES = ROOT / "tests" / "data" / "pii_negatives.txt"
MMLU = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mmlu-pro" / "questions.jsonl"
PII_SENTENCES = [
    "My name is John Smith and my email is john.smith@example.com.",
    "Call me at (212) 555-0187 or +44 7911 123456 tomorrow.",
    "Please charge card 4111 1111 1111 1111, exp 12/26.",
    "His SSN is 536-22-8451 and he lives at 1600 Pennsylvania Ave NW, Washington, DC 20500.",
    "Wire the money to IBAN GB82 WEST 1234 5698 7654 32 before Friday.",
    "The server 192.168.10.24 and 2001:db8::8a2e:370:7334 are down; see https://status.example.com.",
    "I am 34 years old, born on March 3, 1990, and my driver's license number is S530-460-99-424-0.",
    "Maria Garcia from Madrid works for Acme Corp and is Spanish.",
    "Ship it to 221B Baker Street, London, or to 123 Main St, Apt 4, Springfield, IL 62701.",
    "Hi, I'm Ana (ana@example.org), my zip code is 94105 and my 7-year-old needs a passport.",
]


def _texts(long_n: int) -> tuple[list[str], list[str]]:
    short = [
        ln
        for ln in NEGATIVES.read_text(encoding="utf-8").splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    short += PII_SENTENCES
    long: list[str] = []
    if MMLU.exists() and long_n:
        with MMLU.open(encoding="utf-8") as fh:
            for line in fh:
                q = json.loads(line).get("question", "")
                if len(q) > 300:
                    long.append(q)
                if len(long) >= long_n:
                    break
    return short, long


def _batch1(detector: object, texts: list[str], repeat: int) -> dict[str, float]:
    for t in texts[:10]:
        detector.detect(t)  # type: ignore[attr-defined]
    times = []
    for _ in range(repeat):
        for t in texts:
            start = time.perf_counter()
            detector.detect(t)  # type: ignore[attr-defined]
            times.append((time.perf_counter() - start) * 1000)
    return {
        "n": len(times),
        "p50_ms": statistics.median(times),
        "p99_ms": percentile(times, 99),
        "mean_ms": statistics.fmean(times),
    }


def _throughput(detector: object, texts: list[str], batch: int) -> float:
    start = time.perf_counter()
    for i in range(0, len(texts), batch):
        detector.detect_many(texts[i : i + batch])  # type: ignore[attr-defined]
    return len(texts) / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--long", type=int, default=200, help="MMLU-Pro questions (>300 chars) to include")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    started = time.perf_counter()
    from app.models.pii import PIIDetector

    full = PIIDetector()
    cold_load_s = time.perf_counter() - started
    started = time.perf_counter()
    regex_only = PIIDetector(use_ner=False)
    warm_load_s = time.perf_counter() - started

    short, long = _texts(args.long)
    report: dict[str, object] = {
        "date": str(date.today()),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "cold_load_s": cold_load_s,
        "second_instance_load_s": warm_load_s,
        "texts": {
            "short": len(short),
            "short_mean_chars": statistics.fmean(map(len, short)),
            "long": len(long),
            "long_mean_chars": statistics.fmean(map(len, long)) if long else 0,
        },
        "results": {},
    }
    results: dict[str, dict[str, float]] = {}
    for name, det in (("full", full), ("regex_only", regex_only)):
        for kind, texts in (("short", short), ("long", long)):
            if not texts:
                continue
            r = _batch1(det, texts, args.repeat)
            r["throughput_per_s"] = _throughput(det, texts * args.repeat, args.batch)
            results[f"{name}/{kind}"] = r
    report["results"] = results

    print(f"# PII detector benchmark {report['date']}")
    print(
        f"cold load (imports + spaCy + recognizers): {cold_load_s:.2f} s; second instance: {warm_load_s:.3f} s"
    )
    t = report["texts"]
    print(
        f"texts: {t['short']} short (mean {t['short_mean_chars']:.0f} chars), "  # type: ignore[index]
        f"{t['long']} long (mean {t['long_mean_chars']:.0f} chars)"
    )  # type: ignore[index]
    print(
        "| Detector / texts | p50 ms (batch 1) | p99 ms (batch 1) | mean ms | throughput texts/s "
        f"(batch {args.batch}) |"
    )
    print("|---|---:|---:|---:|---:|")
    for key, r in results.items():
        print(
            f"| {key} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['mean_ms']:.1f} | {r['throughput_per_s']:.0f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
