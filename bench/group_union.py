"""Greedy's and eqsat's plans on a bench model, priced by one cost model (issue 15, "eqsat worse than greedy").

For each mode (training step: forward + loss, as the bench compiles it; inference under ``torch.no_grad``), the
graph is captured on CPU (``cuda_meta.capture``'s emulation, with ``decompose_gemv_pass`` accepting CPU), and
greedy and eqsat optimize it with each cost model: ``launch`` (``GPUCostModel(packed_parameters=True)``) and
``cudagraph`` (``GPUCostModel.cudagraph(packed_parameters=True)``, as ``optimus_bridge.backend.cost_model_for``
sets it when the backend packs parameters). Per cell: the plan's cost by that model (``Report.cost_after``),
the same plan re-priced as an input graph (``cost_modes.price``: captured again, ``Report.cost_before``), the
predicted CUDA kernels (``predict_module``, CUDA rules, forward and backward in training) and optimize seconds.

    PYTHONPATH=src:bridge:bench python bench/group_union.py [--model dlrm] [--size gpu] [--modes train inference]

Figures: bench/results/LOG.md, "Horizontal fusion" (groups over e-classes: unions).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings

import optimus_eq
from cost_modes import price
from cuda_meta import _capture, _cpu_gemv_registry
from optimus_bridge.inductor_kernels import predict_module
from optimus_eq.cost import GPUCostModel


def cells(model: str, size: str, modes: list[str], models: list[str], strategies: list[str]) -> list[dict]:
    """One row per (mode, cost model, strategy); see the module docstring."""
    rows = []
    for mode in modes:
        graphs = _capture(model, size, mode, None, False)  # CPU capture, both modes
        train = mode == "train"
        for label in models:
            cm = (GPUCostModel.cudagraph if label == "cudagraph" else GPUCostModel)(packed_parameters=True,
                                                                                    training=train)
            for strat in strategies:
                row = {"model": model, "mode": mode, "cost_model": label, "strategy": strat,
                       "plan_us": 0.0, "repriced_us": 0.0, "kernels": 0, "optimize_s": 0.0}
                for gm, ex in graphs:
                    t0 = time.time()
                    out, rep = optimus_eq.optimize(gm, ex, strategy=strat, cost_model=cm, registry=_cpu_gemv_registry())
                    row["optimize_s"] += time.time() - t0
                    if rep.fallback:
                        raise RuntimeError(f"{strat} fell back: {rep.fallback}")
                    row["plan_us"] += rep.cost_after
                    row["repriced_us"] += price(out, ex, train, cm)
                    row["kernels"] += predict_module(out, ex, "cuda", training=train).kernels
                row = {k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()}
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="dlrm")
    ap.add_argument("--size", default="gpu")
    ap.add_argument("--modes", nargs="+", default=["train", "inference"])
    ap.add_argument("--cost-models", nargs="+", default=["cudagraph", "launch"])
    ap.add_argument("--strategies", nargs="+", default=["greedy", "eqsat"])
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    cells(a.model, a.size, a.modes, a.cost_models, a.strategies)
    return 0


if __name__ == "__main__":
    sys.exit(main())
