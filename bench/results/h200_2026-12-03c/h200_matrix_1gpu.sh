#!/usr/bin/env bash
# Issue 15's H200 matrix on ONE GPU (nvidia-h200), one device call per model group:
#
#   bench/results/h200_2026-12-03c/h200_matrix_1gpu.sh "dhen wukong interformer"     # call 1
#   bench/results/h200_2026-12-03c/h200_matrix_1gpu.sh "dlrm launch_bound bert"      # call 2
#
# Each call first compiles every cell once, $JOBS processes at a time, into one Inductor cache
# (`optimus-eq bench --prewarm`, run alone: `--time-budget 0` times nothing), then runs the timed matrix
# serially on that warm cache, so the timed run's compile seconds are warm-cache times; the prewarm's
# per-cell results (cold cache, $JOBS compiles at once) are kept under prewarm/. Results land under $OUT
# (the device tool's output folder): <tag>.json / <tag>.md / <tag>.log. The timed run times the strategies
# of each (model, mode) side by side in $ROUNDS rotated rounds of $ITERS iterations (`--rounds`; 1 = each
# cell alone right after its compile, as before 2026-12-02). Merge them here with
#   optimus-eq bench --merge OUT1/<tag1>.json OUT2/<tag2>.json --out bench/results/h200_DATE
set -u
models=${1:?usage: h200_matrix_1gpu.sh "MODEL ..."}
tag=${TAG:-$(echo "$models" | tr ' ' '_')}
OUT=${OUT:-$PWD/h200_out}
JOBS=${JOBS:-6}
PREWARM_LIMIT=${PREWARM_LIMIT:-250}   # s; a cell still compiling then is compiled again in the timed run
BUDGET=${BUDGET:-220}                 # s; the timed run starts no new cell after this
ITERS=${ITERS:-50}
ROUNDS=${ROUNDS:-3}                   # side-by-side rounds per (model, mode) row (bench --rounds)
EXTRA=${EXTRA:-}                      # more bench arguments, e.g. "--modes train --set launch_bound.branches=512"
STRATS=${STRATS:-inductor,inductor-cudagraphs,inductor-combo,inductor-optimus,greedy,eqsat,greedy-cudagraphs,eqsat-cudagraphs,taso,tensat,greedy-post,eqsat-post}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then  # the device machine has no egglog: install the carried wheels
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/bridge:$PWD/bench PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$OUT/gpu.txt"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >>"$OUT/gpu.txt"
W=/tmp/matrix_$tag
B="python3 -m optimus_eq.cli bench --device cuda --models $models --strategies $STRATS --no-plots --no-progress $EXTRA"
start=$(date +%s)
timeout -s KILL "$PREWARM_LIMIT" $B --prewarm "$JOBS" --time-budget 0 --iters 1 --out "$W" >"$OUT/$tag.prewarm.log" 2>&1
pkill -9 -f "optimus_eq.cli bench" 2>/dev/null; sleep 1  # the prewarm cells (SIGINT left them running: 331 s for a 260 s limit)
echo "prewarm: $(( $(date +%s) - start )) s" >>"$OUT/$tag.prewarm.log"
# the prewarm cells' own results: cold-cache first-call seconds under $JOBS-way load
python3 - "$W/prewarm" >"$OUT/$tag.prewarm.tsv" <<'PY'
import json, sys, pathlib
for p in sorted(pathlib.Path(sys.argv[1]).glob("*/results.json")):
    for c in json.loads(p.read_text())["cells"]:
        print(c["model"], c["mode"], c["strategy"], c["status"], c.get("compile_s"), c.get("optimizer_s"), c.get("kernels"), sep="\t")
PY
export TORCHINDUCTOR_CACHE_DIR=$W/prewarm/cache TRITON_CACHE_DIR=$W/prewarm/cache/triton
timeout -s INT $(( BUDGET + 90 )) $B --cache warm --iters "$ITERS" --rounds "$ROUNDS" --time-budget "$BUDGET" --out "$W/timed" >"$OUT/$tag.log" 2>&1
cp "$W/timed/results.json" "$OUT/$tag.json"; cp "$W/timed/results.md" "$OUT/$tag.md"
echo "total: $(( $(date +%s) - start )) s" >>"$OUT/$tag.log"
