#!/usr/bin/env bash
# What the H200 has left to measure after session 14 (bench/results/h200_2026-12-02f), one device call per step,
# in priority order (30 device minutes a session; carry .whl):
#
#   OUT=$OUT bash bench/results/h200_2026-12-02g/h200_session15.sh bertk    # issue 15: per-kernel GPU times of BERT's training step, Inductor
#                                                  #   alone against eqsat (eqsat is 1.3% slower there: which kernels?)
#   OUT=$OUT bash bench/results/h200_2026-12-02g/h200_session15.sh bertt    # issue 15: where the GPU idles in that step (kernel time is lower)
#   OUT=$OUT bash bench/results/h200_2026-12-02g/h200_session15.sh ct       # issue 9: Wukong's cold first calls again (after the cold-start cuts)
#   OUT=$OUT bash bench/results/h200_2026-12-02g/h200_session15.sh bert     # issue 15: BERT rows, 5 side-by-side rounds, after a fix
#
# The device tool returns at most 8 files a call: each step writes fewer.
set -u
step=${1:?usage: h200_session15.sh bertk|bertt|lbcg|ct|bert}
OUT=${OUT:-$PWD/h200_out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/bridge:$PWD/bench PYTHONUNBUFFERED=1
case "$step" in
  bertk)   # about 3 min
    timeout -s INT 500 python3 bench/kernel_names.py --model bert --device cuda --modes train --iters 30 \
      --strategies inductor greedy eqsat inductor-cudagraphs eqsat-cudagraphs >"$OUT/bert_train_kernels.txt" 2>&1 ;;
  bertt)   # about 3 min: where the GPU idles in BERT's training step, and the strategies side by side in one process
    timeout -s INT 500 python3 bench/kernel_names.py --model bert --device cuda --modes train --iters 30 --timeline \
      --rounds 5 --strategies ${STRATS:-inductor eqsat eqsat-nopack inductor-cudagraphs eqsat-cudagraphs} \
      >"$OUT/bert_train_timeline.txt" 2>&1 ;;
  ct)      # 2 rows x 4 strategies x 3 fresh processes
    timeout -s INT 560 python3 bench/compile_time.py --device cuda --size gpu --models wukong --modes inference train \
      --strategies inductor,inductor-optimus,greedy,eqsat --reps 3 --time-budget 500 --out /tmp/ct >"$OUT/ct.log" 2>&1
    cp /tmp/ct/compile_time.md /tmp/ct/compile_time.json "$OUT/" ;;
  lbcg)    # about 90 s: 128 branches x 2 layers, training step under CUDA graphs side by side (stacks with gradients unpacked there)
    timeout -s INT 400 python3 bench/kernel_names.py --model launch_bound --device cuda --modes train --iters 30 \
      --rounds 5 --strategies inductor-cudagraphs greedy-cudagraphs eqsat-cudagraphs \
      >"$OUT/lb_train_cg.txt" 2>&1 ;;
  bert)    # about 4 min
    TAG=bert5 JOBS=4 ROUNDS=5 PREWARM_LIMIT=100 BUDGET=150 \
      STRATS=inductor,inductor-cudagraphs,greedy,eqsat,eqsat-cudagraphs bash bench/results/h200_2026-12-03c/h200_matrix_1gpu.sh bert ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
