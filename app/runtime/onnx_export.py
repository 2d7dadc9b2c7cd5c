"""A Hugging Face model directory as an ONNX one (docs/model-runtime.md, "Your own models"):
the network traced in fp32, then quantized to dynamic int8 per channel by the build the
built-in encoder uses (app/runtime/quantize.py), beside copies of the files the runtime reads
(config.json, the tokenizer, the sentence-transformers pooling). The result is a directory
of its own that the onnxruntime engine loads (`svc-srun train` writes one under `onnx/`).
"""

from __future__ import annotations

import inspect
import shutil
import tempfile
import warnings
from pathlib import Path

from app.runtime.dir_runners import auto_class
from app.runtime.model_dir import inspect_model_dir

INPUTS = ["input_ids", "attention_mask", "token_type_ids"]
COPIED = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "special_tokens_map.json",
    "modules.json",
    "sentence_bert_config.json",
)


def export_onnx(source: Path, target: Path) -> Path:
    """Write `source` (a Hugging Face directory) as an int8 ONNX directory at `target`."""
    from app.runtime.native import _import_torch
    from app.runtime.quantize import build_dynamic_int8

    info = inspect_model_dir(source)
    _import_torch()  # the process settings torch must see first
    import torch

    model = auto_class(info.task).from_pretrained(
        str(info.path), local_files_only=True, attn_implementation="eager"
    )
    # Called by name: positional order differs by architecture, and some take no token_type_ids.
    names = [n for n in INPUTS if n in inspect.signature(model.forward).parameters]
    task = info.task

    class ByName(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
            out = self.model(**dict(zip(names, tensors, strict=True)))
            return out.last_hidden_state if task == "embeddings" else out.logits

    ids = torch.ones((1, 16), dtype=torch.long)
    feeds = tuple(torch.zeros_like(ids) if n == "token_type_ids" else ids for n in names)
    output = "last_hidden_state" if info.task == "embeddings" else "logits"
    per_token = {0: "batch", 1: "tokens"}
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target, prefix=".export-") as work:
        fp32 = Path(work) / "fp32.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notes
            torch.onnx.export(
                ByName().eval(),
                feeds,
                str(fp32),
                input_names=names,
                output_names=[output],
                dynamic_axes={
                    **dict.fromkeys(names, per_token),
                    output: {0: "batch"} if info.task in ("label_probabilities", "rerank") else per_token,
                },
                opset_version=17,
                dynamo=False,
            )
        build_dynamic_int8(fp32, target / "model.onnx")
    for name in COPIED:
        if (info.path / name).is_file():
            shutil.copy(info.path / name, target / name)
    if info.pooling is not None and (info.path / "1_Pooling").is_dir():
        shutil.copytree(info.path / "1_Pooling", target / "1_Pooling", dirs_exist_ok=True)
    return target
