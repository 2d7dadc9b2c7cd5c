"""Hybrid-search variants on two labelled sets: recall@5 and MRR@10 per variant and set
(docs/storage.md "Measurements" has the figures and the method).

    PYTHONPATH=$PWD .venv/bin/python bench/bench_retrieval.py [--json]

Sets (the real MiniLM encoder embeds every document and query once; cached in /tmp):
- mmlu: the 56 MMLU subjects of ../shared/data/mmlu-pro with at least 7 questions; each
  subject's first 5 questions (text + correct answer) are its documents, its next 2 the
  queries; relevant = the subject's 5 documents (recall@5 = the share of them in the top 5).
- pydoc: docstrings of the Python standard library this interpreter ships (STDLIB below):
  each public function or method whose docstring has a one-line summary and a body of at
  least 12 words; document = "qualified.name: body" (the summary left out), query = the
  summary; relevant = that one document (recall@5 = hit@5). Duplicate summaries or bodies
  (aliases, inherited docs) are dropped.
Variants: vector only, BM25 only (plain words / stopwords + stemmer), RRF equal and weighted,
convex score fusion, and the rerank (app/srun/rerank.py's fusion) of the chosen fusions'
top 20. Tuned constants (the tokenizer and the
weight, jointly per fusion) are chosen on the tune half of each set's queries (even positions) by the mean of both sets;
the figures reported are the test half (odd positions) plus the whole set.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import inspect
import json
import os
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.storage import ranking  # noqa: E402
from app.storage.vector_index import Bm25, Chunk, words  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "mmlu-pro" / "questions.jsonl"
STDLIB = [
    "os",
    "os.path",
    "shutil",
    "json",
    "re",
    "collections",
    "itertools",
    "functools",
    "pathlib",
    "string",
    "textwrap",
    "datetime",
    "math",
    "statistics",
    "random",
    "subprocess",
    "socket",
    "threading",
    "urllib.parse",
    "email.utils",
    "http.client",
    "zipfile",
    "tarfile",
    "csv",
    "logging",
    "inspect",
    "typing",
    "difflib",
    "heapq",
    "bisect",
    "copy",
    "pickle",
    "tempfile",
    "glob",
    "fnmatch",
    "hashlib",
    "hmac",
    "base64",
    "binascii",
    "struct",
    "codecs",
    "locale",
    "calendar",
    "time",
    "uuid",
    "ipaddress",
    "argparse",
    "configparser",
    "sqlite3",
    "decimal",
    "fractions",
    "operator",
    "contextlib",
    "asyncio.tasks",
    "asyncio.streams",
    "queue",
    "sched",
    "select",
    "signal",
    "platform",
    "sysconfig",
    "shlex",
    "html",
    "html.parser",
    "xml.etree.ElementTree",
    "gzip",
    "bz2",
    "lzma",
    "zlib",
    "io",
    "unicodedata",
    "pprint",
    "traceback",
    "warnings",
    "weakref",
    "abc",
    "enum",
    "dataclasses",
    "secrets",
    "mimetypes",
    "webbrowser",
    "urllib.request",
    "wave",
    "colorsys",
]
DEPTH = 20  # each ranking's depth (VectorStores: max(20, 4 x max_num_results))


class LabelledSet:
    def __init__(self, name: str, docs: list[str], queries: list[str], relevant: list[set[int]]) -> None:
        self.name, self.docs, self.queries, self.relevant = name, docs, queries, relevant
        self.chunks = [Chunk(f"d{i}", "s", f"f{i}", 0, t) for i, t in enumerate(docs)]


def mmlu_set() -> LabelledSet:
    qs = [json.loads(line) for line in DATA.read_text().split("\n") if line.strip()]
    by_subject: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for q in qs:
        if q["src"].startswith("ori_mmlu-"):
            by_subject[q["src"]].append(q)
    docs: list[str] = []
    queries: list[str] = []
    relevant: list[set[int]] = []
    for subject in sorted(s for s, items in by_subject.items() if len(items) >= 7):
        first = len(docs)
        for q in by_subject[subject][:5]:
            docs.append(f"{q['question']} Answer: {q['options'][ord(q['answer']) - ord('A')]}")
        for q in by_subject[subject][5:7]:
            queries.append(q["question"])
            relevant.append(set(range(first, first + 5)))
    return LabelledSet("mmlu", docs, queries, relevant)


def pydoc_set() -> LabelledSet:
    seen_summary: set[str] = set()
    seen_body: set[str] = set()
    docs: list[str] = []
    queries: list[str] = []
    for module_name in STDLIB:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        members: list[tuple[str, Any]] = []
        for name, obj in sorted(vars(module).items()):
            if name.startswith("_"):
                continue
            if inspect.isclass(obj) and getattr(obj, "__module__", "") == module.__name__:
                members += [(f"{name}.{m}", f) for m, f in sorted(vars(obj).items()) if not m.startswith("_")]
            elif callable(obj) and getattr(obj, "__module__", None) == module.__name__:
                members.append((name, obj))
        for name, obj in members:
            doc = inspect.getdoc(obj) if callable(obj) else None
            if not doc:
                continue
            summary, _, body = doc.partition("\n\n")
            summary, body = " ".join(summary.split()), " ".join(body.split())
            if "\n" in doc.split("\n\n")[0] or len(summary.split()) < 3 or len(body.split()) < 12:
                continue  # no one-line summary, or too little body to find
            if summary.lower() in seen_summary or body in seen_body:
                continue
            seen_summary.add(summary.lower())
            seen_body.add(body)
            docs.append(f"{module_name}.{name}: {' '.join(body.split()[:160])}")
            queries.append(summary)
    return LabelledSet("pydoc", docs, queries, [{i} for i in range(len(docs))])


def embeddings(texts: list[str], encode: Callable[[list[str]], np.ndarray]) -> np.ndarray:
    key = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
    path = Path(f"/tmp/svc-sr-bench-retrieval-{key}.npy")
    if path.exists():
        return np.load(path)
    out = np.concatenate([encode(texts[i : i + 32]) for i in range(0, len(texts), 32)]).astype(np.float32)
    np.save(path, out)
    return out


class Evaluator:
    def __init__(self, data: LabelledSet, encode: Callable[[list[str]], np.ndarray]) -> None:
        self.data = data
        self.doc_vectors = embeddings(data.docs, encode)
        self.query_vectors = embeddings(data.queries, encode)
        self.bm25 = {
            "plain": Bm25(data.chunks, tokenize=words),
            "stem": Bm25(data.chunks, tokenize=ranking.terms),
        }
        self.vector_rankings = []
        for qv in self.query_vectors:
            scores = self.doc_vectors @ qv
            order = np.argsort(-scores, kind="stable")[:DEPTH]
            self.vector_rankings.append([(data.chunks[int(i)], float(scores[int(i)])) for i in order])

    def ranked(self, variant: str, q: int) -> list[tuple[Chunk, float]]:
        kind, _, arg = variant.partition(":")
        vec = self.vector_rankings[q]
        query = self.data.queries[q]
        if kind == "vector":
            return vec
        if kind == "bm25":
            return self.bm25[arg].search(query, DEPTH, None)
        if kind == "rerank":  # rerank:<fusion variant>: that fusion's candidates re-scored
            return ranking.rerank(query, self.ranked(arg, q), vec, DEPTH)
        tok, _, weight = arg.partition("@")
        lex = self.bm25[tok].search(query, DEPTH, None)
        if kind == "rrf":
            return ranking.rrf([vec, lex], DEPTH, [float(weight or 1), 1.0])
        if kind == "convex":
            alpha = float(weight)
            return ranking.convex([vec, lex], DEPTH, [alpha, 1 - alpha])
        raise ValueError(variant)

    def score(self, variant: str, queries: range | list[int]) -> dict[str, float]:
        recalls, rrs = [], []
        for q in queries:
            hits = [int(c.id[1:]) for c, _ in self.ranked(variant, q)]
            rel = self.data.relevant[q]
            recalls.append(len(rel & set(hits[:5])) / min(5, len(rel)))
            rrs.append(next((1 / (r + 1) for r, d in enumerate(hits[:10]) if d in rel), 0.0))
        return {"recall@5": round(statistics.mean(recalls), 4), "mrr@10": round(statistics.mean(rrs), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.parse_args()
    from app.runtime.encoder import shared_encoder

    encoder = shared_encoder()
    sets = [mmlu_set(), pydoc_set()]
    for s in sets:
        print(json.dumps({"set": s.name, "documents": len(s.docs), "queries": len(s.queries)}), flush=True)
    evaluators = [Evaluator(s, encoder.encode) for s in sets]
    fixed = ["vector", "bm25:plain", "bm25:stem"]
    tuned = {  # tokenizer x weight, chosen jointly on the tune halves
        "rrf": [f"rrf:{t}@{w}" for t in ("plain", "stem") for w in (1, 1.5, 2, 3, 4)],
        "convex": [f"convex:{t}@{a}" for t in ("plain", "stem") for a in (0.5, 0.6, 0.7, 0.8, 0.9)],
    }
    rows: dict[str, dict[str, Any]] = {}
    for variant in fixed + [v for vs in tuned.values() for v in vs]:
        row: dict[str, Any] = {}
        for ev in evaluators:
            n = len(ev.data.queries)
            row[ev.data.name] = {
                "tune": ev.score(variant, range(0, n, 2)),
                "test": ev.score(variant, range(1, n, 2)),
                "all": ev.score(variant, range(n)),
            }
        rows[variant] = row
        print(json.dumps({variant: row}), flush=True)
    # the weights: best mean tune recall@5 over both sets, per fusion
    chosen = {
        kind: max(
            vs, key=lambda v: statistics.mean(rows[v][e.data.name]["tune"]["recall@5"] for e in evaluators)
        )
        for kind, vs in tuned.items()
    }
    print(json.dumps({"chosen_on_tune": chosen}), flush=True)
    for variant in [f"rerank:{chosen['convex']}", f"rerank:{chosen['rrf']}"]:
        row = {}
        for ev in evaluators:
            n = len(ev.data.queries)
            row[ev.data.name] = {
                "tune": ev.score(variant, range(0, n, 2)),
                "test": ev.score(variant, range(1, n, 2)),
                "all": ev.score(variant, range(n)),
            }
        print(json.dumps({variant: row}), flush=True)


if __name__ == "__main__":
    main()
