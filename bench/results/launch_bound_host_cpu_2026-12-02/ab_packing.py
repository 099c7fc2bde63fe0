"""Host time of launch_bound's training step, old parameter packing against new, in one process, interleaved.

``--old DIR``: a directory holding the old ``bridge/optimus_bridge/param_pack.py`` (e.g. ``git show
83a3eca:bridge/optimus_bridge/param_pack.py``), loaded as a second module and swapped in for the first compile.
Two copies of launch_bound (same weights) are compiled with ``optimus_eq.backend(strategy)`` and Inductor, one
with each packing; then ``--rounds`` rounds of ``--iters`` training steps (``zero_grad(set_to_none=True)``,
forward + loss, backward, fused Adam) alternate between them, so the machine's load hits both alike. Reports
per packing the median / min wall ms and thread CPU ms of the step and of forward + backward alone.

    PYTHONPATH=src:bridge:bench python bench/results/launch_bound_host_cpu_2026-12-02/ab_packing.py --old /tmp/old
"""
import argparse, copy, importlib.util, json, statistics, sys, time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--old", required=True)
ap.add_argument("--branches", type=int, default=128)
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--dim", type=int, default=32)
ap.add_argument("--strategy", default="greedy")
ap.add_argument("--rounds", type=int, default=10)
ap.add_argument("--iters", type=int, default=10)
a = ap.parse_args()
torch.set_num_threads(1)
import optimus_eq
from optimus_bridge import backend as bmod
from optimus_bench.measure import TrainStep
from optimus_bench.models import build
from optimus_bench.models.base import make_optimizer

spec = importlib.util.spec_from_file_location("old_param_pack", f"{a.old}/bridge/optimus_bridge/param_pack.py")
old = importlib.util.module_from_spec(spec)
sys.modules["old_param_pack"] = old  # dataclasses look the module up
spec.loader.exec_module(old)
new = bmod._param_pack
case = build("launch_bound", "cpu", overrides={"branches": a.branches, "batch": a.batch, "dim": a.dim,
                                               "optimizer": "adam_fused"})
steps = {}
for name, mod in (("old", old), ("new", new)):
    bmod._param_pack = mod
    m = TrainStep(copy.deepcopy(case.model).train(), case.loss_fn)
    f = torch.compile(m, backend=optimus_eq.backend(strategy=a.strategy))
    params = list(m.parameters())
    opt = make_optimizer("adam_fused", params)

    def step(f=f, opt=opt):
        opt.zero_grad(set_to_none=True)
        t = time.perf_counter(), time.thread_time()
        loss, _ = f(*case.inputs, case.labels)
        loss.backward()
        fb = time.perf_counter() - t[0], time.thread_time() - t[1]
        opt.step()
        return fb
    t = time.perf_counter()
    step()
    print(name, "first call", round(time.perf_counter() - t, 1), "s", file=sys.stderr, flush=True)
    for _ in range(3):
        step()
    steps[name] = step
bmod._param_pack = new
keys = ("step_wall", "step_cpu", "fwd_bwd_wall", "fwd_bwd_cpu")
times = {k: {x: [] for x in keys} for k in steps}
for _ in range(a.rounds):
    for k, step in steps.items():
        for _ in range(a.iters):
            t0, c0 = time.perf_counter(), time.thread_time()
            fb_wall, fb_cpu = step()
            for x, v in zip(keys, (time.perf_counter() - t0, time.thread_time() - c0, fb_wall, fb_cpu)):
                times[k][x].append(v * 1e3)
print(json.dumps({"branches": a.branches, "batch": a.batch, "dim": a.dim, "strategy": a.strategy,
                  "n": a.rounds * a.iters, **{k: {f"{x}_{s}": round(fn(v[x]), 3) for x in keys
                                                  for s, fn in (("median", statistics.median), ("min", min))}
                                              for k, v in times.items()}}))
