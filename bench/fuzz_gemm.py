"""Long runs of the GEMM-heavy fuzzer (tests/fuzzing_gemm.py), by hand, in one process.

    PYTHONPATH=src:bridge:bench:tests python bench/fuzz_gemm.py --programs 1000 [--start 0] \\
        [--cost-models launch,cudagraph] [--strategy greedy,eqsat] [--minutes M] [--out fuzz_failures_gemm]

Each seed is one program (``fuzzing_gemm.generate``), run with each strategy under each cost model; prints a
line per program that is not ok (invalid ones aside), a count of outcomes per (strategy, cost model) at the
end, and writes each failing program as a rerunnable script to ``out``. ``--module``: each program as an
``nn.Module`` through the backend instead (``fuzzing_gemm.run_module``).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--programs", type=int, default=200)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--strategy", default="greedy,eqsat")
    p.add_argument("--cost-models", default="launch,cudagraph")
    p.add_argument("--minutes", type=float, default=None)
    p.add_argument("--out", default="fuzz_failures_gemm")
    p.add_argument("--module", action="store_true", help="run each program as an nn.Module through optimus_eq.backend"
                   " (compile=False, parameter packing, 2 SGD steps: fuzzing_gemm.run_module) instead")
    args = p.parse_args(argv)
    import torch

    import fuzzing_gemm

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    strategies, cms = tuple(args.strategy.split(",")), tuple(args.cost_models.split(","))
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    counts, t0, done = Counter(), time.perf_counter(), 0
    for seed in range(args.start, args.start + args.programs):
        if args.minutes and time.perf_counter() - t0 > 60 * args.minutes:
            break
        prog = fuzzing_gemm.generate(seed, level="pre_grad" if args.module else None)
        if args.module:
            for s in strategies:
                for cm in cms:
                    try:
                        bad = fuzzing_gemm.run_module(prog, s, cm)
                    except Exception as exc:  # noqa: BLE001
                        bad = f"raised {type(exc).__name__}: {exc}"
                    counts[(s, cm, "wrong" if bad else "ok")] += 1
                    if bad:
                        print(f"seed {seed} module {s}/{cm}: {bad[:300]}", flush=True)
            done += 1
            continue
        try:
            res = fuzzing_gemm.run_gemm(prog, strategies, cms)
        except Exception as exc:  # noqa: BLE001 -- a harness failure must not stop the run
            print(f"seed {seed}: harness {type(exc).__name__}: {exc}", flush=True)
            continue
        done += 1
        for (s, cm), o in res.items():
            counts[(s, cm, o.kind)] += 1
            if o.kind in ("wrong", "crash", "fallback"):
                print(f"seed {seed} {prog.level} {s}/{cm}: {o.kind} {o.cause}", flush=True)
                if out:
                    detail = "\n".join("# " + line for line in o.detail.splitlines()[:40])
                    (out / f"{o.kind}_{s}_{cm}_{seed}.py").write_text(
                        f"# {o.kind}: {o.cause}\n{detail}\n{prog.script(s)}")
    print(f"{done} programs in {time.perf_counter() - t0:.0f} s")
    for key, n in sorted(counts.items()):
        print(*key, n)


if __name__ == "__main__":
    main()
