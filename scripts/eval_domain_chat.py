#!/usr/bin/env python
"""Score a domain head on hand-written chat eval sets, and pair two such runs.

Measures the way scripts/train_domain.py reports chat accuracy (its `load_chat` and
`evaluate`), on the head of an artifact directory (default: the shipped one) and the encoder
of this checkout, without training anything. Each row's prediction is kept so that two runs
(two heads, or two encoder builds in two checkouts) pair on the same rows (exact McNemar).

    .venv/bin/python scripts/eval_domain_chat.py tests/data/domain_chat_eval_v3.jsonl --out a.json
    .venv/bin/python scripts/eval_domain_chat.py --pair a.json b.json
    .venv/bin/python scripts/eval_domain_chat.py SET --multilingual off --out english-only.json
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
from app.models.domain import ARTIFACT_DIR, DOMAIN_CATEGORIES, DomainClassifier  # noqa: E402

DEFAULT_SET = ROOT / "tests/data/domain_chat_eval_v3.jsonl"


def score(path: Path, classifier: DomainClassifier, encoder) -> dict:
    """Accuracy on one set as the Router classifies (DomainClassifier.classify_vectors: the
    multilingual head takes the prompts the English one cannot read, when it is on), overall,
    per category and per `lang` where the set names one."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
    examples = td.load_chat(path)
    texts = [e.text for e in examples]
    vectors = np.concatenate([encoder.encode(texts[i : i + 64]) for i in range(0, len(texts), 64)])
    pred = [r.category for r in classifier.classify_vectors(vectors, texts)]
    true = [DOMAIN_CATEGORIES[e.label] for e in examples]
    right = [int(p == t) for p, t in zip(pred, true, strict=True)]
    langs = [r.get("lang", "") for r in rows]

    def rate(idx: list[int]) -> dict:
        k = sum(right[i] for i in idx)
        return {"n": len(idx), "right": k, "wilson": [round(x, 4) for x in wilson(k, len(idx))]}

    everything = rate(list(range(len(right))))
    groups = {"per_class": true, "per_lang": langs}
    result = {**everything, "accuracy": everything["right"] / max(1, everything["n"])}
    for name, keys in groups.items():
        result[name] = {k: rate([i for i, x in enumerate(keys) if x == k]) for k in sorted(set(keys)) if k}
    if any(langs):
        result["non_english"] = rate([i for i, x in enumerate(langs) if x and x != "en"])
    result["rows"] = [
        {"text": t, "true": a, "pred": b, "right": r, "lang": g}
        for t, a, b, r, g in zip(texts, true, pred, right, langs, strict=True)
    ]
    return result


def print_score(name: str, result: dict) -> None:
    print(f"{name}: right {result['right']}/{result['n']} Wilson 95% {result['wilson']}")
    if "non_english" in result:
        ne = result["non_english"]
        print(f"   non-English {ne['right']}/{ne['n']} {ne['wilson']}")
    for group in ("per_class", "per_lang"):
        print(f"   {group}: " + ", ".join(f"{k} {v['right']}/{v['n']}" for k, v in result[group].items()))


def pair(old: dict, new: dict) -> dict:
    out = {}
    for name in old["sets"].keys() & new["sets"].keys():
        a, b = old["sets"][name]["rows"], new["sets"][name]["rows"]
        if [r["text"] for r in a] != [r["text"] for r in b]:
            raise SystemExit(f"{name}: the two runs hold different rows")
        out[name] = paired_rows(a, b)
        if any(r.get("lang") for r in a):  # a set that names each row's language: each side too
            for part, keep in (("english", lambda g: g == "en"), ("non_english", lambda g: g and g != "en")):
                idx = [i for i, r in enumerate(a) if keep(r.get("lang"))]
                out[f"{name}:{part}"] = paired_rows([a[i] for i in idx], [b[i] for i in idx])
    return out


def paired_rows(a: list[dict], b: list[dict]) -> dict:
    only_new = sum(1 for x, y in zip(a, b, strict=True) if y["right"] and not x["right"])
    only_old = sum(1 for x, y in zip(a, b, strict=True) if x["right"] and not y["right"])
    return {
        "n": len(a),
        "old_right": sum(r["right"] for r in a),
        "new_right": sum(r["right"] for r in b),
        "only_new": only_new,
        "only_old": only_old,
        "mcnemar_p": mcnemar(only_new, only_old),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sets", type=Path, nargs="*", default=[DEFAULT_SET])
    ap.add_argument("--artifacts", type=Path, default=ARTIFACT_DIR, help="the domain head's directory")
    ap.add_argument(
        "--multilingual",
        default="shipped",
        help="the multilingual head for other languages: shipped, off, or a candidate's directory",
    )
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
    multilingual: object = args.multilingual == "shipped"
    if args.multilingual not in ("shipped", "off"):
        from app.models.multilingual import MultilingualDomain, SoftmaxHead
        from app.models.multilingual import shared_encoder as e5

        multilingual = MultilingualDomain(e5(), SoftmaxHead.load(Path(args.multilingual)), DOMAIN_CATEGORIES)
    classifier = DomainClassifier(encoder, args.artifacts, multilingual=multilingual)
    meta = classifier.meta
    report = {
        "artifacts": str(args.artifacts),
        "head": f"{meta.get('version')} ({meta.get('date')})",
        "multilingual": args.multilingual,
        "sets": {},
    }
    for path in args.sets:
        result = score(path, classifier, encoder)
        report["sets"][path.name] = result
        print_score(path.name, result)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
