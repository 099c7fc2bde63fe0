"""Predicted CUDA kernels of one bench model's iteration per strategy, through the bench's own backend path.

Each strategy compiles the model as the bench does (``optimus_bench.strategies``: the optimus_eq backend with
parameter packing, ``-cudagraphs`` with ``mode="reduce-overhead"``, so eqsat prices with the CUDA-graph model);
Inductor's ``compile_fx`` is replaced by ``kernel_prediction``'s recorder and every graph it would compile is
predicted with the CUDA rules (``optimus_bridge.inductor_kernels.predict_module``), torch 2.11's scoring (no
buffer-overlap scoring), as ``bench/kernel_prediction.py --phase predict --device cuda`` does for measured rows.
Counts are the kernels inside the compiled graphs (no optimizer step, no AccumulateGrad copies).

    PYTHONPATH=src:bridge:bench python bench/results/gemm_lhs_cpu_2026-12-02/predict_plans.py wukong train \\
        greedy eqsat greedy-cudagraphs eqsat-cudagraphs          # CODE=1: the graphs; GROUPS=1: fused kernels
"""

from __future__ import annotations

import os
import sys

import torch
import torch._inductor.compile_fx as cfx

import kernel_prediction as kp
from cuda_meta import _cpu_gemv_registry
from optimus_bench import measure
from optimus_bench.models import build
from optimus_bench.strategies import resolve
from optimus_bridge import inductor_fusion
from optimus_bridge.inductor_kernels import predict_module

inductor_fusion.OVERLAP_SCORING = False


def compact(gm) -> str:
    """One line per FX node: ``name = target(args)  [shape] s(strides if not contiguous)``."""
    names, out, pi = {}, [], 0
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            names[n], pi = f"p{pi}", pi + 1
            continue
        names[n] = n.name[:24]

        def fmt(a):
            if isinstance(a, torch.fx.Node):
                return names[a]
            if isinstance(a, (list, tuple)):
                inner = [fmt(x) for x in a[:3]] + ([f"...{len(a)}"] if len(a) > 6 else [fmt(x) for x in a[3:]])
                return "[" + ", ".join(inner) + "]"
            return repr(a)

        v = n.meta.get("val", n.meta.get("example_value"))
        shape = ""
        if isinstance(v, torch.Tensor):
            shape = "[" + "x".join(map(str, v.shape)) + "]" + ("" if v.is_contiguous() else f" s{tuple(v.stride())}")
        t = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))
        out.append(f"{names[n]} = {t}({', '.join(fmt(a) for a in n.args)})  {shape}")
    return "\n".join(out)


def main(model: str, mode: str, strategies: list[str]) -> None:
    captured: list = []
    real, recording = kp._recorder(captured, False)
    cfx.compile_fx = recording
    case = build(model, os.environ.get("SIZE", "gpu"), device="cpu")
    try:
        for s in strategies:
            strat = resolve([s])[0]
            captured.clear()
            torch._dynamo.reset()
            module = measure._prepare(case, mode)
            fn = strat.compile(module, {"registry": _cpu_gemv_registry()} if strat.kind == "optimus_eq" else None)
            measure._step_fn(module, fn, case, mode, False)()
            total = None
            for i, (gm, inputs) in enumerate(captured):
                p = predict_module(gm, inputs, "cuda", training=(mode == "train"))
                total = p if total is None else total + p
                if os.environ.get("CODE"):
                    print(f"--- {s} graph {i}\n{compact(gm)}")
                if os.environ.get("GROUPS"):
                    for g in p.groups:
                        print("   group:", " ".join(g)[:220])
            print(f"### {model} {mode} {s}: kernels {total.kernels} fused {total.fused} extern {total.extern}",
                  flush=True)
    finally:
        cfx.compile_fx = real
        torch._dynamo.reset()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
