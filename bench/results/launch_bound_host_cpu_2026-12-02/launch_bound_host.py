"""Host cost per training step of the launch-bound model (issue 12), measured on the CPU.

On the H200 the launch-bound model's training step at 512 branches is bound by host work per call (the GPU
is nearly idle), so the per-step wall time on a CPU with a tiny batch and width (compute negligible) is a
proxy for that host cost. Builds ``optimus_bench.models.launch_bound`` (``--branches``,
``--batch`` 8, ``--dim`` 32, 2 layers), compiles the training step (forward + loss in the compiled region, as
``optimus_bench.measure.TrainStep``) with each of ``--strategies`` in one process (one model copy each, same
weights), and times the realistic iteration in interleaved rounds (so the shared machine's load hits every
strategy alike):
``zero_grad(set_to_none=True)``, forward, ``loss.backward()``, fused Adam step.

Reports (one JSON line per strategy): first-call seconds, median / min step ms (wall, and thread CPU time: steadier on a
shared machine) over ``--rounds`` x ``--iters`` steps,
and a ``torch.profiler`` breakdown of ``--profile-iters`` further steps (CPU, ms per step): the phases marked
with ``record_function`` (zero_grad, forward, backward, optimizer) and the profiler's own events inside them
(``TorchDynamo Cache Lookup`` = Dynamo's guard evaluation, ``Torch-Compiled Region``, ``CompiledFunction``
(AOTAutograd's forward), the backward nodes ``CompiledFunctionBackward``, ``AccumulateGrad`` (one per
parameter) and our ``PackedStacksBackward``, ``Optimizer.step#Adam.step``); the profiler adds some microseconds
per recorded op, so its milliseconds are inflated and only comparable with each other. ``phase_ms_median`` /
``phase_cpu_ms_median``: the same phases timed (wall / thread CPU) in the unprofiled steps. Gradients and loss of the first step are checked against an eager copy.

    PYTHONPATH=src:bridge:bench python bench/results/launch_bound_host_cpu_2026-12-02/launch_bound_host.py --branches 128 \\
        --strategies eager inductor-optimus greedy eqsat
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
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
    "packed_stack_backward": "autograd::engine::evaluate_function: PackedStacksBackward",
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
    ap.add_argument("--strategies", nargs="+", default=["greedy"],
                    help="bench strategy names (eager, inductor-optimus, greedy, eqsat, ...), compiled in this process "
                         "and timed interleaved")
    ap.add_argument("--optimizer", default="adam_fused")
    ap.add_argument("--rounds", type=int, default=10, help="rounds of --iters steps per strategy, interleaved")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--profile-iters", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--top", type=int, default=0, help="also print the profiler's top events by self CPU time")
    ap.add_argument("--label", default="", help="free text stored in the result (e.g. the commit)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from optimus_bench.models import build

    case = build("launch_bound", "cpu", overrides={"branches": a.branches, "batch": a.batch, "dim": a.dim,
                                                   "layers": a.layers, "optimizer": a.optimizer})
    cells = {name: _Cell(name, case) for name in a.strategies}
    for _ in range(a.rounds):
        for cell in cells.values():
            for _ in range(a.iters):
                cell.step(timed=True)
    for cell in cells.values():
        print(json.dumps({
            "branches": a.branches, "batch": a.batch, "dim": a.dim, "layers": a.layers, "strategy": cell.name,
            "optimizer": a.optimizer, "params": len(cell.params), "threads": a.threads, "label": a.label,
            "torch": torch.__version__, "steps": a.rounds * a.iters, **cell.summary(a.profile_iters, a.top),
        }), flush=True)


class _Cell:
    """One strategy's compiled training step, its first call checked against eager, and its timings."""

    def __init__(self, name: str, case) -> None:
        from optimus_bench.measure import TrainStep
        from optimus_bench.models.base import make_optimizer
        from optimus_bench.strategies import resolve

        self.name, self.case = name, case
        ref = TrainStep(copy.deepcopy(case.model).train(), case.loss_fn)
        model = TrainStep(copy.deepcopy(case.model).train(), case.loss_fn)
        self.fn = resolve([name])[0].compile(model)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.opt = make_optimizer(case.optimizer, self.params)
        self.phases = {p: [] for p in PHASES}
        self.phases_cpu = {p: [] for p in PHASES}
        self.wall, self.cpu = [], []  # ms per step; thread CPU time is steadier on a shared machine
        t0 = time.perf_counter()
        loss = self.step(optimizer=False)
        self.first_s = time.perf_counter() - t0
        ref_loss, _ = ref(*case.inputs, case.labels)
        ref_loss.backward()
        self.ok = bool(torch.allclose(loss, ref_loss, rtol=1e-4, atol=1e-5) and all(
            torch.allclose(p.grad, r.grad, rtol=1e-3, atol=1e-5) for p, r in zip(self.params, ref.parameters())))
        if self.opt is not None:
            self.opt.step()
        for _ in range(3):
            self.step()
        print(f"{name}: first call {self.first_s:.1f} s", file=sys.stderr, flush=True)

    def step(self, mark: bool = False, timed: bool = False, optimizer: bool = True):
        from torch.profiler import record_function

        ctx = record_function if mark else _null
        marks = [(time.perf_counter(), time.thread_time())]
        with ctx("zero_grad"):
            if self.opt is not None:
                self.opt.zero_grad(set_to_none=True)
            else:
                for p in self.params:
                    p.grad = None
        marks.append((time.perf_counter(), time.thread_time()))
        with ctx("forward"):
            loss, _ = self.fn(*self.case.inputs, self.case.labels)
        marks.append((time.perf_counter(), time.thread_time()))
        with ctx("backward"):
            loss.backward()
        marks.append((time.perf_counter(), time.thread_time()))
        if self.opt is not None and optimizer:
            with ctx("optimizer"):
                self.opt.step()
        marks.append((time.perf_counter(), time.thread_time()))
        if timed:
            for name, x, y in zip(PHASES, marks, marks[1:]):
                self.phases[name].append((y[0] - x[0]) * 1e3)
                self.phases_cpu[name].append((y[1] - x[1]) * 1e3)
            self.wall.append((marks[-1][0] - marks[0][0]) * 1e3)
            self.cpu.append((marks[-1][1] - marks[0][1]) * 1e3)
        return loss

    def summary(self, profile_iters: int, top: int) -> dict:
        """The timings, and a profiler breakdown of ``profile_iters`` more steps (ms per step)."""
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(profile_iters):
                self.step(mark=True)
        if top:
            print(self.name, prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top), file=sys.stderr)
        breakdown = {}
        for ev in prof.key_averages():
            for key, name in [*((p, p) for p in PHASES), *EVENTS.items()]:
                if ev.key == name:
                    breakdown[key] = breakdown.get(key, 0.0) + ev.cpu_time_total / 1e3 / profile_iters
                    if key == "accumulate_grad":
                        breakdown["accumulate_grad_calls"] = ev.count // profile_iters
        med = statistics.median
        return {
            "first_call_s": round(self.first_s, 2), "first_step_matches_eager": self.ok,
            "step_ms_median": round(med(self.wall), 3), "step_ms_min": round(min(self.wall), 3),
            "step_cpu_ms_median": round(med(self.cpu), 3), "step_cpu_ms_min": round(min(self.cpu), 3),
            "phase_ms_median": {k: round(med(v), 3) for k, v in self.phases.items()},
            "phase_cpu_ms_median": {k: round(med(v), 3) for k, v in self.phases_cpu.items()},
            "profile_ms_per_step": {k: round(v, 3) for k, v in sorted(breakdown.items())},
        }


class _null:
    def __init__(self, *_): ...

    def __enter__(self): ...

    def __exit__(self, *_): ...


if __name__ == "__main__":
    main()
