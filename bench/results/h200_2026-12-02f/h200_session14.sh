#!/usr/bin/env bash
# What the H200 has left to measure after session 13 (bench/results/h200_2026-12-02e), one device call per step,
# in priority order (30 device minutes a session; each step about 9-10 min, carry .whl):
#
#   OUT=$OUT bash bench/results/h200_2026-12-02f/h200_session14.sh matrix   # issue 15: BERT rows and launch_bound training timed side by side
#   OUT=$OUT bash bench/results/h200_2026-12-02f/h200_session14.sh ct       # issue 9: Wukong's cold first calls, repeated (the one model where
#                                                  #   eqsat's single cold compile was not below the built-in passes')
#   OUT=$OUT bash bench/results/h200_2026-12-02f/h200_session14.sh lb512    # issue 12: 512-branch training step, built-in passes against ours
#   OUT=$OUT bash bench/results/h200_2026-12-02f/h200_session14.sh gemm     # issue 15: GEMM sweep with the weight-gradient shapes, refit;
#                                                  #   DLRM training greedy against eqsat with the refit GEMM prices
#
# The device tool returns at most 8 files a call: each step writes fewer.
set -u
step=${1:?usage: h200_session14.sh matrix|ct|lb512|gemm}
OUT=${OUT:-$PWD/h200_out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/bridge:$PWD/bench PYTHONUNBUFFERED=1
S7=inductor,inductor-cudagraphs,inductor-optimus,greedy,eqsat,greedy-cudagraphs,eqsat-cudagraphs
case "$step" in
  matrix)  # about 520 s
    JOBS=8 STRATS=$S7 bash bench/results/h200_2026-12-03c/h200_matrix_1gpu.sh "bert launch_bound" ;;
  ct)      # 2 rows x 4 strategies x 3 fresh processes, about 20-30 s each
    timeout -s INT 560 python3 bench/compile_time.py --device cuda --size gpu --models wukong --modes inference train \
      --strategies inductor,inductor-optimus,greedy,eqsat --reps 3 --time-budget 500 --out /tmp/ct >"$OUT/ct.log" 2>&1
    cp /tmp/ct/compile_time.md /tmp/ct/compile_time.json "$OUT/" ;;
  lb512)   # the built-in passes' cold compile at 512 branches is the long pole (inference alone 118 s on 2026-12-01)
    TAG=lb512_train JOBS=3 PREWARM_LIMIT=400 BUDGET=100 ITERS=10 STRATS=inductor-optimus,greedy,eqsat \
      EXTRA="--modes train --set launch_bound.branches=512 --set launch_bound.batch=256" \
      bash bench/results/h200_2026-12-03c/h200_matrix_1gpu.sh launch_bound ;;
  gemm)
    timeout -s INT 120 python3 bench/gemm_rate.py --out /tmp/gemm >"$OUT/gemm.log" 2>&1
    timeout -s INT 240 python3 bench/gemm_rate.py --refit /tmp/gemm/gemm_rate.json \
      bench/results/h200_2026-12-02c/gemm_accuracy.json --out /tmp/gemm/refit.json >>"$OUT/gemm.log" 2>&1
    cp /tmp/gemm/gemm_rate.json /tmp/gemm/refit.json "$OUT/"
    TAG=dlrm_train JOBS=4 PREWARM_LIMIT=120 BUDGET=120 STRATS=greedy,eqsat,greedy-cudagraphs,eqsat-cudagraphs \
      EXTRA="--modes train" bash bench/results/h200_2026-12-03c/h200_matrix_1gpu.sh dlrm ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
