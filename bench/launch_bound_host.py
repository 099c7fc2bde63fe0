"""Host cost per training step of the launch-bound model (issue 12), measured on the CPU.

On the H200 the launch-bound model's training step at 512 branches is bound by host work per call (the GPU
is nearly idle), so the per-step wall time on a CPU with a tiny batch and width (compute negligible) is a
proxy for that host cost. One process per cell: builds ``optimus_bench.models.launch_bound`` (``--branches``,
``--batch`` 8, ``--dim`` 32, 2 layers), compiles the training step (forward + loss in the compiled region, as
``optimus_bench.measure.TrainStep``) with one strategy, and times the realistic iteration:
``zero_grad(set_to_none=True)``, forward, ``loss.backward()``, fused Adam step.

Reports (one JSON line): first-call seconds, median / min step ms (wall, and thread CPU time: steadier on a
shared machine) over ``--iters`` steps after ``--warmup``,
and a ``torch.profiler`` breakdown of ``--profile-iters`` further steps (CPU, ms per step): the phases marked
with ``record_function`` (zero_grad, forward, backward, optimizer) and the profiler's own events inside them
(``TorchDynamo Cache Lookup`` = Dynamo's guard evaluation, ``Torch-Compiled Region``, ``CompiledFunction``
(AOTAutograd's forward), the backward nodes ``CompiledFunctionBackward``, ``AccumulateGrad`` (one per
parameter) and ``PackedStackBackward``, our ``optimus_packed_inputs``); the profiler adds some microseconds
per recorded op, so its milliseconds are inflated and only comparable with each other. ``phase_ms_median``:
the same phases timed with ``time.perf_counter`` in the unprofiled steps. Gradients and loss of the first step are checked against an eager copy.

    PYTHONPATH=src:bridge:bench python bench/launch_bound_host.py --branches 128 --strategy greedy
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch

#: profiler events reported, by the key used in the output (summed CPU total ms per step; a name matches
#: an event when it is a substring of the event's name)
EVENTS = {
    "dynamo_cache_lookup": "TorchDynamo Cache Lookup",
    "compiled_region": "Torch-Compiled Region",
    "aot_forward": "CompiledFunction",
    "aot_backward": "autograd::engine::evaluate_function: CompiledFunctionBackward",
    "accumulate_grad": "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
    "packed_stack_backward": "autograd::engine::evaluate_function: PackedStackBackward",
    "packed_inputs": "optimus_packed_inputs",
    "adam_step": "Optimizer.step#Adam.step",
    "adam_fused_kernel": "aten::_fused_adam_",
}
PHASES = ("zero_grad", "forward", "backward", "optimizer")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--branches", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--strategy", default="greedy", help="a bench strategy name (eager, inductor-optimus, greedy, ...)")
    ap.add_argument("--optimizer", default="adam_fused")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--profile-iters", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--top", type=int, default=0, help="also print the profiler's top events by self CPU time")
    ap.add_argument("--label", default="", help="free text stored in the result (e.g. the commit)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from torch.profiler import ProfilerActivity, profile, record_function

    from optimus_bench.measure import TrainStep
    from optimus_bench.models import build
    from optimus_bench.models.base import make_optimizer
    from optimus_bench.strategies import resolve

    case = build("launch_bound", "cpu", overrides={"branches": a.branches, "batch": a.batch, "dim": a.dim,
                                                   "layers": a.layers, "optimizer": a.optimizer})
    ref = TrainStep(copy.deepcopy(case.model).train(), case.loss_fn)
    model = TrainStep(copy.deepcopy(case.model).train(), case.loss_fn)
    fn = resolve([a.strategy])[0].compile(model)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(case.optimizer, params)

    phases: dict[str, list[float]] = {p: [] for p in PHASES}
    cpu: list[float] = []  # thread CPU ms per step: steadier than wall time on a shared machine

    def step(mark: bool = False, timed: bool = False):
        ctx = record_function if mark else _null
        c0, t0 = time.thread_time(), time.perf_counter()
        with ctx("zero_grad"):
            opt.zero_grad(set_to_none=True) if opt is not None else [setattr(p, "grad", None) for p in params]
        t1 = time.perf_counter()
        with ctx("forward"):
            loss, _ = fn(*case.inputs, case.labels)
        t2 = time.perf_counter()
        with ctx("backward"):
            loss.backward()
        t3 = time.perf_counter()
        if opt is not None:
            with ctx("optimizer"):
                opt.step()
        t4 = time.perf_counter()
        if timed:
            for name, dt in zip(PHASES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                phases[name].append(dt * 1e3)
            cpu.append((time.thread_time() - c0) * 1e3)
        return loss

    t0 = time.perf_counter()
    loss = step()
    first_s = time.perf_counter() - t0
    grads = [p.grad.clone() for p in params]
    ref_loss, _ = ref(*case.inputs, case.labels)
    ref_loss.backward()
    ok = torch.allclose(loss, ref_loss, rtol=1e-4, atol=1e-5) and all(
        torch.allclose(g, r.grad, rtol=1e-3, atol=1e-5) for g, r in zip(grads, ref.parameters()))
    if opt is not None:
        opt.step()  # the first step's update (step() above stopped at backward for the comparison)
    for _ in range(a.warmup):
        step()
    times = []
    for _ in range(a.iters):
        t = time.perf_counter()
        step(timed=True)
        times.append((time.perf_counter() - t) * 1e3)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(a.profile_iters):
            step(mark=True)
    if a.top:
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.top))
    breakdown = {}
    for ev in prof.key_averages():
        for key, name in [*((p, p) for p in PHASES), *EVENTS.items()]:
            if ev.key == name:
                breakdown[key] = breakdown.get(key, 0.0) + ev.cpu_time_total / 1e3 / a.profile_iters
                if key == "accumulate_grad":
                    breakdown["accumulate_grad_calls"] = ev.count // a.profile_iters
    print(json.dumps({
        "branches": a.branches, "batch": a.batch, "dim": a.dim, "layers": a.layers, "strategy": a.strategy,
        "optimizer": a.optimizer, "params": len(params), "threads": a.threads, "label": a.label,
        "torch": torch.__version__, "first_call_s": round(first_s, 2), "first_step_matches_eager": bool(ok),
        "step_ms_median": round(statistics.median(times), 3), "step_ms_min": round(min(times), 3),
        "step_cpu_ms_median": round(statistics.median(cpu), 3), "step_cpu_ms_min": round(min(cpu), 3),
        "phase_ms_median": {k: round(statistics.median(v), 3) for k, v in phases.items()},
        "profile_ms_per_step": {k: round(v, 3) for k, v in sorted(breakdown.items())},
    }), flush=True)


class _null:
    def __init__(self, *_): ...

    def __enter__(self): ...

    def __exit__(self, *_): ...


if __name__ == "__main__":
    main()
