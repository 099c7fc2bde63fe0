"""Does what our optimizer leaves in a process slow Inductor's compile of the same graph (issue 9)?

On the H200, Wukong training compiled with eqsat's plan minus ``batch_gemm_lhs`` (the very code greedy emits,
60 kernels) spent 1.06-1.22 s in Inductor's ``Scheduler.__init__`` against greedy's 0.67-0.87 s
(bench/results/h200_2026-12-03b). Here every run is a fresh process that first optimizes a throwaway copy of the
model's graph with ``--pre`` (``greedy``: the baseline; ``eqsat``; ``highs``: greedy plus one HiGHS solve, as
eqsat's extraction does), then compiles the model with the bench's ``greedy`` strategy (the same plan every
time) and records the first call's compile phases and, per thread of the process, the CPU seconds it used
during that compile (a thread left spinning by a native library shows up there).

    PYTHONPATH=src:bridge:bench python bench/compile_state.py --device cuda --pre greedy eqsat highs --reps 4 \\
        --out bench/out/compile_state

Writes ``OUT/compile_state.json`` (every run) and prints one line per run.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PHASES = ("Scheduler.__init__", "GraphLowering.run", "GraphLowering.codegen", "create_aot_dispatcher_function",
          "PyCodeCache.load_by_key_path", "async_compile.wait")


def _thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) per thread of this process, by ``tid:name``."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
            name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[f"{tid}:{name}"] = (int(fields[11]) + int(fields[12])) / tick
    return out


def one_run(pre: str, model: str, device: str, size: str) -> dict:
    """This process: optimize a throwaway graph with ``pre``, then the bench's greedy cell; the fields."""
    import torch

    import optimus_eq
    from cuda_meta import capture
    from optimus_bench import measure
    from optimus_bench.models import build
    from optimus_bench.strategies import resolve

    case = build(model, size, device=device)
    ref = measure.reference(case, "train")
    torch.compile(lambda x: x.sin() + 1)(torch.randn(4, device=device))  # the bench's warm-up compile
    graphs, _ = capture(model, size, "train")
    gm, xs = graphs[0]
    optimus_eq.optimize(copy.deepcopy(gm), xs, strategy="eqsat" if pre == "eqsat" else "greedy")
    if pre == "highs":
        import numpy as np

        from optimus_eq.extract import ilp
        ilp.load_solver()
        ilp._highs_direct(np.ones(4), ilp._Csc.of([0, 0], [0, 1], [1.0, 1.0], 1, 4), np.array([1.0]), np.array([np.inf]), 4,
                          np.ones(4), 1.0)
    del graphs, gm, xs
    gc.collect()
    before, t0 = _thread_cpu(), time.perf_counter()
    res = measure.run_cell(case, "train", resolve(["greedy"])[0], device, ref, iters=1, warmup=0)
    wall = time.perf_counter() - t0
    after = _thread_cpu()
    busy = sorted(((after[k] - before.get(k, 0.0), k) for k in after), reverse=True)
    phases = res.get("compile_phases") or {}
    return {"pre": pre, "status": res["status"], "compile_s": res.get("compile_s"), "inductor_s": res.get("inductor_s"),
            "cell_wall_s": wall, "phases": {k: phases.get(k) for k in PHASES},
            "kernels_generated": res.get("kernels_generated"), "threads": len(after),
            "thread_cpu_s": [(k, round(v, 2)) for v, k in busy[:8]], "affinity": len(os.sched_getaffinity(0)),
            "gc_objects": len(gc.get_objects()), "torch_threads": torch.get_num_threads()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pre", nargs="+", default=["greedy", "eqsat", "highs"])
    ap.add_argument("--model", default="wukong")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--size", default="gpu")
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--out", default="bench/out/compile_state")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a child process: one run, JSON on stdout
    args = ap.parse_args(argv)
    if args.one:
        print("RESULT " + json.dumps(one_run(args.one, args.model, args.device, args.size)), flush=True)
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for rep in range(args.reps):
        order = args.pre if rep % 2 == 0 else args.pre[::-1]
        for pre in order:
            cmd = [sys.executable, __file__, "--one", pre, "--model", args.model, "--device", args.device,
                   "--size", args.size]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            row = json.loads(line[-1][7:]) if line else {"pre": pre, "status": "error", "error": proc.stderr[-1500:]}
            row["rep"] = rep
            runs.append(row)
            ph = row.get("phases") or {}
            print(rep, pre, row.get("status"), f"first call {row.get('compile_s') or 0:.2f}",
                  f"sched {ph.get('Scheduler.__init__') or 0:.2f}", f"lowering {ph.get('GraphLowering.run') or 0:.2f}",
                  f"threads {row.get('threads')}", row.get("thread_cpu_s", [])[:4], flush=True)
            (out / "compile_state.json").write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
