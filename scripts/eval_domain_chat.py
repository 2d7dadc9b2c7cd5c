#!/usr/bin/env python
"""Score a domain head on hand-written chat eval sets, and pair two such runs.

Measures the way scripts/train_domain.py reports chat accuracy (its `load_chat` and
`evaluate`), on the head of an artifact directory (default: the shipped one) and the encoder
of this checkout, without training anything. Each row's prediction is kept so that two runs
(two heads, or two encoder builds in two checkouts) pair on the same rows (exact McNemar).

    .venv/bin/python scripts/eval_domain_chat.py tests/data/domain_chat_eval_v3.jsonl --out a.json
    .venv/bin/python scripts/eval_domain_chat.py --pair a.json b.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_domain as td  # noqa: E402  (scripts/ is not a package; it puts ROOT on sys.path)

from app.common.intervals import mcnemar, wilson  # noqa: E402
from app.models.domain import ARTIFACT_DIR, DOMAIN_CATEGORIES, DomainHead  # noqa: E402

DEFAULT_SET = ROOT / "tests/data/domain_chat_eval_v3.jsonl"


def score(path: Path, head: DomainHead, encoder) -> dict:
    examples = td.load_chat(path)
    texts = [e.text for e in examples]
    vectors = np.concatenate([encoder.encode(texts[i : i + 64]) for i in range(0, len(texts), 64)])
    result = td.evaluate(head, vectors, examples)
    pred = head.probabilities(vectors, texts).argmax(1)
    right = [int(p == e.label) for p, e in zip(pred, examples, strict=True)]
    hits = sum(right)
    result["right"] = hits
    result["wilson"] = [round(x, 4) for x in wilson(hits, len(right))]
    for name, row in result["per_class"].items():
        idx = [i for i, e in enumerate(examples) if DOMAIN_CATEGORIES[e.label] == name]
        k = sum(right[i] for i in idx)
        row |= {"right": k, "wilson": [round(x, 4) for x in wilson(k, len(idx))]}
    result["rows"] = [
        {"text": t, "true": DOMAIN_CATEGORIES[e.label], "pred": DOMAIN_CATEGORIES[p], "right": r}
        for t, e, p, r in zip(texts, examples, pred, right, strict=True)
    ]
    return result


def pair(old: dict, new: dict) -> dict:
    out = {}
    for name in old["sets"].keys() & new["sets"].keys():
        a, b = old["sets"][name]["rows"], new["sets"][name]["rows"]
        if [r["text"] for r in a] != [r["text"] for r in b]:
            raise SystemExit(f"{name}: the two runs hold different rows")
        only_new = sum(1 for x, y in zip(a, b, strict=True) if y["right"] and not x["right"])
        only_old = sum(1 for x, y in zip(a, b, strict=True) if x["right"] and not y["right"])
        out[name] = {
            "n": len(a),
            "old_right": sum(r["right"] for r in a),
            "new_right": sum(r["right"] for r in b),
            "only_new": only_new,
            "only_old": only_old,
            "mcnemar_p": mcnemar(only_new, only_old),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sets", type=Path, nargs="*", default=[DEFAULT_SET])
    ap.add_argument("--artifacts", type=Path, default=ARTIFACT_DIR, help="the domain head's directory")
    ap.add_argument("--out", type=Path, help="write the figures and each row's prediction (JSON)")
    ap.add_argument("--pair", nargs=2, type=Path, metavar=("OLD", "NEW"), help="pair two --out files")
    args = ap.parse_args(argv)
    if args.pair:
        paired = pair(*(json.loads(p.read_text()) for p in args.pair))
        print(json.dumps(paired, indent=1))
        if args.out:
            args.out.write_text(json.dumps(paired, indent=1))
        return 0
    from app.runtime.encoder import shared_encoder

    encoder = shared_encoder()
    head, meta = DomainHead.load(args.artifacts)
    report = {
        "artifacts": str(args.artifacts),
        "head": f"{meta.get('version')} ({meta.get('date')})",
        "sets": {},
    }
    for path in args.sets:
        result = score(path, head, encoder)
        report["sets"][path.name] = result
        td.print_report(path.name, result)
        print(f"   right {result['right']}/{result['n']} Wilson 95% {result['wilson']}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
