"""Per-call host time of the compiled training step, old packing against new, in one process, interleaved.

``--old DIR``: a checkout whose ``bridge/optimus_bridge/param_pack.py`` is the old packing (loaded as a second
module and swapped in for the first compile). Two copies of launch_bound (same weights) are compiled with
``optimus_eq.backend(strategy)`` and Inductor, one with each packing; then ``--rounds`` rounds of ``--iters``
calls alternate between them (forward + loss + backward, grads set to None), so the machine's load hits both
alike. Prints the median and min ms per call of each.
"""
import argparse, copy, importlib.util, json, statistics, sys, time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--old", required=True)
ap.add_argument("--branches", type=int, default=128)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--strategy", default="greedy")
ap.add_argument("--rounds", type=int, default=10)
ap.add_argument("--iters", type=int, default=10)
a = ap.parse_args()
torch.set_num_threads(1)
import optimus_eq
from optimus_bridge import backend as bmod
from optimus_bench.models import build
from optimus_bench.measure import TrainStep

spec = importlib.util.spec_from_file_location("old_param_pack", f"{a.old}/bridge/optimus_bridge/param_pack.py")
old = importlib.util.module_from_spec(spec)
sys.modules["old_param_pack"] = old  # dataclasses look the module up
spec.loader.exec_module(old)
new = bmod._param_pack
case = build("launch_bound", "cpu", overrides={"branches": a.branches, "batch": a.batch, "optimizer": "none"})
steps = {}
for name, mod in (("old", old), ("new", new)):
    bmod._param_pack = mod
    m = TrainStep(copy.deepcopy(case.model).train(), case.loss_fn)
    f = torch.compile(m, backend=optimus_eq.backend(strategy=a.strategy))
    params = list(m.parameters())

    def step(f=f, params=params):
        for p in params:
            p.grad = None
        loss, _ = f(*case.inputs, case.labels)
        loss.backward()
    t = time.perf_counter()
    step()
    print(name, "first call", round(time.perf_counter() - t, 1), "s", file=sys.stderr)
    for _ in range(3):
        step()
    steps[name] = step
bmod._param_pack = new
times = {k: [] for k in steps}
for _ in range(a.rounds):
    for k, step in steps.items():
        for _ in range(a.iters):
            t = time.perf_counter()
            step()
            times[k].append((time.perf_counter() - t) * 1e3)
print(json.dumps({"branches": a.branches, "batch": a.batch, "strategy": a.strategy, **{
    k: {"median_ms": round(statistics.median(v), 3), "min_ms": round(min(v), 3), "n": len(v)} for k, v in times.items()}}))
