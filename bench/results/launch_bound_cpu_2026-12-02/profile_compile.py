"""First-call compile split and per-call host time of launch_bound (issue 12), CPU proxy.

One process per cell. Compiles the bench model ``launch_bound`` (``--branches``, ``--batch``) with one
strategy, runs the first call (inference, or forward+loss+backward for ``--mode train``) and reports:
wall seconds of the first call; of it our optimizer (``Report.times``, phases), packing, AOTAutograd +
Inductor (Inductor's ``_compile_fx_inner`` timed separately, with the FX nodes / inputs / outputs of each
graph it gets); then the median host ms of ``--iters`` further calls. ``--no-inductor``: our backend with
``compile=False`` (Dynamo + optimizer + packing only; the graph runs eagerly).

    PYTHONPATH=src:bridge:bench python bench/results/launch_bound_cpu_2026-12-02/profile_compile.py \
        --branches 128 --batch 64 --mode train --strategy greedy
"""
from __future__ import annotations

import argparse
import cProfile
import functools
import copy
import json
import pstats
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--branches", type=int, default=128)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--mode", default="train", choices=["train", "inference"])
    ap.add_argument("--strategy", default="greedy")
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--profile", default=None, help="write cProfile stats of the first call here")
    ap.add_argument("--optimizer", default="none")
    ap.add_argument("--profile-steady", default=None, help="write cProfile stats of the timed calls here")
    a = ap.parse_args()
    torch.set_num_threads(1)
    import optimus_eq
    from optimus_bridge import backend as bmod, param_pack
    from optimus_eq import api
    import torch._inductor.compile_fx as cfx
    from optimus_bench.models import build
    from optimus_bench.models.base import make_optimizer
    from optimus_bench.strategies import resolve
    from optimus_bench.measure import TrainStep

    stats = {"reports": [], "inductor": [], "pack_s": 0.0}
    orig_opt = api.optimize

    @functools.wraps(orig_opt)
    def optimize(*args, **kw):
        out = orig_opt(*args, **kw)
        stats["reports"].append({k: round(v, 3) for k, v in out[1].times.items()})
        return out
    api.optimize = optimize
    orig_pack = param_pack.pack_parameters

    def pack(*args, **kw):
        t = time.perf_counter()
        out = orig_pack(*args, **kw)
        stats["pack_s"] += time.perf_counter() - t
        return out
    param_pack.pack_parameters = pack
    orig_inner = cfx._compile_fx_inner

    def inner(gm, example_inputs, **kw):
        t = time.perf_counter()
        out = orig_inner(gm, example_inputs, **kw)
        nodes = list(gm.graph.nodes)
        outs = nodes[-1].args[0]
        stats["inductor"].append({"s": round(time.perf_counter() - t, 2), "nodes": len(nodes),
                                  "inputs": sum(n.op == "placeholder" for n in nodes),
                                  "outputs": len(outs) if isinstance(outs, (list, tuple)) else 1,
                                  "backward": bool(kw.get("is_backward"))})
        return out
    cfx._compile_fx_inner = inner

    case = build("launch_bound", "cpu", overrides={"branches": a.branches, "batch": a.batch, "optimizer": a.optimizer})
    model = copy.deepcopy(case.model)
    if a.mode == "train":
        model = TrainStep(model.train(), case.loss_fn)
    else:
        model = model.eval()
    if a.no_inductor:
        fn = torch.compile(model, backend=optimus_eq.backend(strategy=a.strategy, compile=False))
    else:
        fn = resolve([a.strategy])[0].compile(model)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(case.optimizer, params)

    def step():
        if a.mode == "inference":
            with torch.no_grad():
                return fn(*case.inputs)
        for p in params:
            p.grad = None
        loss, out = fn(*case.inputs, case.labels)
        loss.backward()
        if opt is not None:
            opt.step()
        return loss

    prof = cProfile.Profile() if a.profile else None
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    step()
    if prof:
        prof.disable()
        prof.dump_stats(a.profile)
    first = time.perf_counter() - t0
    from torch._dynamo.utils import compile_times
    ct = compile_times(repr="csv")  # (names, seconds): Dynamo's per-phase totals
    dyn = {k: round(sum(float(x) for x in str(v).split(",") if x.strip()), 2) for k, v in zip(ct[0], ct[1])
           if k in ("_compile.compile_inner", "OutputGraph.call_user_compiler", "create_aot_dispatcher_function",
                    "compile_fx.<locals>.fw_compiler_base", "compile_fx_inner", "GraphLowering.run",
                    "GraphLowering.compile_to_module")}
    times = []
    steady = cProfile.Profile() if a.profile_steady else None
    if steady:
        steady.enable()
    for _ in range(a.iters):
        t = time.perf_counter()
        step()
        times.append((time.perf_counter() - t) * 1e3)
    if steady:
        steady.disable()
        steady.dump_stats(a.profile_steady)
    ours = sum(r.get("total", 0) for r in stats["reports"])
    ind = sum(g["s"] for g in stats["inductor"])
    print(json.dumps({"branches": a.branches, "batch": a.batch, "mode": a.mode, "strategy": a.strategy,
                      "inductor_on": not a.no_inductor, "first_call_s": round(first, 2),
                      "optimizer_s": round(ours, 2), "pack_s": round(stats["pack_s"], 2),
                      "inductor_inner_s": round(ind, 2),
                      "rest_s(dynamo+aot+other)": round(first - ours - stats["pack_s"] - ind, 2),
                      "phases": stats["reports"], "dynamo_compile_times": dyn, "graphs": stats["inductor"],
                      "host_ms_median": round(statistics.median(times), 3), "host_ms_min": round(min(times), 3)}))
    if a.profile:
        pstats.Stats(a.profile).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
