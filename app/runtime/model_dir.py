"""A user's own model directory (docs/model-runtime.md, "Your own models"): what it holds,
where it is, and whether it can load, checked from its small files before any weights load.

- `resolve_model_ref(ref, cache_dir)`: a local directory, or `ORG/NAME@COMMIT` (or `ORG/NAME`,
  read through the cache's `refs/main`) from a Hugging Face hub cache
  (`models--ORG--NAME/snapshots/COMMIT/`). Nothing is downloaded: a repository missing from the
  cache is an error naming the cache path.
- `inspect_model_dir(path)`: the task, labels, width and format, from config.json,
  modules.json / 1_Pooling/config.json, tokenizer.json and the safetensors header (a few KB;
  the weights themselves are not read). Every refusal is a `ModelDirError` naming the path and
  the reason, so a bad directory fails at load or validation, never on a request.

Layouts: `hf` (config.json, model.safetensors or pytorch_model.bin, tokenizer.json) for
`*ForSequenceClassification` (label_probabilities; with one label a cross-encoder: rerank),
`*ForTokenClassification` (token_spans)
and an encoder in the sentence-transformers layout or a bare `*Model` (embeddings, mean
pooling unless 1_Pooling says otherwise); `onnx` (the same files with model.onnx instead of
the weights, as `svc-srun train` exports).
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from app.common.digest import file_sha256
from app.runtime.schemas import ArtifactRef, NotReady, Task

Format = Literal["hf", "onnx"]
Pooling = Literal["mean", "cls", "max"]
COMMIT = re.compile(r"^[0-9a-f]{40}$")
REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
MAX_TOKENS = 512  # the longest input one forward reads, whatever the config allows
HEADER_LIMIT = 100 * 1024 * 1024  # a safetensors header larger than this is not one
# The classification head's output projection, by the names transformers' architectures use.
HEAD_WEIGHTS = ("classifier.weight", "classifier.out_proj.weight", "score.weight")
POOLING_KEYS: dict[Pooling, str] = {
    "cls": "pooling_mode_cls_token",
    "max": "pooling_mode_max_tokens",
    "mean": "pooling_mode_mean_tokens",
}
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


class ModelDirError(NotReady, ValueError):
    """A model directory (or reference) that cannot load: `path` and `reason`, both in the
    message. A `NotReady`, so a worker reports the model `failed` at once, not retried."""

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:  # crosses process boundaries (Ray, workers)
        return (type(self), (self.path, self.reason))


@dataclass
class ModelDirInfo:
    """What a model directory holds, read from its small files."""

    path: Path
    name: str
    task: Task
    format: Format
    architecture: str
    model_type: str
    labels: list[str]
    dimensions: int  # hidden width: the embedding's size, or what the head reads
    max_tokens: int
    tokenizer: Path
    weights: Path
    files: list[Path] = field(default_factory=list)  # what the digest covers
    pooling: Pooling | None = None  # embeddings only
    bio: bool = False  # token_spans: labels are B-/I- tags
    revision: str | None = None  # the hub commit of a cache snapshot

    @property
    def served_labels(self) -> list[str]:
        """The labels answers carry: `labels` (config.json's id2label), or for a token
        classifier the entity types its tags name (B-/I- dropped, O left out)."""
        if self.task == "rerank":
            return []  # one relevance logit, no label
        if self.task != "token_spans":
            return list(self.labels)
        types = (tag[2:] if tag[:2] in ("B-", "I-") else tag for tag in self.labels)
        return list(dict.fromkeys(t for t in types if t != "O"))

    @cached_property
    def artifacts(self) -> list[ArtifactRef]:
        return [ArtifactRef(name=str(f.relative_to(self.path)), sha256=file_sha256(f)) for f in self.files]

    @cached_property
    def digest(self) -> str:
        """sha256 over every file the model loads (hashed once per file, size and mtime)."""
        lines = "\n".join(f"{a.name}@{a.sha256}" for a in self.artifacts)
        return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()


# --------------------------------------------------------------------------- references


def looks_like_ref(name: str) -> bool:
    """Whether `name` names a directory or a hub repository rather than a built-in model."""
    return "/" in name or "@" in name or name.startswith((".", "~")) or Path(name).is_dir()


def hub_cache(cache_dir: Path | None) -> Path:
    if cache_dir is not None:
        return cache_dir
    from app.runtime.base_model import hub_cache_dir

    return hub_cache_dir()


def resolve_model_ref(ref: str, cache_dir: Path | None = None) -> Path:
    """The directory `ref` names: an existing local directory, or a snapshot of `ORG/NAME@COMMIT`
    in the hub cache (`cache_dir`, else `--cache-dir` / HF_HUB_CACHE / HF_HOME/hub / the default).
    ModelDirError: no such directory, a repository not in the cache, a revision that is not a
    40-character commit."""
    local = Path(ref).expanduser()
    if local.is_dir():
        return local.resolve()
    repo, at, revision = ref.rpartition("@") if "@" in ref else (ref, "", "")
    if ref.startswith(("/", ".", "~")) or not REPO.match(repo):
        raise ModelDirError(ref, "no such directory (and not ORG/NAME[@COMMIT] of a hub repository)")
    if at and not COMMIT.match(revision):
        raise ModelDirError(
            ref, f"revision {revision!r} is not a 40-character commit: pin the snapshot's full commit hash"
        )
    cache = hub_cache(cache_dir)
    root = cache / ("models--" + repo.replace("/", "--"))
    if not revision:
        main = root / "refs" / "main"
        if not main.is_file():
            raise ModelDirError(
                root, f"{repo} is not in the hub cache {cache} (offline: nothing is downloaded)"
            )
        revision = main.read_text().strip()
    snapshot = root / "snapshots" / revision
    if not snapshot.is_dir():
        raise ModelDirError(
            snapshot,
            f"{repo}@{revision} is not in the hub cache {cache} (offline: nothing is downloaded; "
            f"fetch it into that cache first)",
        )
    return snapshot


def _name(directory: Path) -> str:
    """The directory's name; a hub-cache snapshot's is its repository (`models--ORG--NAME`)."""
    if snapshot_commit(directory) is None:
        return directory.name
    return directory.parent.parent.name.removeprefix("models--").replace("--", "/")


def snapshot_commit(path: Path) -> str | None:
    """The commit of a hub-cache snapshot directory (`.../snapshots/COMMIT`), else None."""
    if path.parent.name == "snapshots" and COMMIT.match(path.name):
        return path.name
    return None


# --------------------------------------------------------------------------- inspection


def _json(path: Path, directory: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ModelDirError(directory, f"missing {path.relative_to(directory)}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelDirError(path, f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ModelDirError(path, "expected a JSON object")
    return data


def inspect_model_dir(path: Path | str) -> ModelDirInfo:
    """Read and check a model directory's small files (ModelDirError names the path and reason)."""
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise ModelDirError(directory, "no such directory")
    directory = directory.resolve()
    config = _json(directory / "config.json", directory)
    fmt, weights = _weights(directory)
    architecture = _architecture(config, directory)
    task = _task(architecture, directory)
    labels = _labels(config, directory) if task != "embeddings" else []
    if task == "label_probabilities" and len(labels) == 1:
        task = "rerank"  # one logit over a (query, passage) pair: a cross-encoder
    vocab_size = _int(config, "vocab_size", directory)
    dimensions = _int(config, "hidden_size", directory, fallback=("dim", "d_model"))
    tokenizer = _tokenizer(directory, vocab_size)
    files = [directory / "config.json", weights, tokenizer]
    pooling = None
    if task == "embeddings":
        pooling, pooling_files = _pooling(directory, dimensions)
        files += pooling_files
    if fmt == "hf" and weights.name == "model.safetensors":
        _check_safetensors(weights, task, vocab_size, len(labels), architecture)
    return ModelDirInfo(
        path=directory,
        name=_name(directory),
        task=task,
        format=fmt,
        architecture=architecture,
        model_type=str(config.get("model_type") or ""),
        labels=labels,
        dimensions=dimensions,
        max_tokens=_max_tokens(directory, config),
        tokenizer=tokenizer,
        weights=weights,
        files=files,
        pooling=pooling,
        bio=task == "token_spans" and any(label[:2] in ("B-", "I-") for label in labels),
        revision=snapshot_commit(directory),
    )


def _weights(directory: Path) -> tuple[Format, Path]:
    if (directory / "model.onnx").is_file():
        return "onnx", directory / "model.onnx"
    for name in WEIGHT_FILES:
        if (directory / name).is_file():
            return "hf", directory / name
    raise ModelDirError(directory, f"missing weights: none of {', '.join(('model.onnx', *WEIGHT_FILES))}")


def _architecture(config: dict[str, Any], directory: Path) -> str:
    names = config.get("architectures") or []
    if not isinstance(names, list) or not names or not isinstance(names[0], str):
        raise ModelDirError(directory / "config.json", "no `architectures` entry: which head is this?")
    return names[0]


def _task(architecture: str, directory: Path) -> Task:
    if architecture.endswith("ForSequenceClassification"):
        return "label_probabilities"
    if architecture.endswith("ForTokenClassification"):
        return "token_spans"
    if architecture.endswith("Model") or (directory / "modules.json").is_file():
        return "embeddings"
    raise ModelDirError(
        directory / "config.json",
        f"architecture {architecture} is not served: expected *ForSequenceClassification, "
        "*ForTokenClassification or a sentence encoder (*Model)",
    )


def _labels(config: dict[str, Any], directory: Path) -> list[str]:
    raw = config.get("id2label")
    if raw is None and "label2id" not in config:
        # transformers leaves its default out of config.json: num_labels (2 unless set) labels
        # named LABEL_i, as transformers itself loads them; the head's width is checked later.
        num = config.get("num_labels", 2)
        raw = {str(i): f"LABEL_{i}" for i in range(num)} if isinstance(num, int) and num > 0 else None
    if not isinstance(raw, dict) or not raw:
        raise ModelDirError(directory / "config.json", "no id2label: the labels must be in the config")
    try:
        by_id = {int(k): str(v) for k, v in raw.items()}
    except (TypeError, ValueError):
        raise ModelDirError(directory / "config.json", "id2label keys must be integers") from None
    if sorted(by_id) != list(range(len(by_id))):
        raise ModelDirError(directory / "config.json", f"id2label ids must be 0..{len(by_id) - 1}")
    labels = [by_id[i] for i in range(len(by_id))]
    if len(set(labels)) != len(labels):
        raise ModelDirError(directory / "config.json", "id2label repeats a label")
    num = config.get("num_labels")
    if isinstance(num, int) and num != len(labels):
        raise ModelDirError(
            directory / "config.json", f"num_labels is {num} but id2label has {len(labels)} labels"
        )
    label2id = config.get("label2id")
    if (
        isinstance(label2id, dict)
        and label2id
        and {str(k): v for k, v in label2id.items()} != {label: i for i, label in enumerate(labels)}
    ):
        raise ModelDirError(directory / "config.json", "label2id does not mirror id2label")
    return labels


def _int(config: dict[str, Any], key: str, directory: Path, fallback: tuple[str, ...] = ()) -> int:
    for name in (key, *fallback):
        value = config.get(name)
        if isinstance(value, int) and value > 0:
            return value
    raise ModelDirError(directory / "config.json", f"no positive integer {key}")


def _tokenizer(directory: Path, vocab_size: int) -> Path:
    path = directory / "tokenizer.json"
    if not path.is_file():
        hint = (
            " (only vocab.txt: save a fast tokenizer, tokenizer.save_pretrained)"
            if (directory / "vocab.txt").is_file()
            else ""
        )
        raise ModelDirError(directory, f"missing tokenizer.json{hint}")
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # the binding raises its own exception type for a damaged file
        raise ModelDirError(path, f"not a tokenizer: {exc}") from None
    size = tok.get_vocab_size(with_added_tokens=True)
    if size > vocab_size:
        raise ModelDirError(
            path,
            f"tokenizer has {size} tokens but the model's embeddings have {vocab_size} rows "
            "(config.json vocab_size): this tokenizer is not the model's",
        )
    return path


def _pooling(directory: Path, dimensions: int) -> tuple[Pooling, list[Path]]:
    config_path = directory / "1_Pooling" / "config.json"
    if not (directory / "modules.json").is_file():
        return "mean", []
    modules = json.loads((directory / "modules.json").read_text())
    pooling_dirs = [m.get("path") for m in modules if str(m.get("type", "")).endswith("Pooling")]
    if pooling_dirs and pooling_dirs[0]:
        config_path = directory / str(pooling_dirs[0]) / "config.json"
    if not config_path.is_file():
        return "mean", [directory / "modules.json"]
    config = _json(config_path, directory)
    width = config.get("word_embedding_dimension")
    if isinstance(width, int) and width != dimensions:
        raise ModelDirError(
            config_path, f"word_embedding_dimension {width} but the encoder's hidden_size is {dimensions}"
        )
    modes = [mode for mode, key in POOLING_KEYS.items() if config.get(key)]
    if len(modes) != 1:
        raise ModelDirError(
            config_path, f"one pooling mode (cls, max or mean tokens) expected, got {modes or 'none'}"
        )
    return modes[0], [directory / "modules.json", config_path]


def _max_tokens(directory: Path, config: dict[str, Any]) -> int:
    limits = [MAX_TOKENS]
    positions = config.get("max_position_embeddings")
    if isinstance(positions, int) and positions > 0:
        # RoBERTa-style models reserve padding_idx + 1 positions before the first token.
        offset = 2 if config.get("model_type") in ("roberta", "xlm-roberta", "camembert") else 0
        limits.append(positions - offset)
    for name, key in (
        ("tokenizer_config.json", "model_max_length"),
        ("sentence_bert_config.json", "max_seq_length"),
    ):
        path = directory / name
        if path.is_file():
            value = json.loads(path.read_text()).get(key)
            if isinstance(value, int) and 8 <= value < 1_000_000:
                limits.append(value)
    return min(limits)


def _check_safetensors(path: Path, task: Task, vocab_size: int, labels: int, architecture: str) -> None:
    """The weights' shapes against the config, from the file's JSON header only."""
    try:
        with path.open("rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            if size > HEADER_LIMIT:
                raise ValueError(f"header of {size} bytes")
            header = json.loads(fh.read(size))
    except (OSError, struct.error, ValueError) as exc:
        raise ModelDirError(path, f"not a safetensors file: {exc}") from None
    shapes = {name: meta.get("shape") for name, meta in header.items() if isinstance(meta, dict)}
    embeddings = [
        s for name, s in shapes.items() if name.endswith(("word_embeddings.weight", "tok_embeddings.weight"))
    ]
    if embeddings and embeddings[0] and embeddings[0][0] != vocab_size:
        raise ModelDirError(
            path, f"word embeddings have {embeddings[0][0]} rows but config.json says vocab_size {vocab_size}"
        )
    if task == "embeddings":
        return
    heads = [shapes[name] for name in HEAD_WEIGHTS if name in shapes]
    if not heads:
        raise ModelDirError(
            path,
            f"no classification head ({' or '.join(HEAD_WEIGHTS)}): these weights are not a {architecture}",
        )
    if heads[0] and heads[0][0] != labels:
        raise ModelDirError(
            path, f"the classification head has {heads[0][0]} outputs but id2label has {labels} labels"
        )
