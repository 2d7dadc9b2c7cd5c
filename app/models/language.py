"""Language identification of a user's text: py3langid (langid.py's naive Bayes over byte
n-grams, its model shipped in the wheel; 0.1-0.2 ms a prompt on one core).

The label space is the common languages below plus every language a config's rules name: the
full model's 130 classes include rare neighbours (Occitan, Walloon, ...) that steal short
European prompts from their big siblings. Probabilities are normalised over that space. Texts
of one or two words are often wrong with a low probability, which the rules' threshold
(default 0.5) turns into no match. docs/model-cards/language.md has the measured figures.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

# The most used languages of the web and of chat traffic (ISO 639-1).
COMMON_LANGUAGES: tuple[str, ...] = tuple(
    [
        "en",
        "zh",
        "es",
        "hi",
        "ar",
        "pt",
        "bn",
        "ru",
        "ja",
        "de",
        "fr",
        "ko",
        "it",
        "tr",
        "vi",
        "pl",
        "uk",
        "nl",
        "fa",
        "id",
        "th",
        "sv",
        "cs",
        "el",
        "he",
        "ro",
        "hu",
        "da",
        "fi",
        "no",
        "ms",
        "ta",
        "ur",
        "sk",
        "bg",
        "hr",
        "sr",
        "ca",
    ]
)
MAX_CHARS = 2000  # the prefix read: a language shows in a few sentences; long inputs cost linear time


@lru_cache(maxsize=1)
def _model() -> Any:
    from py3langid import langid

    return langid.LanguageIdentifier.from_modelpath(langid.MODEL_DIR / langid.MODEL_FILE, norm_probs=True)


def supported_languages() -> frozenset[str]:
    """Every code the model knows (py3langid keeps its unrestricted classes in `_full_model`)."""
    return frozenset(_model()._full_model[2])


class LanguageDetector:
    """`detect(text) -> (code, probability)` over COMMON_LANGUAGES plus `extra` codes."""

    def __init__(self, extra: Iterable[str] = ()) -> None:
        known = supported_languages()
        self.languages = tuple(sorted({*COMMON_LANGUAGES, *extra} & known))
        # A shallow copy shares the model's arrays; set_languages rebinds the copy's own slices.
        self._model = copy.copy(_model())
        self._model.set_languages(self.languages)

    def detect(self, text: str) -> tuple[str, float]:
        sample = text.strip()[:MAX_CHARS]
        if not sample:
            return "und", 0.0
        code, probability = self._model.classify(sample)
        return str(code), float(probability)


# The languages the guards' and the domain classifier's heads were trained on (every packaged
# guard source and every domain row is English), and how sure the model must be that a text is
# in another before the heads are said not to read it: English questions made of words shared
# with French score up to ~0.7 French (the model card), so 0.9, fixed before any guard figure
# was measured with it.
ENGLISH_HEAD_LANGUAGES = frozenset({"en"})
UNREAD_CONFIDENCE = 0.9


@lru_cache(maxsize=1)
def _english_detector() -> LanguageDetector:
    return LanguageDetector()


def read_by_english_heads(text: str) -> bool:
    """False when `text` is, with confidence, in a language the English heads were not trained
    on: a guard rule's `cascade_band_unread` then applies (app/pipeline/signals/guarded.py), and
    the domain classifier asks its multilingual head (app/models/domain.py)."""
    # The memo is keyed on the prefix the detector reads, never on a whole (up to 4 MiB) body.
    return _read_by_english_heads(text.strip()[:MAX_CHARS])


@lru_cache(maxsize=512)  # the guards and the domain classifier ask about the same prompt
def _read_by_english_heads(sample: str) -> bool:
    code, probability = _english_detector().detect(sample)
    return code in ENGLISH_HEAD_LANGUAGES or probability < UNREAD_CONFIDENCE
