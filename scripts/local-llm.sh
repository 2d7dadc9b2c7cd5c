#!/usr/bin/env bash
# Local demo LLM (gemma-3-270m Q4_K_M on node-llama-cpp's prebuilt llama.cpp; docs/local-llm.md).
#
# usage: scripts/local-llm.sh install|start|stop|status|restart [--timeout SECONDS]
#   install  the engine (npm registry, cached under .cache/demo-llm/<key>/); nothing compiles
#   start    assemble .cache/models/gemma-3-270m-q4_k_m.gguf once, start the server in the background
#            (pid + log under .cache/run/), wait until it has answered a real completion; a running
#            server is proven again
#   stop     SIGTERM, SIGKILL after 10 s
#   status   exit 0 when serving, 3 when not running
# env: SVC_SR_LLM_PORT (18082), SVC_SR_LLM_HOST (127.0.0.1), SVC_SR_LLM_THREADS (CPUs-1, min 1), SVC_SR_LLM_CTX (2048),
#      SVC_SR_CACHE_DIR (<repo>/.cache), SVC_SR_PYTHON (<repo>/.venv/bin/python), SVC_SR_NODE (node on PATH)
# The logic lives in app/local_llm/.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${SVC_SR_PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || { echo "local-llm: error: no python at $PY (create the venv, or set SVC_SR_PYTHON)" >&2; exit 1; }
# PYTHONPATH lets this work from a checkout that is not pip-installed (app/local_llm is stdlib-only).
cd "$ROOT"
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m app.local_llm "$@"
