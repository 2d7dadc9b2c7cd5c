"""Tiny random BERT model directories in the Hugging Face layouts svc-srun loads: built on the
spot, nothing downloaded (docs/model-runtime.md, "Your own models").

Each writer saves a random-initialised 2-layer BERT (hidden 32 by default) with
`save_pretrained` (config.json + model.safetensors) and a WordPiece `tokenizer.json` it builds
itself from a small vocabulary: common English words, single characters and `##` pieces (so
no word is [UNK]) and the specials [PAD] [UNK] [CLS] [SEP] [MASK]. The weights are seeded:
the same call writes the same bytes. Their answers are random by design; tests check the
path, the shapes and the labels, not the judgement.

- `write_tiny_sequence_classifier(dir, labels)`: BertForSequenceClassification, id2label in order.
- `write_tiny_token_classifier(dir, labels, bio=True)`: BertForTokenClassification; `labels`
  are entity types: with `bio` id2label is O, B-X, I-X per type (BIO tags), without it O and
  the types themselves (plain labels).
- `write_tiny_sentence_encoder(dir, dim)`: BertModel in the sentence-transformers layout
  (modules.json, 1_Pooling/config.json with mean pooling, 2_Normalize).
- `write_tiny_cross_encoder(dir)`: BertForSequenceClassification with one label, as
  sentence-transformers saves a CrossEncoder (rerank).

    python tests/fakes/tiny_models.py sequence|token|encoder|cross-encoder OUT_DIR [LABEL...]
"""

from __future__ import annotations

import json
import string
import sys
from pathlib import Path
from typing import Any

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS_TEXT = """the a an and or but if of to in on at by for with from as is are was were be been
it this that these those i you he she we they me my your our their his her its what which who
how why when where can could would should will do does did have has had not no yes please
help tell me about write code python function bug error fix test compute derivative integral
math equation number physics energy force chemistry acid biology cell law court contract
history war economics market price business health doctor medicine computer science model
data learning network email phone address name card credit bank account send call mail
weather rain sun food cook recipe travel trip hotel flight book movie music game sport
good bad great thanks hello world question answer explain summary story poem"""
WORDS = WORDS_TEXT.split()
EXTRA_CHARS = string.ascii_lowercase + string.digits + string.punctuation


def vocabulary() -> list[str]:
    pieces = [c for c in EXTRA_CHARS] + [f"##{c}" for c in string.ascii_lowercase + string.digits]
    seen: dict[str, None] = dict.fromkeys([*SPECIALS, *WORDS, *pieces])
    return list(seen)


def write_tokenizer(directory: Path, vocab: list[str] | None = None) -> list[str]:
    """A BERT-style WordPiece tokenizer.json (lower-cased, [CLS] ... [SEP]); returns its vocabulary."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    vocab = vocab or vocabulary()
    ids = {token: i for i, token in enumerate(vocab)}
    tok = Tokenizer(WordPiece(ids, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    tok.decoder = decoders.WordPiece(prefix="##")
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "BertTokenizerFast",
                "do_lower_case": True,
                "model_max_length": 128,
                **{
                    k: v
                    for k, v in zip(
                        ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token"),
                        SPECIALS,
                        strict=True,
                    )
                },
            },
            indent=2,
        )
    )
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return vocab


def _config(vocab_size: int, hidden: int, labels: list[str] | None = None) -> Any:
    from transformers import BertConfig

    extra: dict[str, Any] = {}
    if labels is not None:
        extra = {
            "id2label": dict(enumerate(labels)),
            "label2id": {label: i for i, label in enumerate(labels)},
        }
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=hidden * 2,
        max_position_embeddings=128,
        **extra,
    )


def _save(model_class: Any, config: Any, directory: Path, seed: int) -> None:
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
    model.save_pretrained(str(directory), safe_serialization=True)


def write_tiny_sequence_classifier(directory: Path, labels: list[str], seed: int = 0) -> Path:
    """A sequence classifier over `labels` (id2label in the given order)."""
    from transformers import BertForSequenceClassification

    directory = Path(directory)
    vocab = write_tokenizer(directory)
    _save(BertForSequenceClassification, _config(len(vocab), 32, list(labels)), directory, seed)
    return directory


def write_tiny_cross_encoder(directory: Path, seed: int = 0) -> Path:
    """A cross-encoder in the sentence-transformers CrossEncoder layout: a sequence classifier
    with one label (LABEL_0, one relevance logit over a query/passage pair) and the config's
    `sentence_transformers` entry naming its sigmoid activation."""
    from transformers import BertForSequenceClassification

    directory = Path(directory)
    vocab = write_tokenizer(directory)
    config = _config(len(vocab), 32, ["LABEL_0"])
    config.sentence_transformers = {"activation_fn": "torch.nn.modules.activation.Sigmoid"}
    _save(BertForSequenceClassification, config, directory, seed)
    return directory


def bio_labels(types: list[str]) -> list[str]:
    return ["O", *(f"{prefix}-{t}" for t in types for prefix in ("B", "I"))]


def write_tiny_token_classifier(directory: Path, labels: list[str], bio: bool = True, seed: int = 0) -> Path:
    """A token classifier for the entity types `labels`: BIO tags (O, B-X, I-X) with `bio`,
    else O plus the types as plain labels."""
    from transformers import BertForTokenClassification

    directory = Path(directory)
    vocab = write_tokenizer(directory)
    tags = bio_labels(list(labels)) if bio else ["O", *labels]
    _save(BertForTokenClassification, _config(len(vocab), 32, tags), directory, seed)
    return directory


def write_tiny_sentence_encoder(directory: Path, dim: int = 32, seed: int = 0) -> Path:
    """A sentence encoder of width `dim` in the sentence-transformers layout (mean pooling,
    normalised)."""
    from transformers import BertModel

    directory = Path(directory)
    vocab = write_tokenizer(directory)
    _save(BertModel, _config(len(vocab), dim), directory, seed)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (directory / "modules.json").write_text(json.dumps(modules, indent=2))
    (directory / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": 128, "do_lower_case": False})
    )
    (directory / "1_Pooling").mkdir(exist_ok=True)
    (directory / "1_Pooling" / "config.json").write_text(
        json.dumps(
            {
                "word_embedding_dimension": dim,
                "pooling_mode_cls_token": False,
                "pooling_mode_mean_tokens": True,
                "pooling_mode_max_tokens": False,
                "pooling_mode_mean_sqrt_len_tokens": False,
            },
            indent=2,
        )
    )
    (directory / "2_Normalize").mkdir(exist_ok=True)
    return directory


WRITERS = {
    "sequence": lambda d, rest: write_tiny_sequence_classifier(d, rest or ["positive", "negative"]),
    "token": lambda d, rest: write_tiny_token_classifier(d, rest or ["EMAIL", "PERSON"]),
    "encoder": lambda d, rest: write_tiny_sentence_encoder(d, int(rest[0]) if rest else 32),
    "cross-encoder": lambda d, rest: write_tiny_cross_encoder(d),
}

if __name__ == "__main__":
    print(WRITERS[sys.argv[1]](Path(sys.argv[2]), sys.argv[3:]))
