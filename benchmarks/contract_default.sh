#!/usr/bin/env bash
# The runs of the pre-registered rule for `optimize`'s default contract (docs/results/tuning_log.md), then the
# cross-scoring that applies it. One run at a time, each from an empty cache (one per run directory).
# Usage: bash benchmarks/contract_default.sh [RUNS_DIR]   (default runs/contract-default)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-runs/contract-default}
export PROMPTTUNE_DATA_DIR=${PROMPTTUNE_DATA_DIR:-../shared/data} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
PY=${PYTHON:-python}
for task in agnews sst2 trec; do
  for seed in 60 61 62; do
    for serve in logprobs choice; do
      echo "== $task split seed $seed serve $serve $(date -u +%FT%TZ)"
      "$PY" -m prompttune optimize --task "$task" --pool tuning --budget 2000 --dev-size 300 --test-size 1000 \
        --seed "$seed" --split-seed "$seed" --serve "$serve" --runs-dir "$RUNS/$task-$seed-$serve"
    done
  done
done
"$PY" benchmarks/contract_default.py "$RUNS"/*/2*/
