#!/usr/bin/env bash
# What the H200 has left for issue 9 after session 16 (bench/results/h200_2026-12-03): why Inductor takes longer
# to compile eqsat's Wukong training plan (scheduler 0.90 vs 0.52 s, every run). One device call (carry .whl):
#
#   OUT=$OUT bash bench/results/h200_2026-12-03c/h200_session17.sh prof     # cProfile of one cold process per strategy, about 2 min
#   OUT=$OUT bash bench/results/h200_2026-12-03c/h200_session17.sh cause    # plan or process? greedy, eqsat, eqsat without batch_gemm_lhs
#                                                  # and the built-in passes, 5 fresh processes each, about 7 min
#   OUT=$OUT bash bench/results/h200_2026-12-03c/h200_session17.sh gc       # greedy, eqsat without batch_gemm_lhs, eqsat: 3 x 3, GC pauses
#   OUT=$OUT bash bench/results/h200_2026-12-03c/h200_session17.sh amort    # the opt-in compile term on the H200 (eqsat-amortized1000):
#                                                  # Wukong training first calls, 4 strategies x 4, about 8 min
#   OUT=$OUT bash bench/results/h200_2026-12-03c/h200_session17.sh amort_ms # and its ms per step beside eqsat's and the built-in passes'
#                                                  # (3 side-by-side rounds, plain and CUDA graphs), about 5 min
#   OUT=$OUT bash bench/results/h200_2026-12-03c/h200_session17.sh kernels  # which kernels Inductor generates for each plan: one cold process
#                                                  # per strategy; kernels_<strategy>.txt lists the Triton kernels'
#                                                  # names and the extern calls of the output code, ~2 min
#   OUT=$OUT bash bench/results/h200_2026-12-03c/h200_session17.sh state    # the same greedy compile after greedy / eqsat / a HiGHS solve in
#                                                  # the process (bench/compile_state.py), 4 x 3 processes, ~5 min
#
# amort, amort_ms and kernels ran in session 18 (bench/results/h200_2026-12-03c).
#
# Each process is one `optimus-eq bench` cell (as compile_time.py runs it: empty Inductor/Triton cache of its
# own) under cProfile; sched_<strategy>.txt lists the Inductor functions under Scheduler.__init__ and the
# first call's top cumulative entries, so greedy's and eqsat's can be put side by side.
set -u
step=${1:?usage: h200_session17.sh prof|cause|gc|state|amort|amort_ms|kernels}
OUT=${OUT:-$PWD/h200_out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/bridge:$PWD/bench PYTHONUNBUFFERED=1
DEVICE=${DEVICE:-cuda}; MODEL=${MODEL:-wukong}; MODE=${MODE:-train}; SIZE=${SIZE:-gpu}
case "$step" in
  prof)
    for s in ${STRATS:-inductor-optimus greedy eqsat}; do
      cache=$(mktemp -d)
      TORCHINDUCTOR_CACHE_DIR=$cache TRITON_CACHE_DIR=$cache/triton timeout 240 ${PY:-python3} -m cProfile -o "/tmp/prof_$s.out" \
        -m optimus_eq.cli bench --models "$MODEL" --modes "$MODE" --strategies "$s" --device "$DEVICE" --size "$SIZE" \
        --iters 1 --warmup 0 --cache warm --no-plots --no-progress --out "/tmp/prof_$s" >"$OUT/prof_$s.log" 2>&1
      ${PY:-python3} - "/tmp/prof_$s.out" >"$OUT/sched_$s.txt" <<'PY'
import pstats, sys
st = pstats.Stats(sys.argv[1]).strip_dirs()
st.sort_stats("cumulative")
print("== callees of Scheduler.__init__")
st.print_callees(r"scheduler.py:\d+\(__init__\)")
print("== scheduler.py, memory.py, ir.py by cumulative time")
st.print_stats(r"^(scheduler|memory|ir|comms)\.py", 40)
print("== Inductor overall")
st.print_stats(40)
PY
      rm -rf "$cache"
    done ;;
  cause)   # if eqsat-without-batch_gemm_lhs (greedy's plan, found by eqsat) compiles like greedy, the plan is the cause
    timeout -s INT 570 python3 bench/compile_time.py --device cuda --size gpu --models wukong --modes train \
      --strategies greedy,eqsat,eqsat-without-batch_gemm_lhs,inductor-optimus --reps ${REPS:-5} --time-budget ${BUDGET:-480} \
      --out /tmp/ct >"$OUT/ct.log" 2>&1
    cp /tmp/ct/compile_time.md /tmp/ct/compile_time.json "$OUT/" ;;
  gc)      # the cause step again, fewer cells, with the first call's GC pauses (compile_phases "gc (all)", "gc (full)")
    timeout -s INT 300 python3 bench/compile_time.py --device cuda --size gpu --models wukong --modes train \
      --strategies ${STRATS:-greedy,eqsat-without-batch_gemm_lhs,eqsat} --reps ${REPS:-3} --time-budget ${BUDGET:-200} \
      --out /tmp/ct >"$OUT/ct.log" 2>&1
    cp /tmp/ct/compile_time.md /tmp/ct/compile_time.json "$OUT/" ;;
  amort)
    timeout -s INT 570 python3 bench/compile_time.py --device cuda --size gpu --models wukong --modes train \
      --strategies inductor-optimus,greedy,eqsat,eqsat-amortized1000 --reps ${REPS:-4} --time-budget ${BUDGET:-440} \
      --out /tmp/ct >"$OUT/ct.log" 2>&1
    cp /tmp/ct/compile_time.md /tmp/ct/compile_time.json "$OUT/" ;;
  amort_ms)
    TAG=amort JOBS=6 ROUNDS=3 ITERS=30 PREWARM_LIMIT=150 BUDGET=240 EXTRA="--modes train" \
      STRATS=inductor-optimus,greedy,eqsat,eqsat-amortized1000,eqsat-cudagraphs,eqsat-cudagraphs-amortized1000 \
      bash bench/results/h200_2026-12-03c/h200_matrix_1gpu.sh "wukong" ;;
  kernels)
    for s in ${STRATS:-inductor-optimus greedy eqsat eqsat-amortized1000}; do
      cache=$(mktemp -d)
      TORCHINDUCTOR_CACHE_DIR=$cache TRITON_CACHE_DIR=$cache/triton timeout 200 python3 -m optimus_eq.cli bench \
        --models "$MODEL" --modes "$MODE" --strategies "$s" --device "$DEVICE" --size "$SIZE" --iters 1 --warmup 0 \
        --cache warm --no-plots --no-progress --out "/tmp/kern_$s" >"/tmp/kern_$s.log" 2>&1
      python3 - "$cache" >"$OUT/kernels_$s.txt" <<'PY'
import collections, pathlib, re, sys
kernels, externs, wrappers = set(), collections.Counter(), 0
for p in pathlib.Path(sys.argv[1]).rglob("*.py"):
    text = p.read_text(errors="replace")
    if "def call(" in text:   # an output-code wrapper (forward or backward graph)
        wrappers += 1
        for m in re.finditer(r"\b(triton_\w+)\.run\(", text):
            kernels.add(m.group(1))
        for m in re.finditer(r"\bextern_kernels\.(\w+)\(", text):
            externs[m.group(1)] += 1
        for m in re.finditer(r"\btorch\.ops\.(\w+\.\w+)", text):
            externs["op " + m.group(1)] += 1
print("wrappers", wrappers, "triton kernels", len(kernels), "extern calls", sum(externs.values()))
for k in sorted(kernels):
    print("K", re.sub(r"_\d+$", "", k))
for k, n in sorted(externs.items()):
    print("E", k, n)
PY
      rm -rf "$cache"
    done ;;
  state)
    { nproc; python3 -c "import os; print(os.cpu_count(), len(os.sched_getaffinity(0)))"; cat /sys/fs/cgroup/cpu.max; } >"$OUT/cpus.txt" 2>&1
    timeout -s INT 560 python3 bench/compile_state.py --device cuda --size gpu --pre greedy eqsat highs --reps ${REPS:-4} \
      --out /tmp/cs >"$OUT/state.log" 2>&1
    cp /tmp/cs/compile_state.json "$OUT/" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
