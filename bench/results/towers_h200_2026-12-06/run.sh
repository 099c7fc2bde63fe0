#!/usr/bin/env bash
# The per-feature towers bench model (optimus_bench/models/towers.py, gpu size: 32 features, towers
# 32 -> 64 -> 64 -> 16, batch 2048) on one GPU, training step (zero_grad, forward, backward, fused Adam):
#   new: this commit's code, strategies side by side in 5 rotated rounds of 50 iterations;
#   old: the code before every tower layer was batched again (commit 8f75243, extracted into .old/ and carried),
#        greedy and eqsat, in a process of its own (kernels exact; ms from another process, compare loosely).
# Run from the repository root with the device tool (carry .whl and .old):
#   OUT=$OUT bash bench/results/towers_h200_2026-12-06/run.sh [new|old|both]
set -u
OUT=${OUT:-$PWD/towers_out}
WHICH=${1:-both}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$OUT/gpu.txt"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >>"$OUT/gpu.txt"
B="python3 -m optimus_eq.cli bench --device cuda --models towers --modes train --no-plots --no-progress --iters 50"
if [ "$WHICH" != old ]; then
  PYTHONPATH=/tmp/site:$PWD/src:$PWD/bridge:$PWD/bench timeout -s INT 420 $B --rounds 5 --time-budget 300 \
    --strategies inductor,inductor-cudagraphs,inductor-optimus,greedy,eqsat,eqsat-cudagraphs --out /tmp/new >"$OUT/new.log" 2>&1
  cp /tmp/new/results.json "$OUT/new.json"; cp /tmp/new/results.md "$OUT/new.md"
fi
if [ "$WHICH" != new ]; then
  PYTHONPATH=/tmp/site:$PWD/.old/src:$PWD/.old/bridge:$PWD/bench timeout -s INT 240 $B --rounds 5 --time-budget 150 \
    --strategies greedy,eqsat --out /tmp/old >"$OUT/old.log" 2>&1
  cp /tmp/old/results.json "$OUT/old.json"; cp /tmp/old/results.md "$OUT/old.md"
fi
