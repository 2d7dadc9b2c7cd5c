"""Measure the `language` signal's detector (app/models/language.py): accuracy on the prompts
written for tests/unit/pipeline/test_semantic_signals.py plus the short ones below, with the label
space svc-sr uses (common languages) against the model's full 130 classes, and p50/p99 per
prompt. Run: .venv/bin/python scripts/eval_language.py (docs/model-cards/language.md)."""

from __future__ import annotations

import statistics
import time

from app.models.language import LanguageDetector, _model
from tests.unit.pipeline.test_semantic_signals import SENTENCES

SHORT = {
    "en": [
        "Tell me a joke",
        "Summarize this article",
        "How do I fix a flat tire?",
        "Explain quantum entanglement simply.",
        "hi",
    ],
    "fr": ["merci beaucoup", "Quelle heure est-il ?"],
    "de": ["Wie spät ist es?", "Guten Morgen, wie geht's?", "danke"],
    "es": ["Necesito ayuda", "¿Dónde está la estación?"],
    "tr": ["Bugün hava nasıl olacak?"],
    "pl": ["Jak działa silnik spalinowy?"],
    "sv": ["Hur lagar man köttbullar?"],
}


def main() -> None:
    common = LanguageDetector()
    full = _model()
    for label, cases in (("sentences", SENTENCES), ("short (1-6 words)", SHORT)):
        pairs = [(code, text) for code, texts in cases.items() for text in texts]
        ours = sum(common.detect(text)[0] == code for code, text in pairs)
        every = sum(full.classify(text)[0] == code for code, text in pairs)
        print(f"{label}: {len(pairs)} prompts, {len(cases)} languages")
        print(f"  common label space ({len(common.languages)}): {ours / len(pairs):.3f}")
        print(f"  full model ({len(set(full.nb_classes))} classes): {every / len(pairs):.3f}")
    texts = [text for texts in SENTENCES.values() for text in texts] * 20
    times = []
    for text in texts:
        began = time.perf_counter()
        common.detect(text)
        times.append((time.perf_counter() - began) * 1000)
    times.sort()
    print(
        f"latency per prompt: p50 {statistics.median(times):.3f} ms, p99 {times[int(len(times) * 0.99)]:.3f} ms"
    )


if __name__ == "__main__":
    main()
