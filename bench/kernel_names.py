"""Which kernels one iteration runs, by name: the per-layer view behind a bench cell's kernel count.

Builds one bench model (default ``launch_bound``) with ``--set KEY=VALUE`` sizes, compiles it with each
strategy named, runs one warm iteration under torch.profiler and prints every kernel (CUDA: GPU
activities; CPU: what :func:`optimus_eq.kernels.count_kernels` counts, with ``cpp.enable_kernel_profile``)
in launch order, with its count and the host time of the iteration. Meant for issue 12's question of what
is left after parameter packing (stack copies, bias copies of ``baddbmm``, layout copies, LayerNorm
reductions):

    PYTHONPATH=src:bridge:bench python bench/kernel_names.py --device cuda --set branches=128 --set batch=512 \\
        --modes inference train --strategies greedy greedy-nopack eqsat inductor-optimus

Strategies are the bench's (``optimus_bench.strategies``); outputs are compared with eager (float32
tolerances of ``optimus_bench.measure.compare``) and a mismatch is printed.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time

import torch

from optimus_bench import measure
from optimus_bench.models import build
from optimus_bench.strategies import resolve
from optimus_eq import kernels


def kernel_names(step, device: str) -> list[str]:
    """Names of the kernels one call of ``step`` runs, in order (see :func:`optimus_eq.kernels.count_kernels`)."""
    return [name for name, _ in kernel_times(step, device)]


def kernel_times(step, device: str) -> list[tuple[str, float]]:
    """``(name, us)`` of every kernel one call of ``step`` runs, in launch order: the profiler's duration of
    each GPU activity (CUDA) or kernel event (CPU), in microseconds."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    if device == "cuda":
        torch.cuda.synchronize()
    with profile(activities=acts) as prof:
        step()
        if device == "cuda":
            torch.cuda.synchronize()
    if device == "cuda":
        keep = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    else:
        keep = [e for e in prof.events() if kernels._is_cpu_kernel(e)]
    return [(e.name, e.time_range.elapsed_us()) for e in keep]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="launch_bound")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--size", default=None, help="size preset (default: gpu on cuda, cpu on cpu)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a size key, e.g. branches=128")
    ap.add_argument("--modes", nargs="+", default=["inference"])
    ap.add_argument("--strategies", nargs="+", default=["greedy", "greedy-nopack"])
    ap.add_argument("--iters", type=int, default=20, help="timed iterations for the host ms (default 20)")
    args = ap.parse_args(argv)
    overrides = dict(item.split("=", 1) for item in args.set)
    size = args.size or ("gpu" if args.device == "cuda" else "cpu")
    case = build(args.model, size, device=args.device, overrides=overrides)
    print(f"{args.model} {case.config} on {args.device}")
    for mode in args.modes:
        ref = measure.reference(case, mode)
        for strat in resolve(args.strategies):
            torch._dynamo.reset()
            module = measure._prepare(case, mode)
            import torch._inductor.config as inductor_config

            patches = {"cpp.enable_kernel_profile": True} if args.device == "cpu" else {}
            with inductor_config.patch(patches):
                fn = strat.compile(module)
                step = measure._step_fn(module, fn, case, mode, strat.cudagraphs and args.device == "cuda")
                t0 = time.perf_counter()
                out = step()
                compile_s = time.perf_counter() - t0
                ok, _, rel, msg = measure.compare(measure._clone_out(out), ref["out"], case.dtype)
                for _ in range(3):
                    step()
                samples = []
                for _ in range(args.iters):
                    t0 = time.perf_counter()
                    step()
                    if args.device == "cuda":
                        torch.cuda.synchronize()
                    samples.append((time.perf_counter() - t0) * 1e3)
                timed = kernel_times(step, args.device)
            names = [name for name, _ in timed]
            total_us: dict[str, float] = collections.defaultdict(float)
            for name, us in timed:
                total_us[name] += us
            print(f"\n== {mode} / {strat.name}: {len(names)} kernels, {sum(total_us.values()):.1f} us of kernel time, "
                  f"median {statistics.median(samples):.3f} ms, first call {compile_s:.1f} s, "
                  f"outputs {'match' if ok else 'MISMATCH: ' + str(msg)}")
            print("  count  total_us  name")
            for name, k in collections.Counter(names).items():
                print(f"  {k:5d}  {total_us[name]:8.1f}  {name[:150]}")


if __name__ == "__main__":
    main()
