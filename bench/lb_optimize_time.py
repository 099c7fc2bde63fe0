"""Our optimizer's seconds on the launch-bound model's Dynamo graphs (issue 12: 512 branches, first compile).

Dynamo captures the model once per mode (``cuda_meta.capture``: inference on fake CUDA tensors where the trace
allows, the training step on CPU), then ``optimus_eq.optimize`` runs on the captured graph once per strategy,
timed with its own ``Report.times`` (wall seconds per phase) and a wall clock around the call. Neither
Dynamo's tracing, parameter packing, AOTAutograd nor Inductor is in the figure: on the H200 the first call's
other parts are measured by ``bench/results/h200_2026-12-02e/h200_session12_lb.sh``.

    PYTHONPATH=src:bridge:bench python bench/lb_optimize_time.py --set branches=512 --set batch=256 \\
        --modes inference train --strategies greedy eqsat [--json FILE]

Prints one JSON line per (mode, strategy): ``capture_s`` (Dynamo, shared by the mode's strategies),
``optimize_s``, the report's phases (wall and CPU seconds), FX nodes before and after, and the fallback if any.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import optimus_eq
from cuda_meta import capture, strategy_options


def run(modes: list[str], strategies: list[str], size: str, overrides: dict) -> list[dict]:
    """One row per mode and strategy (module doc)."""
    rows = []
    for mode in modes:
        t0 = time.perf_counter()
        graphs, emulated = capture("launch_bound", size, mode, overrides)
        capture_s = time.perf_counter() - t0
        for strat in strategies:
            name, opts = strategy_options(strat, emulated)
            row = {"mode": mode, "strategy": strat, "capture": "cpu" if emulated else "cuda-meta",
                   "capture_s": round(capture_s, 1), "optimize_s": 0.0, "nodes_before": 0, "nodes_after": 0,
                   "times": {}, "cpu_times": {}}
            for gm, ex in graphs:
                row["nodes_before"] += len(gm.graph.nodes)
                t1 = time.perf_counter()
                out, rep = optimus_eq.optimize(gm, ex, strategy=name, **opts)
                row["optimize_s"] += time.perf_counter() - t1
                row["nodes_after"] += len(out.graph.nodes)
                for field in ("times", "cpu_times"):
                    for k, v in (getattr(rep, field) or {}).items():
                        row[field][k] = round(row[field].get(k, 0.0) + v, 2)
                if rep.fallback:
                    row["fallback"] = str(rep.fallback)
            row["optimize_s"] = round(row["optimize_s"], 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="gpu")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="e.g. branches=512")
    ap.add_argument("--modes", nargs="+", default=["inference", "train"])
    ap.add_argument("--strategies", nargs="+", default=["greedy", "eqsat"])
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    overrides = {k.split(".", 1)[-1]: int(v) for k, v in (s.split("=", 1) for s in a.set)}
    rows = run(a.modes, a.strategies, a.size, overrides)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"overrides": overrides, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
