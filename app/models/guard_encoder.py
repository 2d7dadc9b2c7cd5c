"""The guard encoder: MiniLM fine-tuned whole on benign / jailbreak / harmful prompts
(docs/model-cards/guard-encoder.md), int8 ONNX on CPU. It judges only the prompts whose cheap
guard scores fall in the prompt guard's uncertain band (docs/security.md, "The cascade"), so an
ordinary prompt far from the band never pays its encoder pass.

Its attack score is the probability of any label but `benign`; `cut` (chosen on the tuning
split, kept beside the weights in `guard_cut.json`) turns it into a verdict. `clear` is the cut
for a text the heads already block (a score in the band above the head's threshold): the encoder
lifts that block only when its score falls below `clear` (equal to `cut` when the file names
none), so it can undo a head's false block without having to be as sure as when it adds one.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

ARTIFACT = Path(__file__).parent / "artifacts" / "guard_encoder"
CUT_FILE = "guard_cut.json"
BENIGN = "benign"
DEFAULT_CUT = 0.5
# A text is read up to 256 tokens: the guard already judges a long part in windows of 254
# MiniLM tokens (docs/security.md, "What each guard reads"), this model's own vocabulary.
OPTIONS = {"overflow": "truncate", "max_tokens": 256}


class GuardEncoder:
    """A loaded guard encoder: `attack_score` per text, `cut` its verdict threshold."""

    def __init__(self, model: Any, cut: float, clear: float | None = None) -> None:
        self.model = model  # app/runtime/dir_models.py DirLabelModel (onnxruntime)
        self.cut = cut
        self.clear = cut if clear is None else clear

    @classmethod
    def load(cls, directory: Path = ARTIFACT) -> GuardEncoder:
        from app.runtime.dir_models import load_model_dir

        model = load_model_dir(str(directory), engine="onnxruntime")
        cut_file = directory / CUT_FILE
        cuts = json.loads(cut_file.read_text()) if cut_file.is_file() else {}
        clear = cuts.get("clear")
        return cls(model, float(cuts.get("cut", DEFAULT_CUT)), None if clear is None else float(clear))

    def attack_scores(self, texts: list[str]) -> list[float]:
        """1 - P(benign) per text."""
        result = self.model.classify(texts, OPTIONS)
        return [attack_score(item.probabilities or {}) for item in result.results]

    def attack_score(self, text: str) -> float:
        return self.attack_scores([text])[0]


def attack_score(probabilities: dict[str, float]) -> float:
    """The probability that a text is any kind of attack: every label but `benign`."""
    return min(1.0, max(0.0, 1.0 - float(probabilities.get(BENIGN, 1.0))))


@cache
def shared_encoder(directory: Path = ARTIFACT) -> GuardEncoder:
    """One loaded encoder per process and directory (a config reload does not load it again)."""
    return GuardEncoder.load(directory)
