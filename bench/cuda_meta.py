"""Predicted CUDA kernels of the bench models per strategy, on a machine without a GPU (issue 15).

Inference: the model's parameters and inputs are FakeTensors of device ``cuda`` and dynamo captures the graph
on them (only meta kernels run), so device-dependent patterns (``decompose_gemv_pass``) see CUDA; each
strategy's ``optimize`` runs on that graph and the kernel predictor
(:func:`optimus_bridge.inductor_kernels.predict_module`, CUDA rules) counts what Inductor would emit.
Training: autograd cannot record on fake CUDA tensors without a CUDA build, so the training step (forward and
loss, as the bench compiles it) is captured on CPU, optimized with ``decompose_gemv_pass`` accepting CPU
(the one pattern of ours that reads the device) and predicted with the CUDA rules, forward and backward.
The counts are the compiled graphs' kernels only (no optimizer step, no autograd copies outside them).

    PYTHONPATH=src:bridge:bench python bench/cuda_meta.py --models dhen wukong --modes inference \\
        --strategies greedy eqsat eqsat-min2 [--size gpu] [--set launch_bound.branches=128]

Strategies: ``none``, ``greedy``, ``eqsat``, ``eqsat-cudagraph`` (eqsat priced with the CUDA-graph model), and
``<strategy>-min<k>``: that strategy with ``min_fuse_set_size = k`` for every horizontal pattern.
``eqsat-cudagraph`` is a plain ``optimize`` (no parameter packing, ``packed_parameters`` off), so a stack of
parameters costs a copy there: on DLRM (gpu preset, inference) it keeps the 26 embedding bags and 8 linears
unbatched, 100 kernels against eqsat's 47 (checked: the plans differ, not the count); the bench's
``eqsat-cudagraphs`` backend packs and prices packing.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
import time

import torch

import optimus_eq
from optimus_bench import measure
from optimus_bench.models import MODELS, build
from optimus_bridge.inductor_kernels import predict_module
from optimus_eq import DEFAULT_REGISTRY
from optimus_eq.cost import GPUCostModel


def _fake_cuda(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda")


def capture(model: str, size: str, mode: str, overrides: dict | None = None) -> tuple[list[tuple], bool]:
    """``([(gm, example_inputs)], emulated)``: dynamo's graphs of one bench model's iteration (module doc);
    ``emulated``: captured on CPU (training, or a model whose fake CUDA trace fails: some meta kernels
    still ask for a CUDA device guard, e.g. basic slicing in torch 2.13's CPU build)."""
    if mode == "inference":
        try:
            return _capture(model, size, mode, overrides, True), False
        except Exception:  # noqa: BLE001 - fall back to the CPU emulation
            pass
    return _capture(model, size, mode, overrides, False), True


def _capture(model: str, size: str, mode: str, overrides: dict | None, fake_cuda: bool) -> list[tuple]:
    case = build(model, size, device="cpu", overrides=overrides)
    module = measure._prepare(case, mode)
    captured: list = []

    def backend(gm, example_inputs):
        captured.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    if fake_cuda:
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode(allow_non_fake_inputs=True), torch.no_grad():
            for mod in module.modules():
                for name, p in list(mod._parameters.items()):
                    if p is not None:
                        mod._parameters[name] = torch.nn.Parameter(_fake_cuda(p), requires_grad=False)
                for name, b in list(mod._buffers.items()):
                    if b is not None:
                        mod._buffers[name] = _fake_cuda(b)
            xs = [_fake_cuda(x) if isinstance(x, torch.Tensor) else x for x in case.inputs]
            torch.compile(module, backend=backend)(*xs)
    elif mode == "inference":
        with torch.no_grad():
            torch.compile(module, backend=backend)(*case.inputs)
    else:
        torch.compile(module, backend=backend)(*case.inputs, case.labels)
    torch._dynamo.reset()
    return captured


@functools.lru_cache(maxsize=1)
def _cpu_gemv_registry():
    """The default registry with ``decompose_gemv_pass`` accepting CPU linears (training emulation)."""
    from optimus_eq.horizontal import HorizontalPattern, builders
    from optimus_eq.patterns import PatternRegistry

    reg = PatternRegistry()
    for p in DEFAULT_REGISTRY:
        if p.name == "decompose_gemv_pass":
            p = HorizontalPattern(name=p.name, levels=p.levels, doc=p.doc,
                                  group_key=functools.partial(builders.gemv_key, devices=("cpu", "cuda")),
                                  build=builders.build_gemv, options=dict(p.options))
        reg.register(p)
    return reg


def strategy_options(name: str, emulated: bool) -> tuple[str, dict]:
    """``(strategy, optimize keyword options)`` of a strategy name of this script (module doc)."""
    opts: dict = {}
    m = re.fullmatch(r"(.+)-min(\d+)", name)
    if m:
        name, k = m.group(1), int(m.group(2))
        opts["pattern_options"] = {p.name: {"min_fuse_set_size": k} for p in DEFAULT_REGISTRY
                                   if hasattr(p, "group_key") and "pre_grad" in p.levels and (p.options or {}).get("max_fuse_set_size", 2) > 1}
    if name == "eqsat-cudagraph":
        name, opts["cost_model"] = "eqsat", GPUCostModel.cudagraph()
    if emulated:
        opts["registry"] = _cpu_gemv_registry()
    return name, opts


def predict_cell(graphs: list[tuple], strategy: str, mode: str, emulated: bool) -> dict:
    """Optimize every graph with ``strategy`` and predict its CUDA kernels; the row of one cell."""
    name, opts = strategy_options(strategy, emulated)
    total, fired, seconds, costs = None, {}, 0.0, [0.0, 0.0]
    for gm, ex in graphs:
        t0 = time.time()
        if name == "none":
            out = gm
        else:
            out, rep = optimus_eq.optimize(gm, ex, strategy=name, **opts)
            if rep.fallback:
                raise RuntimeError(f"{strategy} fell back: {rep.fallback}")
            for k, v in rep.patterns_fired.items():
                if v and k in {p.name for p in DEFAULT_REGISTRY if hasattr(p, "group_key")}:
                    fired[k] = fired.get(k, 0) + v
            costs[0] += rep.cost_before or 0.0
            costs[1] += rep.cost_after or 0.0
        seconds += time.time() - t0
        p = predict_module(out, ex, "cuda", training=(mode == "train"))
        total = p if total is None else total + p
    return {"strategy": strategy, "kernels": total.kernels, "fused": total.fused, "extern": total.extern,
            "horizontal": fired, "cost_after": round(costs[1], 1), "optimize_s": round(seconds, 1),
            "groups": [" ".join(g) for g in total.groups]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["dhen", "wukong", "dlrm", "interformer", "launch_bound"])
    ap.add_argument("--modes", nargs="+", default=["inference"])
    ap.add_argument("--strategies", nargs="+", default=["greedy", "eqsat"])
    ap.add_argument("--size", default="gpu")
    ap.add_argument("--set", action="append", default=[], help="model.key=int, e.g. launch_bound.branches=128")
    ap.add_argument("--groups", action="store_true", help="print the predicted kernels' node groups")
    ap.add_argument("--json", default=None, help="write the rows to this file")
    a = ap.parse_args(argv)
    rows = []
    for model in a.models:
        overrides = {k.split(".", 1)[1]: int(v) for k, v in (s.split("=") for s in a.set)
                     if k.split(".", 1)[0] == model}
        for mode in a.modes:
            graphs, emulated = capture(model, a.size, mode, overrides)
            for strat in a.strategies:
                try:
                    row = predict_cell(graphs, strat, mode, emulated)
                except Exception as exc:  # one failing cell is reported, the table goes on
                    row = {"strategy": strat, "error": f"{type(exc).__name__}: {exc}"}
                row = {"model": model, "mode": mode, "capture": "cpu" if emulated else "cuda-meta", **row}
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "groups"}), flush=True)
                if a.groups:
                    for g in row.get("groups", ()):
                        print("    ", g[:160])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
