#!/usr/bin/env bash
# What the H200 has left to measure after session 15 (bench/results/h200_2026-12-02g), one device call per step
# (30 device minutes a session; carry .whl):
#
#   OUT=$OUT bash bench/results/h200_2026-12-03/h200_session16.sh ct        # issue 9: Wukong's cold first calls, 5 fresh processes per cell
#                                                   #   (3 were too few: single cold compiles differ by 1-2 s)
#   OUT=$OUT bash bench/results/h200_2026-12-03/h200_session16.sh ctp       # Wukong training only, with compile phases and the kept caches
#                                                   #   Triton kernels summarized (why eqsat's Inductor compile is longer)
#   OUT=$OUT bash bench/results/h200_2026-12-03/h200_session16.sh cgall     # the CUDA-graph columns of every model again, greedy and eqsat,
#                                                   #   after the packing rule (backend.grad_packing_pays)
#
# The device tool returns at most 8 files a call: each step writes fewer.
set -u
step=${1:?usage: h200_session16.sh ct|ctp|cgall}
OUT=${OUT:-$PWD/h200_out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/bridge:$PWD/bench PYTHONUNBUFFERED=1
case "$step" in
  ct)      # 2 rows x 3 strategies x 5 fresh processes, about 9 min
    timeout -s INT 570 python3 bench/compile_time.py --device cuda --size gpu --models wukong --modes inference train \
      --strategies inductor-optimus,greedy,eqsat --reps 5 --time-budget 540 --out /tmp/ct >"$OUT/ct.log" 2>&1
    cp /tmp/ct/compile_time.md /tmp/ct/compile_time.json "$OUT/" ;;
  ctp)     # 1 row x 3 strategies x 5 fresh processes, about 6 min
    timeout -s INT 570 python3 bench/compile_time.py --device cuda --size gpu --models wukong --modes train \
      --strategies inductor-optimus,greedy,eqsat --reps 5 --time-budget 400 --keep-caches --out /tmp/ct >"$OUT/ct.log" 2>&1
    python3 - >"$OUT/kernels.txt" <<'PY'
import json, pathlib
runs = json.load(open("/tmp/ct/compile_time.json"))["runs"]
for r in runs:
    srcs = [p for p in pathlib.Path(r["cache_dir"]).rglob("*.py") if "@triton.jit" in p.read_text(errors="ignore")]
    sizes = sorted(((len(p.read_text(errors="ignore").splitlines()), p.name) for p in srcs), reverse=True)
    print(r["rep"], r["position"], r["strategy"], f"first call {r.get('compile_s') or 0:.2f} s", f"{len(srcs)} Triton sources",
          f"{sum(n for n, _ in sizes)} lines; largest", sizes[:5])
PY
    cp /tmp/ct/compile_time.md /tmp/ct/compile_time.json "$OUT/" ;;
  cgall)   # about 6 min
    TAG=cgall JOBS=8 ROUNDS=3 ITERS=30 PREWARM_LIMIT=200 BUDGET=250 \
      STRATS=inductor-cudagraphs,greedy-cudagraphs,eqsat-cudagraphs \
      bash bench/results/h200_2026-12-03c/h200_matrix_1gpu.sh "dhen wukong interformer dlrm launch_bound bert" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
