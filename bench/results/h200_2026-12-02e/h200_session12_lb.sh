#!/usr/bin/env bash
# Issue 12 on the H200, one device call of about 4-5 minutes (timeout_s 360; carry .whl as in bench/results/h200_2026-12-02d/h200_session11.sh):
#   1. 512 branches x 2 layers, batch 256: cold first call (our optimizer + packing + AOTAutograd + Inductor,
#      each cell on an empty Inductor cache) for inference and the training step, greedy and eqsat
#      (bench `compile_s`, split into `optimizer_s` and `inductor_s`); the bound is 60 s.
#   2. 128 branches x 2 layers, batch 512: kernels of one training step split into forward + loss, backward,
#      fused Adam's step (bench/lb_train_kernels.py --phase measure, names per piece); the bound is 30 for
#      forward + backward. Outputs and every gradient compared with eager in both parts.
# Part 1 runs alone (its seconds are the point); part 2's compile seconds do not matter.
#   OUT=$OUT bash bench/results/h200_2026-12-02e/h200_session12_lb.sh
set -u
OUT=${OUT:-$PWD/h200_out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/bridge:$PWD/bench PYTHONUNBUFFERED=1
start=$(date +%s)
stamp() { echo "$1 at $(( $(date +%s) - start )) s" | tee -a "$OUT/lb.log"; }

timeout -s INT ${LIMIT512:-165} python3 -m optimus_eq.cli bench --device cuda --no-plots --no-progress \
  --models launch_bound --modes inference train --strategies greedy eqsat \
  --set launch_bound.branches=512 --set launch_bound.batch=256 --iters 5 --cache cold --time-budget 120 \
  --out "$OUT/lb512" >"$OUT/lb512.log" 2>&1
stamp "512-branch cold compiles done"

TORCHINDUCTOR_CACHE_DIR=/tmp/lb128_cache timeout -s INT ${LIMIT128:-120} python3 bench/lb_train_kernels.py \
  --phase measure --device cuda --set branches=128 --set batch=512 --strategies greedy eqsat --names \
  --json "$OUT/lb128_split.json" >"$OUT/lb128_split.txt" 2>&1
stamp "128-branch kernel split done"

# the predictor's split of the same step, for the table (CPU work only, about 30 s)
timeout -s INT ${LIMITPRED:-60} python3 bench/lb_train_kernels.py --phase predict --device cuda --set branches=128 --set batch=512 \
  --strategies greedy eqsat --json "$OUT/lb128_predicted.json" >"$OUT/lb128_predicted.txt" 2>&1
stamp "prediction done"
