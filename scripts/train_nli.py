"""Train the NLI head (app/pipeline/answers/nli.py): entailment / neutral / contradiction of a pair.

No labelled NLI data is available offline, so the pairs are constructed from declarative
sentences of MMLU-Pro questions (../shared/data/mmlu-pro/questions.jsonl), one pair per label
per premise sentence:

- entailment: the sentence with a clause dropped (a leading "Although/Because/In 1990, ..."
  clause, a trailing ", which/because/and ..." clause, a parenthesis), with adverbs and
  intensifiers dropped, with a noun replaced by a hypernym from a small list, or (5 %) itself;
- contradiction: the sentence negated after its first auxiliary (or its negation removed), a
  number changed, a word swapped for its antonym (app/pipeline/answers/nli.py ANTONYM_PAIRS), a
  quantifier flipped (all/every/always -> no/never);
- neutral: the sentence's subject with another sentence's predicate, the sentence plus an
  unsupported added clause, or another sentence of the same question / MMLU subject.

The split is by MMLU-Pro category: TEST_CATEGORIES give the held-out figures, VAL_CATEGORIES
pick the regularisation, the rest train; the final head is refitted on train + val. The
hand-written pairs of tests/data/nli_handwritten.jsonl (written before any training, never
used to choose anything) are scored last, as the natural-language check.

Run: PYTHONPATH=. .venv/bin/python scripts/train_nli.py   (a few minutes on 2 cores; vectors
are cached under --emb-cache). Writes app/models/artifacts/nli_head.npz and nli_metrics.json
(docs/model-cards/nli.md reports them).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.pipeline.answers.hallucination import split_sentences  # noqa: E402
from app.pipeline.answers.nli import (  # noqa: E402
    ANTONYMS,
    ARTIFACT,
    METRICS,
    NLI_LABELS,
    NLIHead,
    pair_features,
)
from app.runtime.encoder import ENCODER_ID, shared_encoder, vector_cache_name  # noqa: E402

MMLU = ROOT.parent / "shared" / "data" / "mmlu-pro" / "questions.jsonl"
HANDWRITTEN = ROOT / "tests" / "data" / "nli_handwritten.jsonl"
TEST_CATEGORIES = frozenset({"history", "psychology", "engineering"})
VAL_CATEGORIES = frozenset({"economics", "biology"})
C_GRID = (0.05, 0.2, 1.0)
SEED = 13
PREMISES = 2400  # premise sentences sampled (3 pairs each)

AUX = frozenset(
    [
        "is",
        "are",
        "was",
        "were",
        "can",
        "will",
        "has",
        "have",
        "had",
        "should",
        "must",
        "could",
        "would",
        "may",
        "does",
        "do",
        "did",
    ]
)
UNNEGATE = {"isn't": "is", "aren't": "are", "wasn't": "was", "weren't": "were", "doesn't": "does"}
UNNEGATE |= {"don't": "do", "didn't": "did", "cannot": "can", "can't": "can", "won't": "will"}
IMPERATIVES = frozenset(
    [
        "calculate",
        "find",
        "determine",
        "assume",
        "suppose",
        "consider",
        "compute",
        "neglect",
        "estimate",
        "evaluate",
        "show",
        "use",
        "let",
        "given",
        "express",
        "identify",
        "explain",
        "what",
        "which",
        "how",
    ]
)
LEADING = ("Although", "Because", "Though", "After", "Before", "Since", "In", "During", "Despite")
TRAILING = (", which ", ", who ", ", because ", ", although ", ", and ", ", but ", ", while ")
ADVERBS = frozenset(
    ["very", "quite", "extremely", "highly", "also", "really", "actually", "currently", "recently", "often"]
)
NOT_ADVERBS = frozenset(
    ["only", "early", "family", "supply", "apply", "reply", "italy", "july", "fly", "rely", "daily", "likely"]
)
HYPERNYMS = {
    "man": "person", "woman": "person", "boy": "child", "girl": "child", "dog": "animal",
    "cat": "animal", "horse": "animal", "car": "vehicle", "truck": "vehicle", "bus": "vehicle",
    "physician": "doctor", "surgeon": "doctor", "attorney": "lawyer", "corporation": "company",
    "hammer": "tool", "oak": "tree", "salmon": "fish", "student": "person", "defendant": "person",
    "plaintiff": "party", "buyer": "person", "seller": "person", "employee": "worker",
    "pharmacist": "person", "judge": "official", "senator": "politician", "contract": "agreement",
    "homeowner": "owner", "tenant": "person", "landlord": "owner", "gun": "weapon",
    "knife": "weapon", "pistol": "weapon", "rifle": "weapon", "house": "building",
    "apartment": "home", "bacteria": "microorganisms", "virus": "pathogen", "enzyme": "protein",
    "electron": "particle", "proton": "particle", "iron": "metal", "copper": "metal",
    "gold": "metal", "neuron": "cell", "husband": "spouse", "wife": "spouse", "son": "child",
    "daughter": "child", "father": "parent", "mother": "parent", "brother": "sibling",
    "sister": "sibling", "patient": "person", "officer": "person", "farmer": "person",
}  # fmt: skip
PREPOSITIONS = frozenset(["in", "on", "at", "during", "after", "before", "for", "with", "from", "by"])
QUANTIFIERS = {"all": "no", "every": "no", "always": "never", "some": "no"}


# ------------------------------------------------------------------ sentences
def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as lines:  # not splitlines(): questions hold U+2028
        return [json.loads(line) for line in lines if line.strip()]


def usable(sentence: str) -> bool:
    words = sentence.split()
    return (
        sentence.endswith(".")
        and 6 <= len(words) <= 30
        and sentence[0].isupper()
        and words[0].lower().strip(",") not in IMPERATIVES
        and not re.search(r"[_$=\\^{}|?:;\[\]]|\d\.\d*\s*$|\.\.", sentence)
        and sentence.isascii()
    )


def load_sentences(path: Path) -> list[tuple[str, int, str]]:
    """(category, question_id, sentence) of every usable sentence, in file order."""
    out = []
    for row in read_jsonl(path):
        for sentence in split_sentences(row["question"]):
            if usable(sentence):
                out.append((row["category"], int(row["question_id"]), sentence))
    return out


# ------------------------------------------------------------------ transforms
def _tok(word: str) -> str:
    return word.lower().strip(".,;:!?\"'()")


def _join(words: list[str]) -> str:
    text = " ".join(words).strip()
    text = text.rstrip(",;") if not text.endswith(".") else text
    if not text.endswith("."):
        text = text.rstrip(".,;") + "."
    return text[0].upper() + text[1:]


def _recase(template: str, word: str) -> str:
    """`word` with the capitalisation and trailing punctuation of `template`."""
    core = template.rstrip(".,;:!?\"')")
    tail = template[len(core) :]
    return (word.capitalize() if core[:1].isupper() else word) + tail


def _aux_index(words: list[str], lo: int = 1, hi: int = 8) -> int | None:
    for i in range(lo, min(hi, len(words) - 1)):
        if _tok(words[i]) in AUX:
            return i
    return None


def entail(sentence: str, rng: random.Random) -> str | None:
    words = sentence.split()
    options: list[str] = []
    first = words[0].strip(",")
    if first in LEADING and ", " in sentence:
        rest = sentence.split(", ", 1)[1]
        if len(rest.split()) >= 4:
            options.append(_join(rest.split()))
    for marker in TRAILING:
        at = sentence.find(marker)
        if at > 0 and len(sentence[:at].split()) >= 4:
            options.append(_join(sentence[:at].split()))
    if "(" in sentence:
        stripped = re.sub(r"\s*\([^)]*\)", "", sentence)
        if stripped != sentence and len(stripped.split()) >= 4:
            options.append(_join(stripped.split()))
    dropped = [
        w
        for w in words
        if not (_tok(w) in ADVERBS or (_tok(w).endswith("ly") and _tok(w) not in NOT_ADVERBS))
        or w != w.rstrip(".,;")
    ]
    if len(dropped) < len(words) and len(dropped) >= 4:
        options.append(_join(dropped))
    hyper = [i for i, w in enumerate(words) if _tok(w) in HYPERNYMS]
    if hyper:
        i = rng.choice(hyper)
        out = list(words)
        out[i] = _recase(words[i], HYPERNYMS[_tok(words[i])])
        options.append(_join(out))
    adjunct = [i for i, w in enumerate(words) if i >= 4 and w in PREPOSITIONS and len(words) - i <= 6]
    if adjunct:
        options.append(_join(words[: adjunct[-1]]))
    if rng.random() < 0.06:  # a sentence entails itself
        return sentence
    return rng.choice(options) if options else None


def contradict(sentence: str, rng: random.Random) -> str | None:
    words = sentence.split()
    options: list[str] = []
    negated = [i for i, w in enumerate(words) if _tok(w) in ("not", "never") or _tok(w) in UNNEGATE]
    if negated:
        out = []
        for w in words:
            t = _tok(w)
            if t in ("not", "never"):
                continue
            out.append(_recase(w, UNNEGATE[t]) if t in UNNEGATE else w)
        options.append(_join(out))
    else:
        i = _aux_index(words)
        if i is not None:
            options.append(_join(words[: i + 1] + ["not"] + words[i + 1 :]))
    nums = [i for i, w in enumerate(words) if re.fullmatch(r"\d+(,\d{3})*", w.rstrip(".,;%"))]
    if nums:
        i = rng.choice(nums)
        core = words[i].rstrip(".,;%")
        value = int(core.replace(",", ""))
        changed = value * rng.choice((2, 3, 10)) + rng.choice((1, 3, 7)) if value else rng.randint(2, 9)
        out = list(words)
        out[i] = str(changed) + words[i][len(core) :]
        options.append(_join(out))
    swaps = [i for i, w in enumerate(words) if _tok(w) in ANTONYMS]
    if swaps:
        i = rng.choice(swaps)
        out = list(words)
        out[i] = _recase(words[i], sorted(ANTONYMS[_tok(words[i])])[0])
        options.append(_join(out))
    quants = [i for i, w in enumerate(words) if _tok(w) in QUANTIFIERS and w == w.rstrip(".,;")]
    if quants:
        i = rng.choice(quants)
        out = list(words)
        out[i] = _recase(words[i], QUANTIFIERS[_tok(words[i])])
        options.append(_join(out))
    return rng.choice(options) if options else None


def neutral(sentence: str, others: list[str], neighbours: list[str], rng: random.Random) -> str | None:
    words = sentence.split()
    options: list[str] = []
    i = _aux_index(words)
    donors = [o for o in rng.sample(others, min(6, len(others))) if o != sentence]
    for donor in donors:
        d = donor.split()
        j = _aux_index(d)
        if i is not None and j is not None:
            options.append(_join(words[:i] + d[j:]))
            break
    if donors:
        donor = donors[0].split()
        j = _aux_index(donor)
        if j is not None and rng.random() < 0.5:
            options.append(_join(words[:-1] + [words[-1].rstrip("."), "and"] + donor[j:]))
        else:
            tail = donors[0][0].lower() + donors[0][1:]
            options.append(_join(words[:-1] + [words[-1].rstrip(".") + ",", "because"] + tail.split()))
        options.append(donors[0])
    near = [n for n in neighbours if n != sentence]
    if near:
        options.append(rng.choice(near))
    return rng.choice(options) if options else None


def build_pairs(
    sentences: list[tuple[str, int, str]], premises: int, seed: int
) -> list[tuple[str, str, str, str]]:
    """(category, premise, hypothesis, label) rows: one per label for `premises` sentences."""
    rng = random.Random(seed)
    by_category: dict[str, list[str]] = defaultdict(list)
    by_question: dict[int, list[str]] = defaultdict(list)
    for category, qid, sentence in sentences:
        by_category[category].append(sentence)
        by_question[qid].append(sentence)
    unique = list(dict.fromkeys(sentences))
    rng.shuffle(unique)
    rows = []
    for category, qid, sentence in unique:
        made = {
            "entailment": entail(sentence, rng),
            "contradiction": contradict(sentence, rng),
            "neutral": neutral(sentence, by_category[category], by_question[qid], rng),
        }
        if all(made.values()):  # balanced: a premise gives all three labels or none
            rows += [(category, sentence, str(h), label) for label, h in made.items()]
        if len(rows) >= 3 * premises:
            break
    return rows


# ------------------------------------------------------------------ features
def embed_all(texts: list[str], cache_dir: Path | None) -> dict[str, np.ndarray]:
    """Unit vectors of every distinct text, from the cache where present."""
    cache_file = (
        cache_dir / f"nli-{vector_cache_name(shared_encoder().max_tokens)}.npz" if cache_dir else None
    )
    known: dict[str, np.ndarray] = {}
    if cache_file and cache_file.is_file():
        with np.load(cache_file) as data:
            known = dict(zip([str(k) for k in data["keys"]], data["vectors"], strict=True))
    key = {t: hashlib.sha1(t.encode()).hexdigest() for t in texts}
    todo = list(dict.fromkeys(t for t in texts if key[t] not in known))
    if todo:
        encoder = shared_encoder()
        encoder.warm_up()
        for start in range(0, len(todo), 64):
            batch = todo[start : start + 64]
            for text, vector in zip(batch, encoder.encode(batch), strict=True):
                known[key[text]] = vector
        if cache_file:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            np.savez(cache_file, keys=np.asarray(list(known)), vectors=np.stack(list(known.values())))
    return {t: known[key[t]] for t in texts}


def featurize(pairs: list[tuple[str, str]], vectors: dict[str, np.ndarray]) -> np.ndarray:
    return np.stack([pair_features(p, h, vectors[p], vectors[h]) for p, h in pairs])


def standardize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    return mean, np.where(scale < 1e-6, 1.0, scale)


def fit(x: np.ndarray, y: np.ndarray, c: float, seed: int) -> tuple[np.ndarray, ...]:
    mean, scale = standardize(x)
    model = LogisticRegression(C=c, max_iter=3000, random_state=seed).fit((x - mean) / scale, y)
    return mean, scale, model.coef_, model.intercept_


def scores(y: np.ndarray, pred: np.ndarray) -> dict | None:
    if not len(y):  # a tiny slice may hold no pair of a split's categories
        return None
    per_class = {
        label: round(float((pred[y == k] == k).mean()), 4) if (y == k).any() else None
        for k, label in enumerate(NLI_LABELS)
    }
    return {
        "n": int(len(y)),
        "accuracy": round(float(accuracy_score(y, pred)), 4),
        "macro_f1": round(float(f1_score(y, pred, average="macro")), 4),
        "per_class_accuracy": per_class,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--premises", type=int, default=PREMISES)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--mmlu", type=Path, default=MMLU)
    parser.add_argument("--out", type=Path, default=ARTIFACT.parent, help="artifact directory")
    parser.add_argument("--emb-cache", type=Path, default=ROOT / ".cache" / "train-nli")
    args = parser.parse_args(argv)

    rows = build_pairs(load_sentences(args.mmlu), args.premises, args.seed)
    handwritten = read_jsonl(HANDWRITTEN)
    texts = [t for _, p, h, _ in rows for t in (p, h)]
    texts += [t for r in handwritten for t in (r["premise"], r["hypothesis"])]
    vectors = embed_all(texts, args.emb_cache)
    x = featurize([(p, h) for _, p, h, _ in rows], vectors)
    y = np.asarray([NLI_LABELS.index(label) for *_, label in rows])
    split = np.asarray(
        ["test" if c in TEST_CATEGORIES else "val" if c in VAL_CATEGORIES else "train" for c, *_ in rows]
    )
    train, val, test = split == "train", split == "val", split == "test"

    def predict(params: tuple[np.ndarray, ...], features: np.ndarray) -> np.ndarray:
        mean, scale, coef, intercept = params
        return np.asarray((((features - mean) / scale) @ coef.T + intercept).argmax(axis=1))

    val_accuracy = {}
    if val.any() and len(set(y[train])) == len(NLI_LABELS):
        for c in C_GRID:
            fitted_c = fit(x[train], y[train], c, args.seed)
            val_accuracy[c] = float(accuracy_score(y[val], predict(fitted_c, x[val])))
    best_c = max(C_GRID, key=lambda c: (val_accuracy.get(c, 0.0), c == C_GRID[1], -c))
    # Held-out subjects: a head fitted on train + val scores the test categories.
    fitted = fit(x[train | val], y[train | val], best_c, args.seed)
    test_scores = scores(y[test], predict(fitted, x[test]))
    # The shipped head sees every constructed pair.
    mean, scale, coef, intercept = fit(x, y, best_c, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    artifact = args.out / ARTIFACT.name
    np.savez(
        artifact,
        labels=np.asarray(NLI_LABELS),
        mean=mean.astype(np.float32),
        scale=scale.astype(np.float32),
        coef=coef.astype(np.float32),
        intercept=intercept.astype(np.float32),
    )
    head = NLIHead.load(artifact)
    hw_x = featurize([(r["premise"], r["hypothesis"]) for r in handwritten], vectors)
    hw_y = np.asarray([NLI_LABELS.index(r["label"]) for r in handwritten])
    hw_pred = head.probabilities(hw_x).argmax(axis=1)
    confusion = Counter(f"{NLI_LABELS[t]}->{NLI_LABELS[p]}" for t, p in zip(hw_y, hw_pred, strict=True))
    # One call's latency, as the route spends it: the encoder on the pair, then features + head.
    encoder = shared_encoder()
    encoder.warm_up()
    head_ms, call_ms = [], []
    for r in handwritten:
        began = time.perf_counter()
        u, v = encoder.encode([r["premise"], r["hypothesis"]])
        encoded = time.perf_counter()
        head.scores(r["premise"], r["hypothesis"], u, v)
        done = time.perf_counter()
        head_ms.append((done - encoded) * 1000)
        call_ms.append((done - began) * 1000)
    metrics = {
        "encoder": ENCODER_ID,
        "seed": args.seed,
        "pairs": {label: int((y == k).sum()) for k, label in enumerate(NLI_LABELS)},
        "split": {s: int((split == s).sum()) for s in ("train", "val", "test")},
        "test_categories": sorted(TEST_CATEGORIES),
        "val_categories": sorted(VAL_CATEGORIES),
        "val_accuracy_by_C": {str(c): round(a, 4) for c, a in val_accuracy.items()},
        "C": best_c,
        "constructed_heldout_subjects": test_scores,
        "handwritten": {**scores(hw_y, hw_pred), "confusion": dict(sorted(confusion.items()))},
        "head_p50_ms": round(statistics.median(head_ms), 4),
        "call_p50_ms": round(statistics.median(call_ms), 3),
    }
    (args.out / METRICS.name).write_text(json.dumps(metrics, indent=2) + "\n")
    print(json.dumps(metrics, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
