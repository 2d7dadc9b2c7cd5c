#!/usr/bin/env python
"""Every shipped head that reads the encoder's vectors, scored under the encoder build this
process runs (app/runtime/quantize.py): how a build change is checked (docs/model-runtime.md).

Run it once per build, the other build selected with `SVC_SR_MODEL_CACHE` (a folder holding
that build's file under the current build's name), then pair the two outputs:

    .venv/bin/python scripts/check_encoder_heads.py --phase tuning --out /tmp/new.json
    SVC_SR_MODEL_CACHE=/tmp/oldcache .venv/bin/python scripts/check_encoder_heads.py \\
        --phase tuning --out /tmp/old.json
    .venv/bin/python scripts/check_encoder_heads.py --pair /tmp/old.json /tmp/new.json

`tuning`: each head's validation rows, as its trainer splits them (the decision rule: a head
whose figure moves by more than 0.5 point is retrained). The shipped jailbreak, harmful and
domain heads never trained on these rows; the fact-check, NLI, decision and selector heads
were refitted on all their rows, so for them the figure measures the vectors' shift on the
shipped head's own rows, not generalisation. `heldout`: each head's model-card figures (run once,
after the decision). Rows are kept per head (text digest, right or not) so that the pairing is
exact (McNemar, app/common/intervals.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from app.common.intervals import mcnemar, wilson  # noqa: E402

CACHE = Path.home() / ".cache" / "svc-sr"
Rows = dict[str, Any]  # {"keys": [...], "right": [...], "figures": {...}}


def digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def rows(keys: list[str], right: np.ndarray, **figures: float) -> Rows:
    return {
        "keys": keys,
        "right": [bool(r) for r in right],
        "figures": {"accuracy": round(float(np.mean(right)), 4), **figures} if len(right) else figures,
    }


def private_copy(name: str, work: Path) -> Path:
    """A private row cache for a trainer's loader, named here by ENCODER_ID alone on purpose:
    the loaders drop near-copies by their vectors, so the first build run fills it and the other
    reuses it, and both builds score the same rows (the scores themselves come from the live
    encoder). Use one `--work` folder for the two builds being paired; the trainers' own caches
    (`vector_cache_name`, named by the model file) are never touched."""
    target = work / name
    if not target.exists() and (CACHE / name).exists():
        shutil.copytree(CACHE / name, target)
    target.mkdir(parents=True, exist_ok=True)
    return target


# ------------------------------------------------------------------------------------------


def jailbreak(encoder, phase: str, work: Path) -> Rows:
    import train_jailbreak as tj

    from app.models.jailbreak import JailbreakGuard

    args = tj.parse_args(["--offline", "--emb-cache", str(private_copy("jailbreak-emb", work))])
    examples, _ = tj.load_examples(args)
    part = [e for e in examples if e.split == ("val" if phase == "tuning" else "test")]
    texts = [e.text for e in part]
    guard = JailbreakGuard(encoder=encoder)
    found = guard.detect_vectors(encoder.encode(texts), texts, method="classifier")
    pred = np.array([r.is_jailbreak for r in found])
    y = np.array([e.label for e in part]).astype(bool)
    return rows([digest(t) for t in texts], pred == y, recall=_rate(pred[y]), fpr=_rate(pred[~y]))


def harmful(encoder, phase: str, work: Path) -> Rows:
    import train_harmful as th

    from app.models.harmful import BENIGN, HarmfulClassifier

    cache_dir = private_copy("harmful-emb", work)
    args = th.parse_args(["--offline", "--emb-cache", str(cache_dir)])
    from app.runtime.encoder import ENCODER_ID

    cache = th.EmbeddingCache(cache_dir / f"{ENCODER_ID}-{encoder.max_tokens}.npz")
    examples, _ = th.load_examples(args, lambda texts: cache.embed(encoder, texts))
    part = [e for e in examples if e.split == ("val" if phase == "tuning" else "test")]
    texts = [e.text for e in part]
    probs = HarmfulClassifier(encoder=encoder).probabilities(encoder.encode(texts), texts)
    pred = probs[:, 0] < 0.5  # harm, as the trainer's evaluate() reads it
    y = np.array([(e.category or BENIGN) != BENIGN for e in part])
    return rows([digest(t) for t in texts], pred == y, recall=_rate(pred[y]), fpr=_rate(pred[~y]))


def domain(encoder, phase: str, work: Path) -> dict[str, Rows]:
    import train_domain as td

    from app.models.domain import DomainHead

    args = td.parse_args(["--cache-dir", str(private_copy("domain", work))])
    from app.runtime.encoder import ENCODER_ID

    cache = td.EmbeddingCache(args.cache_dir / f"embeddings-{ENCODER_ID}-{encoder.max_tokens}.npz")
    split, _ = td.load_data(args, cache, encoder)
    head, _ = DomainHead.load(ROOT / "app" / "models" / "artifacts")
    if phase == "tuning":
        sets = {"inner_validation": [e for e in split.train if e.source != "chat" and td.inner_val(e.text)]}
    else:
        sets = {"mmlu_pro_held_out": split.held_out, "chat_v1_v2": split.chat_eval + split.chat_eval_v2}
    out = {}
    for name, part in sets.items():
        texts = [e.text for e in part]
        pred = head.probabilities(encoder.encode(texts), texts).argmax(1)
        out[name] = rows([digest(t) for t in texts], pred == np.array([e.label for e in part]))
    return out


def fact_check(encoder, phase: str, work: Path) -> Rows:
    import train_fact_check as tf
    from sklearn.model_selection import train_test_split

    from app.models.fact_check import FactCheckHead

    head = FactCheckHead.load()
    if phase == "tuning":
        texts, labels = tf.dataset()
        idx = np.arange(len(texts))
        _, test = train_test_split(idx, test_size=0.2, random_state=tf.SEED, stratify=labels)
        texts, labels = [texts[i] for i in test], [labels[i] for i in test]
    else:
        texts, labels = [t for t, _ in tf.HELD_OUT], [y for _, y in tf.HELD_OUT]
    pred = np.array([head.probability(v) >= 0.5 for v in encoder.encode(texts)])
    return rows([digest(t) for t in texts], pred == np.array(labels).astype(bool))


def nli(encoder, phase: str, work: Path) -> Rows:
    import train_nli as tn

    from app.pipeline.answers.nli import NLI_LABELS, NLIHead

    built = tn.build_pairs(tn.load_sentences(tn.MMLU), tn.PREMISES, tn.SEED)
    want = tn.VAL_CATEGORIES if phase == "tuning" else tn.TEST_CATEGORIES
    pairs = [(p, h, label) for c, p, h, label in built if c in want]
    texts = sorted({t for p, h, _ in pairs for t in (p, h)})
    vectors = dict(zip(texts, encoder.encode(texts), strict=True))
    x = tn.featurize([(p, h) for p, h, _ in pairs], vectors)
    pred = NLIHead.load().probabilities(x).argmax(axis=1)
    y = np.array([NLI_LABELS.index(label) for *_, label in pairs])
    return rows([digest(p + "\n" + h) for p, h, _ in pairs], pred == y)


def decisions(encoder, phase: str, work: Path) -> Rows:
    import train_decision_calibration as tdc

    from app.srun.catalog import DECISION_MODEL, load

    model = load(DECISION_MODEL)
    items = tdc.read("decisions_train.jsonl" if phase == "tuning" else "decisions_eval.jsonl")
    figures = tdc.evaluate(model, items)
    flat = {f"{kind}.{k}": v for kind, m in figures.items() for k, v in m.items() if isinstance(v, float)}
    return {"keys": [], "right": [], "figures": flat}


def selectors(encoder, phase: str, work: Path) -> Rows:
    from sklearn.metrics import roc_auc_score

    from app.benchmark.crossval import recorded
    from app.benchmark.dataset import Dataset, question_text
    from app.models.selection import load_quality_model, packaged_artifact
    from app.pipeline.learning.quality_fit import FitSettings

    if phase != "tuning":  # the card's figures are cross-validated refits: scripts/evaluate_predictor.py
        return {"keys": [], "right": [], "figures": {}}
    dataset = Dataset.load(ROOT.parent / "shared" / "data" / "mmlu-pro")
    ids = [q.question_id for q in dataset.questions]
    texts = [question_text(q) for q in dataset.questions]
    held = np.random.default_rng(FitSettings().seed).random(len(ids)) < FitSettings().validation_share
    table = dict(zip(ids, encoder.encode(texts), strict=True))
    data = recorded(dataset, ids, table).rows(held)  # mf's own validation rows
    figures = {}
    for kind in ("mf", "knn", "mlp"):
        model = load_quality_model(packaged_artifact(kind), kind)
        quality = model.estimate_many(data.vectors)[0] if kind == "mf" else model.predict_many(data.vectors)
        aucs = [roc_auc_score(data.correct[:, m], quality[:, m]) for m in range(data.correct.shape[1])]
        figures[f"{kind}.mean_auc"] = round(float(np.mean(aucs)), 4)
    return {"keys": [], "right": [], "figures": figures}


def _rate(flags: np.ndarray) -> float:
    return round(float(np.mean(flags)), 4) if len(flags) else float("nan")


HEADS: dict[str, Callable[..., Any]] = {
    "jailbreak": jailbreak,
    "harmful": harmful,
    "domain": domain,
    "fact_check": fact_check,
    "nli": nli,
    "decisions": decisions,
    "selectors": selectors,
}


def run(phase: str, heads: list[str], out: Path, work: Path) -> None:
    from app.common.digest import file_sha256
    from app.runtime.encoder import MiniLMEncoder, onnx_model_path

    encoder = MiniLMEncoder()
    model = f"{onnx_model_path().name} sha256:{file_sha256(onnx_model_path())[:12]}"
    done = json.loads(out.read_text()) if out.exists() else {"model": model, "heads": {}}
    if done["model"] != model:  # one output file holds one build's figures
        raise SystemExit(f"{out} holds figures of {done['model']}, not of {model}: use another --out")
    for name in heads:
        result = HEADS[name](encoder, phase, work)
        done["heads"][name] = result if "keys" not in result else {name: result}
        print(name, json.dumps({k: v["figures"] for k, v in done["heads"][name].items()}), flush=True)
        out.write_text(json.dumps(done))


def pair(old_path: Path, new_path: Path) -> dict[str, Any]:
    """Per head and row set: both builds' figures, and for row-level sets the Wilson interval
    of each accuracy and the exact McNemar p of the rows that changed."""
    old, new = json.loads(old_path.read_text()), json.loads(new_path.read_text())
    report: dict[str, Any] = {"old": old["model"], "new": new["model"], "sets": {}}
    for head, sets in new["heads"].items():
        if head not in old["heads"]:
            report["sets"][head] = "not in OLD"
            continue
        for name, b in sets.items():
            a = old["heads"][head][name]
            entry: dict[str, Any] = {"old": a["figures"], "new": b["figures"]}
            if b["keys"]:
                assert a["keys"] == b["keys"], f"{head}/{name}: different rows"
                ra, rb = np.array(a["right"]), np.array(b["right"])
                n = len(ra)
                entry |= {
                    "n": n,
                    "old_right": int(ra.sum()),
                    "new_right": int(rb.sum()),
                    "old_ci": [round(x, 4) for x in wilson(int(ra.sum()), n)],
                    "new_ci": [round(x, 4) for x in wilson(int(rb.sum()), n)],
                    "fixed": int((rb & ~ra).sum()),
                    "broken": int((ra & ~rb).sum()),
                    "mcnemar_p": round(mcnemar(int((rb & ~ra).sum()), int((ra & ~rb).sum())), 4),
                }
            report["sets"][f"{head}/{name}"] = entry
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phase", choices=("tuning", "heldout"), default="tuning")
    ap.add_argument("--heads", nargs="+", choices=sorted(HEADS), default=list(HEADS))
    ap.add_argument("--out", type=Path, help="this build's rows (JSON; heads already in it are kept)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/check-encoder-heads"))
    ap.add_argument("--pair", nargs=2, type=Path, metavar=("OLD", "NEW"))
    args = ap.parse_args(argv)
    if args.pair:
        print(json.dumps(pair(*args.pair), indent=1))
        return 0
    if args.out is None:
        ap.error("--out is required without --pair")
    run(args.phase, args.heads, args.out, args.work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
