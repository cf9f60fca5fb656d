#!/usr/bin/env bash
# The runs of the pre-registered rule for `optimize`'s default contract (docs/results/tuning_log.md), then the
# cross-scoring that applies it. Each run from an empty cache (one per run directory), one thread per process;
# JOBS workers (default 1) take the runs from opposite ends of the list, so JOBS=2 keeps two cores busy. A run
# whose directory exists is left alone (started or finished by another worker or an earlier start): resumable by
# starting the script again once the interrupted run's directory is removed.
# Usage: [JOBS=2] bash benchmarks/contract_default.sh [RUNS_DIR]   (default runs/contract-default)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-runs/contract-default}
export PROMPTTUNE_DATA_DIR=${PROMPTTUNE_DATA_DIR:-../shared/data} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
PY=${PYTHON:-python}
RUN_LIST=()
for task in agnews sst2 trec; do
  for seed in 60 61 62; do
    for serve in logprobs choice; do RUN_LIST+=("$task $seed $serve"); done
  done
done

worker() {  # $1: forward or reverse
  local order=("${RUN_LIST[@]}")
  if [ "$1" = reverse ]; then mapfile -t order < <(printf '%s\n' "${RUN_LIST[@]}" | tac); fi
  for run in "${order[@]}"; do
    read -r task seed serve <<<"$run"
    mkdir "$RUNS/$task-$seed-$serve" 2>/dev/null || continue  # atomic: one worker claims each run
    echo "== $task split seed $seed serve $serve $(date -u +%FT%TZ)"
    "$PY" -m prompttune optimize --task "$task" --pool tuning --budget 2000 --dev-size 300 --test-size 1000 \
      --seed "$seed" --split-seed "$seed" --serve "$serve" --runs-dir "$RUNS/$task-$seed-$serve"
  done
}

mkdir -p "$RUNS"
pids=()
worker forward > "$RUNS/worker-forward.log" 2>&1 & pids+=($!)
if [ "${JOBS:-1}" -ge 2 ]; then worker reverse > "$RUNS/worker-reverse.log" 2>&1 & pids+=($!); fi
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
tail -n 3 "$RUNS"/worker-*.log
if [ "$status" -ne 0 ]; then echo "a run failed (its worker's log above); nothing cross-scored" >&2; exit 1; fi
"$PY" benchmarks/contract_default.py --jobs "${JOBS:-1}" "$RUNS"/*/2*/
