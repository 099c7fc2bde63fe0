"""Where a cold first call's compile seconds go outside Inductor's kernel compile, on CPU (issue 9, item 5).

Each measurement is one fresh process (``--child``) that does what one ``bench/compile_time.py`` run does up to
the first call (imports, the bench model, the bench's warm-up compile, ``Strategy.compile``), but with
Inductor's ``compile_fx_inner`` (lowering, code generation, the C++/Triton compile: the bench's
``inductor_s``) replaced by a no-op that runs the Aten-IR graph as it is (``--inner noop``, the default), so
that what is left is the part of the first call around it: Dynamo, our backend (``optimize``, parameter
packing, metadata), the built-in pre-grad passes, AOTAutograd (tracing, partitioning), the joint-graph
passes, and one run of the graph. The first call is split by timers wrapped around:

* ``optimize_s``: ``optimus_eq.api.optimize`` (``report_s``: its ``Report.times["total"]``, what the bench
  calls ``optimizer_s``);
* ``backend_s``: our backend closure (``optimize``, packing, ``compile_fx``) or, for Inductor's own strategies,
  ``compile_fx``; ``compile_fx_s``: ``compile_fx`` (AOTAutograd and Inductor);
* ``pack_s``: ``optimus_bridge.param_pack.pack_parameters``; ``pre_grad_s``: Inductor's pre-grad passes (the
  built-in Optimus passes); ``joint_s``: Inductor's joint-graph passes; ``inner_s``: the (no-op) inner compile;
* ``run_s``: the step's second call (the graph's run, the same in the first call).

``outside_s`` = first call - run - inner compile: what ``compile_time.py``'s ``first call - ours - Inductor``
holds, plus ours; ``dynamo_s`` = first call - run - backend; ``aot_s`` = ``compile_fx`` - pre-grad - joint -
inner; ``gc_s``: the garbage collector's pauses in the first call. Every field comes in wall seconds and, as
``*_cpu_s``, in CPU seconds of the process (one intra-op thread: on a shared machine the robust figure). The
model runs at ``--batch`` (default 64: the graphs' structure does not depend on it, the run is short). The parent
runs ``--runs`` processes per (tree, model, mode, strategy) in rotated order and prints the medians.

    PYTHONPATH=src:bridge:bench python bench/coldstart_cpu.py --models wukong --modes inference train \\
        --strategies inductor inductor-optimus greedy eqsat --runs 3 [--trees base=/tmp/base new=.] \\
        [--json FILE] [--profile DIR]

``--profile DIR`` writes one cProfile of the first call per cell (an extra process each, not timed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from first_call import run_child, write_results

_PARTS = ("first", "run", "outside", "dynamo", "aot", "backend", "optimize", "pack", "compile_fx", "pre_grad", "joint",
          "inner")
FIELDS = tuple(p + u for p in _PARTS for u in ("_s", "_cpu_s")) + ("report_s", "import_s", "warm_up_s", "gc_s", "gc2")


def _timed(acc: dict, key: str, fn):
    """``fn`` wrapped so that its wall seconds add up in ``acc[key]`` and its CPU seconds (of this process)
    in ``acc[key + "_cpu"]`` (outermost call only)."""
    depth = [0]

    def wrapper(*args, **kwargs):
        depth[0] += 1
        t, c = time.perf_counter(), time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                acc[key] = acc.get(key, 0.0) + time.perf_counter() - t
                acc[key + "_cpu"] = acc.get(key + "_cpu", 0.0) + time.process_time() - c

    wrapper.__wrapped__ = fn
    return wrapper


def child(model: str, mode: str, strategy: str, size: str, inner: str, profile: str | None,
          batch: int | None = None) -> dict:
    """One fresh process's figures (module doc), as a dict. ``batch``: the model's batch size instead of the
    preset's (the graphs' structure does not depend on it; the run does)."""
    t0 = time.perf_counter()
    import torch

    torch.set_num_threads(1)  # CPU seconds of the call are then its seconds, without intra-op threads
    import torch._inductor.compile_fx as cfx

    import optimus_eq
    import optimus_eq.api
    from optimus_bench import measure
    from optimus_bench.models import build
    from optimus_bench.strategies import resolve
    from optimus_bridge import param_pack
    from optimus_eq.demo import warm_up_compiler

    optimus_eq.optimize  # noqa: B018 - the facade, as the bench imports it
    acc: dict = {}
    if inner == "noop":
        from torch._functorch.aot_autograd import make_boxed_func

        def noop_inner(gm, example_inputs, **_kw):
            return make_boxed_func(gm.forward)

        defaults = list(cfx.compile_fx.__defaults__)
        defaults[0] = _timed(acc, "inner_s", noop_inner)
        cfx.compile_fx.__defaults__ = tuple(defaults)
    else:
        defaults = list(cfx.compile_fx.__defaults__)
        defaults[0] = _timed(acc, "inner_s", defaults[0])
        cfx.compile_fx.__defaults__ = tuple(defaults)
    t1 = time.perf_counter()
    case = build(model, size, device="cpu", overrides={"batch": batch} if batch else None)
    warm = warm_up_compiler("cpu")
    acc.clear()
    (strat,) = resolve([strategy])
    optimus_eq.api.optimize = _timed(acc, "optimize_s", optimus_eq.api.optimize)
    param_pack.pack_parameters = _timed(acc, "pack_s", param_pack.pack_parameters)
    cfx.compile_fx = _timed(acc, "compile_fx_s", cfx.compile_fx)
    cfx._recursive_pre_grad_passes = _timed(acc, "pre_grad_s", cfx._recursive_pre_grad_passes)
    cfx._recursive_joint_graph_passes = _timed(acc, "joint_s", cfx._recursive_joint_graph_passes)
    if strat.kind == "optimus_eq":
        backend = optimus_eq.backend(strategy=strat.optimus_strategy, **strat.backend_options)
        fn = torch.compile(measure._prepare(case, mode), backend=_timed(acc, "backend_s", backend))
    else:
        fn = strat.compile(measure._prepare(case, mode))
    module = getattr(fn, "_orig_mod", None)
    step = measure._step_fn(module, fn, case, mode, False)
    optimus_eq.last_reports.clear()
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
    import gc

    pauses = {"gc_s": 0.0, "gc2": 0, "start": 0.0}

    def on_gc(phase, info):  # the collector's pauses during the first call
        if phase == "start":
            pauses["start"] = time.perf_counter()
        else:
            pauses["gc_s"] += time.perf_counter() - pauses["start"]
            pauses["gc2"] += info["generation"] == 2

    gc.callbacks.append(on_gc)
    c = time.process_time()
    t = time.perf_counter()
    if prof is not None:
        prof.enable()
    step()
    if prof is not None:
        prof.disable()
        prof.dump_stats(profile)
    gc.callbacks.remove(on_gc)
    first, first_cpu = time.perf_counter() - t, time.process_time() - c
    t, c = time.perf_counter(), time.process_time()
    step()
    run, run_cpu = time.perf_counter() - t, time.process_time() - c
    row = {"model": model, "mode": mode, "strategy": strategy, "size": size, "inner": inner, "import_s": t1 - t0,
           "warm_up_s": warm, "first_s": first, "first_cpu_s": first_cpu, "run_s": run, "run_cpu_s": run_cpu,
           "gc_s": pauses["gc_s"], "gc2": pauses["gc2"],
           "report_s": sum(r.times.get("total", 0.0) for r in optimus_eq.last_reports),
           "graphs": len(optimus_eq.last_reports),
           "fallback": "; ".join(r.fallback for r in optimus_eq.last_reports if r.fallback) or None}
    for k in ("backend", "optimize", "pack", "compile_fx", "pre_grad", "joint", "inner"):
        row[k + "_s"], row[k + "_cpu_s"] = acc.get(k + "_s", 0.0), acc.get(k + "_s_cpu", 0.0)
    if strat.kind != "optimus_eq":
        row["backend_s"], row["backend_cpu_s"] = row["compile_fx_s"], row["compile_fx_cpu_s"]
    for unit, total, ran in (("_s", first, run), ("_cpu_s", first_cpu, run_cpu)):
        row["outside" + unit] = total - ran - row["inner" + unit]
        row["dynamo" + unit] = total - ran - row["backend" + unit]
        row["aot" + unit] = row["compile_fx" + unit] - row["pre_grad" + unit] - row["joint" + unit] - row["inner" + unit]
    return row


def _spawn(model, mode, strategy, size, inner, tree=None, profile=None, batch=None) -> dict:
    here = os.path.dirname(os.path.abspath(__file__))
    cmd = [sys.executable, os.path.join(here, "coldstart_cpu.py"), "--child", model, mode, strategy, "--size", size,
           "--inner", inner] + (["--batch", str(batch)] if batch else [])
    if profile:
        cmd += ["--profile", profile]

    return run_child(cmd, tree, {"model": model, "mode": mode, "strategy": strategy})


def summarize(rows: list[dict]) -> list[dict]:
    """Per (tree, model, mode, strategy): the median of each field of :data:`FIELDS` over the runs."""
    cells: dict[tuple, list[dict]] = {}
    for r in rows:
        cells.setdefault((r.get("tree"), r["model"], r["mode"], r["strategy"]), []).append(r)
    out = []
    for (tree, model, mode, strategy), rs in cells.items():
        ok = [r for r in rs if "error" not in r]
        s = {"tree": tree, "model": model, "mode": mode, "strategy": strategy, "runs": len(ok),
             "errors": len(rs) - len(ok)}
        for f in FIELDS:
            vals = [r[f] for r in ok if r.get(f) is not None]
            if vals:
                s[f] = round(statistics.median(vals), 3)
        out.append(s)
    return out


def markdown(summary: list[dict]) -> str:
    """The summary as a table, seconds (medians)."""
    cols = ("first_s", "first_cpu_s", "run_cpu_s", "outside_cpu_s", "dynamo_cpu_s", "backend_cpu_s", "optimize_cpu_s",
            "report_s", "pack_cpu_s", "compile_fx_cpu_s", "pre_grad_cpu_s", "joint_cpu_s", "aot_cpu_s",
            "gc_s")
    lines = ["| model | mode | strategy | tree | runs | " + " | ".join(c.removesuffix("_s") for c in cols) + " |",
             "|---|---|---|---|---:|" + "---:|" * len(cols)]
    for s in sorted(summary, key=lambda s: (s["model"], s["mode"], s["strategy"], str(s["tree"]))):
        lines.append(f"| {s['model']} | {s['mode']} | {s['strategy']} | {s['tree'] or ''} | {s['runs']} | "
                     + " | ".join("" if s.get(c) is None else f"{s[c]:.3f}" for c in cols) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", nargs=3, metavar=("MODEL", "MODE", "STRATEGY"), help=argparse.SUPPRESS)
    ap.add_argument("--models", nargs="+", default=["wukong"])
    ap.add_argument("--modes", nargs="+", default=["inference", "train"])
    ap.add_argument("--strategies", nargs="+", default=["inductor", "inductor-optimus", "greedy", "eqsat"])
    ap.add_argument("--size", default="gpu")
    ap.add_argument("--inner", choices=("noop", "inductor"), default="noop",
                    help="Inductor's compile_fx_inner: a no-op (default) or the real one")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64,
                    help="the model's batch size (default 64: a short run; 0: the preset's)")
    ap.add_argument("--trees", nargs="+", default=None, metavar="NAME=PATH")
    ap.add_argument("--json", default=None)
    ap.add_argument("--profile", default=None)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(*a.child, a.size, a.inner, a.profile, a.batch or None)), flush=True)
        return 0
    trees = [tuple(t.split("=", 1)) for t in a.trees] if a.trees else [None]
    cells = [(t, m, md, s) for m in a.models for md in a.modes for s in a.strategies for t in trees]
    rows = []
    for k in range(a.runs):
        for i in range(len(cells)):
            t, m, md, s = cells[(k + i) % len(cells)]
            r = _spawn(m, md, s, a.size, a.inner, tree=t, batch=a.batch)
            r["run"] = k
            rows.append(r)
            print(json.dumps({f: (round(v, 3) if isinstance(v, float) else v) for f, v in r.items()}), flush=True)
    if a.profile:
        os.makedirs(a.profile, exist_ok=True)
        for t, m, md, s in cells:
            name = f"{t[0]}-" if t else ""
            _spawn(m, md, s, a.size, a.inner, tree=t, profile=os.path.join(a.profile, f"{name}{m}-{md}-{s}.prof"),
                   batch=a.batch)
    summary = summarize(rows)
    print(markdown(summary))
    if a.json:
        write_results(a.json, rows, summary, markdown(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
