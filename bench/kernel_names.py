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


def step_timeline(step, device: str, calls: int = 10) -> dict:
    """Where the GPU idles during synchronized calls of ``step`` (CUDA only), medians over ``calls`` profiled calls.

    Each call starts on an idle GPU right after a marker kernel (``torch.cuda._sleep``), and only GPU activities
    are recorded (no host op events, so the host runs at nearly its own speed); the first of ``calls + 1`` calls is
    left out (CUPTI's setup lands in it). Returns, in microseconds, ``lead_us`` (marker's end to the call's
    first GPU activity: the host work of the call that nothing overlaps, as a synchronized training loop pays
    it), ``busy_us`` (union of the activity intervals), ``gaps_us`` (idle time between activities) and
    ``span_us`` (first activity's start to the last one's end), and ``top_gaps``, the 5 longest gaps of the
    last call as ``(us, kernel before, kernel after)``.
    """
    from torch.profiler import ProfilerActivity, profile

    def marked_call():
        torch.cuda.synchronize()
        torch.cuda._sleep(100)  # the marker: "spin_kernel"
        step()
        torch.cuda.synchronize()

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls + 1):
            marked_call()
    acts = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                  key=lambda e: e.time_range.start)
    marks = [i for i, e in enumerate(acts) if "spin" in e.name or "sleep" in e.name.lower()][1:]  # first: setup
    if not marks:
        names = sorted({e.name[:40] for e in prof.events()})[:8]
        raise RuntimeError(f"step_timeline: no marker among {len(acts)} GPU activities ({names})")
    rows = []
    for j, m in enumerate(marks):
        call = acts[m + 1:marks[j + 1] if j + 1 < len(marks) else len(acts)]
        if not call:
            continue
        busy = gaps = 0.0
        top = []
        end = call[0].time_range.start
        before = None
        for e in call:
            start, finish = e.time_range.start, e.time_range.end
            if start > end and before is not None:
                gaps += start - end
                top.append((start - end, before, e.name))
            busy += max(0.0, finish - max(start, end))
            if finish >= end:
                end, before = finish, e.name
        rows.append({"lead_us": call[0].time_range.start - acts[m].time_range.end, "busy_us": busy,
                     "gaps_us": gaps, "span_us": end - call[0].time_range.start, "top_gaps": sorted(top)[::-1][:5]})
    out = {k: statistics.median(r[k] for r in rows) for k in ("lead_us", "busy_us", "gaps_us", "span_us")}
    out["top_gaps"] = rows[-1]["top_gaps"]
    out["calls"] = len(rows)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="launch_bound")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--size", default=None, help="size preset (default: gpu on cuda, cpu on cpu)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a size key, e.g. branches=128")
    ap.add_argument("--modes", nargs="+", default=["inference"])
    ap.add_argument("--strategies", nargs="+", default=["greedy", "greedy-nopack"])
    ap.add_argument("--iters", type=int, default=20, help="timed iterations for the host ms (default 20)")
    ap.add_argument("--timeline", action="store_true",
                    help="CUDA: also print where the GPU idles (step_timeline: host lead, busy, gaps)")
    ap.add_argument("--rounds", type=int, default=0,
                    help="after every strategy's listing, time them side by side: ROUNDS rotated rounds of "
                         "--iters synchronized calls each, with the host-only ms of each call (default 0: none)")
    args = ap.parse_args(argv)
    overrides = dict(item.split("=", 1) for item in args.set)
    size = args.size or ("gpu" if args.device == "cuda" else "cpu")
    case = build(args.model, size, device=args.device, overrides=overrides)
    print(f"{args.model} {case.config} on {args.device}")
    for mode in args.modes:
        ref = measure.reference(case, mode)
        steps = {}
        torch._dynamo.reset()
        for strat in resolve(args.strategies):
            if not args.rounds:  # side-by-side rounds keep every strategy compiled (as the bench's --rounds)
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
                line = None
                if args.timeline and args.device == "cuda":
                    try:
                        line = step_timeline(step, args.device)
                    except Exception as exc:  # the listing and the rounds still count
                        print(f"  timeline failed: {exc!r}")
            steps[strat.name] = step
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
            if line is not None:
                print(f"  timeline (median of {line['calls']} calls, GPU activities only): lead {line['lead_us']:.0f} us, "
                      f"span {line['span_us']:.0f} = busy {line['busy_us']:.0f} + gaps {line['gaps_us']:.0f}")
                for us, a, b in line["top_gaps"][:3]:
                    print(f"    gap {us:7.1f} us  after {a[:60]}  before {b[:60]}")
        if args.rounds:
            side_by_side(steps, args.device, args.rounds, args.iters)


def side_by_side(steps: dict, device: str, rounds: int, iters: int) -> None:
    """Time the compiled steps in ``rounds`` rotated rounds of ``iters`` synchronized calls; print per strategy the
    median wall ms, each round's median, and the median host-only ms (the call returning, before the sync)."""
    names = list(steps)
    wall = {n: [] for n in names}
    host = {n: [] for n in names}
    per_round = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            samples = []
            for _ in range(iters):
                t0 = time.perf_counter()
                steps[n]()
                t1 = time.perf_counter()
                if device == "cuda":
                    torch.cuda.synchronize()
                samples.append((time.perf_counter() - t0) * 1e3)
                host[n].append((t1 - t0) * 1e3)
            wall[n] += samples
            per_round[n].append(statistics.median(samples))
    print(f"\n  side by side, {rounds} rounds x {iters} calls: strategy, median ms [round medians], host-only ms")
    for n in names:
        rs = " ".join(f"{m:.3f}" for m in per_round[n])
        print(f"  {n:24s} {statistics.median(wall[n]):8.3f}  [{rs}]  host {statistics.median(host[n]):.3f}")


if __name__ == "__main__":
    main()
