"""Our optimizer's first and second call in a fresh process (issue 9: eqsat's one-time cost per process).

Each measurement is one fresh Python process (``--child``): it imports ``optimus_eq``'s facade (as
``optimus_eq.backend(...)`` does before a compile), captures a bench model's Dynamo graphs
(``cuda_meta.capture``, on CPU), then calls ``optimus_eq.optimize`` on them twice with one strategy and reports
each call's wall seconds (summed over the graphs: what the bench's ``optimizer_s`` sums), the first call's
phases (``Report.times``), the seconds of the imports before it, and a digest of each call's plan (the lowered
graph's code and the plan's cost), so that two versions of the code can be checked for the same plans. The
parent runs ``--runs`` processes per (model, mode, strategy), in rotated order, and reports the median and
range of each figure.

    PYTHONPATH=src:bridge:bench python bench/first_call.py --models wukong dhen --modes inference train \\
        --strategies eqsat greedy --runs 5 [--size cpu] [--cost cudagraph] [--json FILE] [--profile DIR]

``--trees NAME=PATH ...`` measures several checkouts side by side (each child runs with ``PATH/src``,
``PATH/bridge`` and ``PATH/bench`` on ``PYTHONPATH``; the cells of every tree in one rotated order), e.g. the
code before and after a change: ``--trees base=/tmp/base new=.``; the summary then says per cell whether
every tree made the same plans. ``--profile DIR`` also writes a cProfile of each first call (``DIR/<model>-<mode>-<strategy>.prof``; one
extra process per cell, not timed). Timing only: no assertion here; plans are compared across runs by digest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

FIELDS = ("import_s", "capture_s", "first_s", "second_s")


def child(model: str, mode: str, strategy: str, size: str, profile: str | None, collect: bool = False,
          cost: str = "launch") -> dict:
    """One fresh process's figures (module doc); printed as one JSON line by ``--child``. ``cost``:
    ``launch`` (``optimize``'s default ``GPUCostModel()``) or ``cudagraph`` (``GPUCostModel.cudagraph()``,
    the CUDA-graph execution mode's cost model)."""
    t0 = time.perf_counter()
    import torch  # noqa: F401 - the user's process has torch before any compile

    t_torch = time.perf_counter()
    import optimus_eq

    optimus_eq.optimize  # noqa: B018 - the facade, as optimus_eq.backend(...) imports it before the compile
    from cuda_meta import capture

    t1 = time.perf_counter()
    graphs, _ = capture(model, size, mode)
    t2 = time.perf_counter()
    opts = {}
    if cost == "cudagraph":
        from optimus_eq.cost import GPUCostModel

        opts["cost_model"] = GPUCostModel.cudagraph()
    row = {"model": model, "mode": mode, "strategy": strategy, "size": size, "cost": cost, "graphs": len(graphs),
           "torch_import_s": t_torch - t0, "import_s": t1 - t_torch, "capture_s": t2 - t1}
    for call in ("first", "second"):
        prof = None
        if profile and call == "first":
            import cProfile

            prof = cProfile.Profile()
        seconds, digests, cost, phases = 0.0, [], 0.0, {}
        if collect:
            import gc

            gc.collect()  # untimed: the process's next full collection does not land in the call
        for gm, ex in graphs:
            t = time.perf_counter()
            if prof is not None:
                prof.enable()
            out, rep = optimus_eq.optimize(gm, ex, strategy=strategy, **opts)
            if prof is not None:
                prof.disable()
            seconds += time.perf_counter() - t
            digests.append(hashlib.sha256(out.code.encode()).hexdigest()[:16])
            cost += rep.cost_after or 0.0
            for k, v in rep.times.items():
                phases[k] = phases.get(k, 0.0) + v
            if rep.fallback:
                row["fallback"] = rep.fallback
        row[f"{call}_s"] = seconds
        row[f"{call}_phases"] = {k: round(v, 4) for k, v in phases.items()}
        row[f"{call}_plan"] = {"digest": "-".join(digests), "cost_after": round(cost, 6)}
        if prof is not None:
            prof.dump_stats(profile)
    return row


def _spawn(model: str, mode: str, strategy: str, size: str, profile: str | None = None,
           tree: tuple[str, str] | None = None, collect: bool = False, cost: str = "launch") -> dict:
    here = os.path.dirname(os.path.abspath(__file__))
    cmd = [sys.executable, os.path.join(here, "first_call.py"), "--child", model, mode, strategy, "--size", size]
    if collect:
        cmd.append("--gc-collect")
    if cost != "launch":
        cmd += ["--cost", cost]
    if profile:
        cmd += ["--profile", profile]
    row = run_child(cmd, tree, {"model": model, "mode": mode, "strategy": strategy})
    if tree is None:
        del row["tree"]
    return row


def write_results(path: str, rows: list[dict], summary: list[dict], table: str) -> None:
    """Write a bench run's ``rows`` and ``summary`` (with this process's arguments) to the JSON file ``path``, and
    the markdown ``table`` beside it (``path`` with ``.md``)."""
    with open(path, "w") as f:
        json.dump({"argv": sys.argv[1:], "rows": rows, "summary": summary}, f, indent=1)
    with open(os.path.splitext(path)[0] + ".md", "w") as f:
        f.write(table)


def run_child(cmd: list[str], tree: tuple[str, str] | None, ident: dict) -> dict:
    """Run a bench child process ``cmd`` (with ``PYTHONPATH`` set to the checkout ``tree = (name, path)``'s
    src/bridge/bench when given) and return the JSON object on its last stdout line, or ``ident`` with the
    child's ``error`` (its stderr's tail) when it failed; ``row["tree"]`` is the tree's name (None without)."""
    env = os.environ.copy()
    if tree is not None:
        root = os.path.abspath(tree[1])
        env["PYTHONPATH"] = os.pathsep.join(os.path.join(root, d) for d in ("src", "bridge", "bench"))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        row = {**ident, "error": out.stderr[-2000:]}
    else:
        row = json.loads(out.stdout.strip().splitlines()[-1])
    row["tree"] = tree[0] if tree else None
    return row


def summarize(rows: list[dict]) -> list[dict]:
    """Per (model, mode, strategy): median, min and max of each field of :data:`FIELDS` over the runs, and
    the set of plan digests seen (one digest: every run made the same plans)."""
    cells: dict[tuple, list[dict]] = {}
    for r in rows:
        cells.setdefault((r.get("tree"), r["model"], r["mode"], r["strategy"]), []).append(r)
    out = []
    for (tree, model, mode, strategy), rs in cells.items():
        ok = [r for r in rs if "error" not in r]
        s = {"tree": tree, "model": model, "mode": mode, "strategy": strategy, "runs": len(ok),
             "errors": len(rs) - len(ok)}
        for f in FIELDS:
            vals = [r[f] for r in ok]
            if vals:
                s[f] = {"median": round(statistics.median(vals), 3), "min": round(min(vals), 3),
                        "max": round(max(vals), 3)}
        s["plans"] = sorted({json.dumps([r["first_plan"], r["second_plan"]]) for r in ok})
        out.append(s)
    plans: dict[tuple, set] = {}
    for s in out:
        plans.setdefault((s["model"], s["mode"], s["strategy"]), set()).update(s["plans"])
    for s in out:
        s["same_plans_everywhere"] = len(plans[(s["model"], s["mode"], s["strategy"])]) == 1
    return out


def markdown(summary: list[dict]) -> str:
    """A table of :func:`summarize`'s rows: median [min-max] seconds per field, and whether the plans agree."""

    def cell(st):
        return "n/a" if not st else f"{st['median']:.3f} [{st['min']:.3f}-{st['max']:.3f}]"

    lines = ["| model | mode | strategy | tree | runs | import s | first call s | second call s | same plans |",
             "|---|---|---|---|---:|---:|---:|---:|---|"]
    for s in sorted(summary, key=lambda s: (s["model"], s["mode"], s["strategy"], str(s["tree"]))):
        lines.append(f"| {s['model']} | {s['mode']} | {s['strategy']} | {s['tree'] or ''} | {s['runs']} | "
                     f"{cell(s.get('import_s'))} | {cell(s.get('first_s'))} | {cell(s.get('second_s'))} | "
                     f"{'yes' if s['same_plans_everywhere'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", nargs=3, metavar=("MODEL", "MODE", "STRATEGY"), help=argparse.SUPPRESS)
    ap.add_argument("--models", nargs="+", default=["wukong", "dhen"])
    ap.add_argument("--modes", nargs="+", default=["inference", "train"])
    ap.add_argument("--strategies", nargs="+", default=["eqsat", "greedy"])
    ap.add_argument("--size", default="cpu")
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per cell")
    ap.add_argument("--json", default=None, help="write every run and the summary here")
    ap.add_argument("--profile", default=None, help="child: a .prof file; parent: a folder for one per cell")
    ap.add_argument("--trees", nargs="+", default=None, metavar="NAME=PATH", help="checkouts to compare")
    ap.add_argument("--gc-collect", action="store_true",
                    help="a full garbage collection (untimed) before each call: where the process's next one "
                         "falls depends on what it allocated before (imports), not on the call")
    ap.add_argument("--cost", default="launch", choices=("launch", "cudagraph"),
                    help="the GPU cost model's execution mode (child doc)")
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(*a.child, a.size, a.profile, a.gc_collect, a.cost)), flush=True)
        return 0
    trees = [tuple(t.split("=", 1)) for t in a.trees] if a.trees else [None]
    cells = [(t, m, md, s) for m in a.models for md in a.modes for s in a.strategies for t in trees]
    rows = []
    for k in range(a.runs):
        for i in range(len(cells)):
            t, m, md, s = cells[(k + i) % len(cells)]
            r = _spawn(m, md, s, a.size, tree=t, collect=a.gc_collect, cost=a.cost)
            r["run"] = k
            rows.append(r)
            print(json.dumps({f: (round(v, 3) if isinstance(v, float) else v) for f, v in r.items()
                              if not f.endswith("phases")}), flush=True)
    if a.profile:
        os.makedirs(a.profile, exist_ok=True)
        for t, m, md, s in cells:
            name = f"{t[0]}-" if t else ""
            _spawn(m, md, s, a.size, os.path.join(a.profile, f"{name}{m}-{md}-{s}.prof"), tree=t, collect=a.gc_collect,
                   cost=a.cost)
    summary = summarize(rows)
    for s in summary:
        print(json.dumps(s), flush=True)
    print(markdown(summary))
    if a.json:
        write_results(a.json, rows, summary, markdown(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
