#!/usr/bin/env bash
# The H200 matrix as run for bench/results/: two device calls on a 2-GPU machine (nvidia-h200-x2),
# each running two `optimus-eq bench` processes side by side, one per GPU, under a hard time limit.
#
#   bench/results/h200_matrix_2026-11-29/h200_matrix.sh 1     # calibrate the cost model; inference on GPU 0 || recsys training on GPU 1
#   bench/results/h200_matrix_2026-11-29/h200_matrix.sh 3     # re-runs (see part 3)
#   bench/results/h200_matrix_2026-11-29/h200_matrix.sh 2     # training: launch_bound, bert, resnext50 on GPU 0 || the CNNs' inference,
#                              # then inception_v3 training, on GPU 1
#
# Results land under $OUT (the device tool's output folder; default ./h200_out). Merge them here with
#   optimus-eq bench --merge OUT1/inf OUT1/train_a OUT2/train_b OUT2/inf_b OUT2/train_c --out bench/results/h200_DATE
# Part 2 reuses part 1's calibration if $CAL names it (else the built-in constants are used).
set -u
part=${1:?usage: h200_matrix.sh 1|2}
OUT=${OUT:-$PWD/h200_out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then  # the device machine has no egglog: install the carried wheels
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/bridge:$PWD/bench PYTHONUNBUFFERED=1
export TORCHINDUCTOR_COMPILE_THREADS=12  # two processes share the CPU cores
STRATS=eager,inductor,inductor-cudagraphs,inductor-optimus,greedy,eqsat,eqsat-cudagraphs,taso,tensat
LIMIT=${LIMIT:-560}    # hard stop per process (s); results.json is rewritten after every cell
BUDGET=${BUDGET:-430}  # no new cell after this (s)
bench() {  # bench GPU NAME ARGS...: one bench process on one GPU, in the background
  local gpu=$1 name=$2; shift 2
  # each process on its own half of the physical cores, hyperthread siblings included: one's compile
  # bursts must not slow the other's timed launches (part 3 split logical CPUs 0-15 / 16-31, which on a
  # host whose siblings are i and i+16 shares every physical core, and its times stayed noisy)
  local ncores cores
  ncores=$(lscpu -p=CORE | grep -v '^#' | sort -un | wc -l)
  cores=$(lscpu -p=CPU,CORE | grep -v '^#' | awk -F, -v g="$gpu" -v n="$ncores" \
          '(g == 0 && $2 < n / 2) || (g == 1 && $2 >= n / 2) {printf "%s%s", sep, $1; sep = ","}')
  CUDA_VISIBLE_DEVICES=$gpu timeout -s INT "$LIMIT" taskset -c "$cores" python3 -m optimus_eq.cli bench --device cuda \
    --strategies $STRATS --iters 50 --no-plots --no-progress --out "/tmp/$name" "$@" >"$OUT/$name.log" 2>&1
  cp "/tmp/$name/results.json" "$OUT/$name.json" 2>/dev/null
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$OUT/gpu.txt"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >>"$OUT/gpu.txt"
case $part in
  1)
    CUDA_VISIBLE_DEVICES=0 python3 -m optimus_eq.cli calibrate --device cuda --out "$OUT/calibration.json" \
      >"$OUT/calibrate.log" 2>&1
    CAL=$OUT/calibration.json
    bench 0 inf --modes inference --cost-model "$CAL" --time-budget "$BUDGET" &
    bench 1 train_a --modes train --models dhen wukong interformer dlrm --cost-model "$CAL" \
      --time-budget "$BUDGET" &
    wait
    ;;
  2)
    CALARG=(); [ -n "${CAL:-}" ] && CALARG=(--cost-model "$CAL")
    bench 0 train_b --modes train --models launch_bound bert resnext50 "${CALARG[@]}" --time-budget "$BUDGET" &
    (LIMIT=250 bench 1 inf_b --modes inference --models resnext50 inception_v3 "${CALARG[@]}" --time-budget 200
     LIMIT=$((LIMIT - 250)) bench 1 train_c --modes train --models inception_v3 "${CALARG[@]}" \
       --time-budget $((BUDGET - 250))) &
    wait
    ;;
  3)  # parts 1-2 ran without core pinning (timings of concurrent cells were noisy) and before the
      # CNN comparison fixes (TF32 off for the compared call, Inception's dropout off): re-run those
    CALARG=(); [ -n "${CAL:-}" ] && CALARG=(--cost-model "$CAL")
    bench 0 inf_c --modes inference --models dhen wukong interformer dlrm launch_bound bert "${CALARG[@]}" \
      --time-budget "$BUDGET" &
    (LIMIT=260 bench 1 train_d --modes train --models resnext50 "${CALARG[@]}" --time-budget 200
     LIMIT=$((LIMIT - 260)) STRATS=eager,inductor-optimus,greedy,eqsat bench 1 train_e --modes train \
       --models inception_v3 "${CALARG[@]}" --time-budget $((BUDGET - 260))) &
    wait
    ;;
esac
ls -la "$OUT"
