"""Train the fact-check head (app/models/fact_check.py): does a prompt ask for verifiable facts?

Positives (`needs_fact_check`): the project's chat-style domain questions
(app/models/data/domain_chat_train.jsonl) and MMLU-Pro knowledge questions from
../shared/data/mmlu-pro (the `ori_mmlu-*` ones of the knowledge-heavy categories, question
text only). Negatives (`no_fact_check_needed`): project-written creative, coding, rewriting,
advice, chit-chat, arithmetic, brainstorming and role-play requests
(app/models/data/fact_check_negatives.jsonl). Features: the router's own int8 MiniLM vector.
Model: logistic regression with balanced class weights. Evaluated on a stratified 20 % split
and on HELD_OUT below (written apart from the training data, other topics and phrasings).

Run: PYTHONPATH=. .venv/bin/python scripts/train_fact_check.py   (about a minute)
Writes app/models/artifacts/fact_check_head.npz and fact_check_metrics.json.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score
from sklearn.model_selection import train_test_split

from app.models.fact_check import ARTIFACT, METRICS, FactCheckHead
from app.runtime.encoder import shared_encoder

ROOT = Path(__file__).resolve().parents[1]
MMLU = ROOT.parent / "shared" / "data" / "mmlu-pro" / "questions.jsonl"
KNOWLEDGE = {
    "history",
    "law",
    "health",
    "biology",
    "psychology",
    "philosophy",
    "economics",
    "business",
    "other",
}
MMLU_LIMIT = 700
SEED = 7

HELD_OUT: list[tuple[str, int]] = [
    ("When did the Ottoman Empire fall?", 1),
    ("Who painted the ceiling of the Sistine Chapel?", 1),
    ("What is the boiling point of ethanol?", 1),
    ("How many moons does Jupiter have?", 1),
    ("Which country has the largest population in Africa?", 1),
    ("What causes the northern lights?", 1),
    ("Is it true that goldfish have a three-second memory?", 1),
    ("What did the Treaty of Versailles require from Germany?", 1),
    ("How tall is Mount Kilimanjaro?", 1),
    ("What are the main symptoms of vitamin D deficiency?", 1),
    ("Who was the first woman to win a Nobel Prize?", 1),
    ("What is the GDP of Japan?", 1),
    ("Explain how vaccines train the immune system.", 1),
    ("Which planet has the longest day?", 1),
    ("What year was the first iPhone released?", 1),
    ("Write a limerick about a forgetful wizard.", 0),
    ("Make my email to the landlord sound less angry.", 0),
    ("Write a TypeScript function that debounces another function.", 0),
    ("What should I cook tonight if I only have eggs and potatoes?", 0),
    ("Give me three names for a hiking club.", 0),
    ("Translate 'see you tomorrow' into Italian.", 0),
    ("hey, you there?", 0),
    ("Pretend you're a grumpy cat and describe your Monday.", 0),
    ("What is 15 percent of 240?", 0),
    ("Summarize my notes: meeting moved, budget approved, hire two interns.", 0),
    ("Help me write a toast for my sister's graduation.", 0),
    ("Refactor this function so it has no nested ifs.", 0),
    ("I can't decide whether to repaint my kitchen. Thoughts?", 0),
    ("Draft a polite reminder about an unpaid invoice.", 0),
    ("Brainstorm slogans for a bike repair shop.", 0),
]


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as lines:  # not splitlines(): questions hold U+2028
        return [json.loads(line) for line in lines if line.strip()]


def dataset() -> tuple[list[str], list[int]]:
    positives = [row["text"] for row in read_jsonl(ROOT / "app/models/data/domain_chat_train.jsonl")]
    mmlu = [
        row["question"].split("\n")[0][:400]
        for row in read_jsonl(MMLU)
        if row["category"] in KNOWLEDGE and str(row.get("src", "")).startswith("ori_mmlu")
    ]
    random.Random(SEED).shuffle(mmlu)
    positives += mmlu[:MMLU_LIMIT]
    negatives = [row["text"] for row in read_jsonl(ROOT / "app/models/data/fact_check_negatives.jsonl")]
    return positives + negatives, [1] * len(positives) + [0] * len(negatives)


def main() -> None:
    encoder = shared_encoder()
    encoder.warm_up()
    texts, labels = dataset()
    vectors = np.vstack([encoder.encode(texts[i : i + 64]) for i in range(0, len(texts), 64)])
    y = np.asarray(labels)
    x_train, x_test, y_train, y_test = train_test_split(
        vectors, y, test_size=0.2, random_state=SEED, stratify=y
    )
    model = LogisticRegression(C=4.0, class_weight="balanced", max_iter=2000).fit(x_train, y_train)
    split_pred = model.predict(x_test)
    final = LogisticRegression(C=4.0, class_weight="balanced", max_iter=2000).fit(vectors, y)
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    np.savez(ARTIFACT, coef=final.coef_[0].astype(np.float32), intercept=np.float32(final.intercept_[0]))
    head = FactCheckHead.load()
    held_vectors = encoder.encode([t for t, _ in HELD_OUT])
    held_truth = [label for _, label in HELD_OUT]
    held_pred = [int(head.probability(v) >= 0.5) for v in held_vectors]
    timings = []
    for vector in held_vectors:
        began = time.perf_counter()
        head.probability(vector)
        timings.append((time.perf_counter() - began) * 1000)
    metrics = {
        "rows": {"needs_fact_check": int(y.sum()), "no_fact_check_needed": int((1 - y).sum())},
        "split_20pct": {
            "accuracy": round(float(accuracy_score(y_test, split_pred)), 4),
            "macro_f1": round(float(f1_score(y_test, split_pred, average="macro")), 4),
        },
        "held_out_written": {
            "n": len(HELD_OUT),
            "accuracy": round(float(accuracy_score(held_truth, held_pred)), 4),
            "macro_f1": round(float(f1_score(held_truth, held_pred, average="macro")), 4),
        },
        "head_p50_ms": round(statistics.median(timings), 4),
    }
    METRICS.write_text(json.dumps(metrics, indent=2) + "\n")
    print(json.dumps(metrics, indent=2))


if __name__ == "__main__":
    main()
