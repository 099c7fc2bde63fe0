#!/usr/bin/env bash
# Session 11's last device call (2026-12-02): issue 12 at 128/512 branches and the DLRM CUDA-graph fix, one call.
# Prewarm every cell in parallel (one Inductor cache per group), then time each group serially on its warm cache.
set -u
OUT=${OUT:-$PWD/h200_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/bridge:$PWD/bench PYTHONUNBUFFERED=1
B="python3 -m optimus_eq.cli bench --device cuda --no-plots --no-progress"
ROUNDS=${ROUNDS:-3}
LIMIT=(0 100 150 80)  # per group (s): 128-branch training, 512-branch inference, DLRM
G1="--models launch_bound --modes train --strategies inductor-optimus,greedy,eqsat --set launch_bound.branches=128 --set launch_bound.batch=512"
G2="--models launch_bound --modes inference --strategies inductor-optimus,greedy,eqsat --set launch_bound.branches=512 --set launch_bound.batch=256"
G3="--models dlrm --modes inference train --strategies greedy-cudagraphs,eqsat-cudagraphs,inductor-cudagraphs"
start=$(date +%s)
i=0
for G in "$G1" "$G2" "$G3"; do
  i=$((i + 1))
  (timeout -s KILL 200 $B $G --prewarm 3 --time-budget 0 --iters 1 --out /tmp/g$i >"$OUT/g$i.prewarm.log" 2>&1) &
done
wait
pkill -9 -f "optimus_eq.cli bench" 2>/dev/null
echo "prewarm done at $(( $(date +%s) - start )) s" | tee -a "$OUT/g.log"
i=0
for i in 3 2 1; do
  eval G=\$G$i
  TORCHINDUCTOR_CACHE_DIR=/tmp/g$i/prewarm/cache TRITON_CACHE_DIR=/tmp/g$i/prewarm/cache/triton \
    timeout -s INT ${LIMIT[$i]} $B $G --cache warm --iters 20 --rounds "$ROUNDS" --out /tmp/t$i >>"$OUT/g.log" 2>&1
  cp /tmp/t$i/results.json "$OUT/g$i.json"; cp /tmp/t$i/results.md "$OUT/g$i.md"
  echo "group $i done at $(( $(date +%s) - start )) s" | tee -a "$OUT/g.log"
done
