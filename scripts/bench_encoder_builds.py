#!/usr/bin/env python
"""The encoder build against its alternatives on one machine (app/runtime/quantize.py): the
cosine of each build's vectors to the fp32 folded model's, and the time per text on one thread.

Builds: `s8` (uint8 activations x int8 weights, shipped until 2026-11-30; exact only on CPUs
with VNNI or AMX), `s8rr` (the same with reduce_range), `u8` (uint8 x uint8, the shipped build
since: exact on every CPU). Texts: a file of one text a line, shuffled with seed 0, the first N.

    .venv/bin/python scripts/bench_encoder_builds.py TEXTS.txt [--n 300] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.runtime.encoder import load_tokenizer, packaged_model_path, row_feeds  # noqa: E402
from app.runtime.quantize import _quiet_root_logger, fold_constants  # noqa: E402


def variants() -> dict[str, dict]:
    from onnxruntime.quantization import QuantType

    return {
        "s8": {"weight_type": QuantType.QInt8},
        "s8rr": {"weight_type": QuantType.QInt8, "reduce_range": True},
        "u8": {"weight_type": QuantType.QUInt8},
    }


def session(path: Path):
    import onnxruntime as ort

    options = ort.SessionOptions()  # as MiniLMEncoder runs it, one thread
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def vectors(path: Path, encodings: list) -> tuple[np.ndarray, np.ndarray]:
    sess, out, times = session(path), [], []
    for enc in encodings:
        began = time.perf_counter()
        states = sess.run(None, row_feeds(enc.ids))[0][0]
        times.append((time.perf_counter() - began) * 1000)
        pooled = states.mean(axis=0)
        out.append(pooled / np.linalg.norm(pooled))
    return np.array(out), np.array(times)


def main(argv: list[str] | None = None) -> int:
    from onnxruntime.quantization import quantize_dynamic

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("texts", type=Path)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-encoder-builds"))
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    folded = args.work / "folded.onnx"
    if not folded.exists():
        fold_constants(packaged_model_path(), folded)
    for name, kwargs in variants().items():
        if not (args.work / f"{name}.onnx").exists():
            with _quiet_root_logger():
                quantize_dynamic(str(folded), str(args.work / f"{name}.onnx"), per_channel=True, **kwargs)
    texts = [line.strip() for line in args.texts.read_text().splitlines() if line.strip()]
    random.Random(0).shuffle(texts)
    encodings = load_tokenizer(256).encode_batch(texts[: args.n])
    short = np.array([len(e.ids) <= 32 for e in encodings])
    reference, fp32_ms = vectors(folded, encodings)
    report: dict[str, object] = {
        "texts": len(encodings),
        "short_texts": int(short.sum()),
        "cpu_count": os.cpu_count(),
        "fp32_ms_median": round(float(np.median(fp32_ms)), 2),
    }
    for name in variants():
        vecs, ms = vectors(args.work / f"{name}.onnx", encodings)
        cos = (vecs * reference).sum(axis=1)
        report[name] = {
            "cos_median": round(float(np.median(cos)), 5),
            "cos_p1": round(float(np.percentile(cos, 1)), 5),
            "cos_min": round(float(cos.min()), 5),
            "ms_median": round(float(np.median(ms)), 2),
            "ms_p99": round(float(np.percentile(ms, 99)), 2),
            "short_ms_median": round(float(np.median(ms[short])), 2) if short.any() else None,
        }
        print(name, json.dumps(report[name]), flush=True)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
