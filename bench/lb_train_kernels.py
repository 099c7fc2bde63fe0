"""Kernels of one launch_bound training step split into forward, backward and optimizer (issue 12).

Two phases:

* ``--phase predict`` (any machine; CUDA emulated on a CPU-only one): each strategy's backend runs with
  Inductor's ``compile_fx`` replaced by a recorder, and each recorded graph's AOTAutograd forward and backward
  are predicted separately (:func:`optimus_bridge.inductor_kernels.predict`, CUDA rules, as
  ``bench/kernel_prediction.py --phase predict --device cuda`` does); the kernels outside the compiled graphs
  (``backward()``'s seed and one more fill, fused Adam) come from
  :func:`kernel_prediction.outside_kernels`. ``--groups`` prints each predicted kernel's FX nodes.
* ``--phase measure`` (CUDA): the strategy compiled for real; after warm-up one step is profiled as three
  pieces, each synchronised and counted alone with the bench's counter
  (:func:`optimus_eq.kernels.count_kernels`): forward + loss, ``loss.backward()``, ``optimizer.step()``;
  kernel names per piece with ``--names``. The first call is checked against eager (outputs and every
  gradient, ``optimus_bench.measure.compare``).

    PYTHONPATH=src:bridge:bench python bench/lb_train_kernels.py --phase predict --device cuda \\
        --set branches=128 --set batch=512 --strategies greedy eqsat [--groups] [--json FILE]

Prints one JSON line per strategy: ``forward``, ``backward``, ``fwd_bwd`` (the two plus the two fills that
``backward()`` launches outside the compiled graphs: the figure issue 12 bounds by 30), ``optimizer`` and
``step`` (the whole iteration, as the bench counts it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter

import torch

from kernel_prediction import _recorder, outside_kernels
from optimus_bench import measure
from optimus_bench.models import build
from optimus_bench.strategies import resolve
from optimus_eq import kernels as kernel_counter

#: fills ``backward()`` launches on CUDA outside the compiled graphs (the seed ``ones_like`` and one more:
#: the H200's lists, bench/results/h200_2026-12-02b/lb128_fwbw_kernels.txt)
BACKWARD_FILLS = 2


def _overrides(sets: list[str]) -> dict:
    out = {}
    for s in sets:
        k, v = s.split("=", 1)
        out[k.split(".", 1)[-1]] = v if k.endswith("optimizer") else int(v)
    return out


def predict_phase(strategies: list[str], device: str, size: str, overrides: dict, groups: bool) -> list[dict]:
    """One row per strategy (module doc), predicted without compiling."""
    import torch._inductor.compile_fx as cfx

    from optimus_bridge.inductor_kernels import aten_graphs, predict

    emulate = device == "cuda" and not torch.cuda.is_available()
    opts = None
    if emulate:
        from cuda_meta import _cpu_gemv_registry

        opts = {"registry": _cpu_gemv_registry()}
    case = build("launch_bound", size, device="cpu" if emulate else device, overrides=overrides)
    params = [p.numel() for p in case.model.parameters() if p.requires_grad]
    rows = []
    for name in strategies:
        strat = resolve([name])[0]
        captured: list = []
        real, recording = _recorder(captured, False)
        cfx.compile_fx = recording
        t0 = time.time()
        try:
            torch._dynamo.reset()
            module = measure._prepare(case, "train")
            fn = strat.compile(module, opts if strat.kind == "optimus_eq" else None)
            measure._step_fn(module, fn, case, "train", False)()
        finally:
            cfx.compile_fx = real
        row = {"strategy": name, "forward": 0, "backward": 0, "graphs": len(captured), "s": 0.0}
        listing = []
        for gm, inputs in captured:
            for part, g in zip(("forward", "backward"), aten_graphs(gm, inputs, True, device)):
                p = predict(g, device)
                row[part] += p.kernels
                listing += [(part, " ".join(gr)) for gr in p.groups]
                listing += [(part, f"extern x{p.extern}")] if p.extern else []
        torch._dynamo.reset()
        fills = BACKWARD_FILLS if device == "cuda" else 1  # CPU: the seed only (outside_kernels)
        optimizer = outside_kernels("train", case.optimizer, device, params) - fills
        row["fwd_bwd"] = row["forward"] + row["backward"] + fills
        row["optimizer"] = optimizer
        row["step"] = row["fwd_bwd"] + optimizer
        row["s"] = round(time.time() - t0, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
        if groups:
            for part, g in listing:
                print(f"    {part:8s} {g[:200]}")
    return rows


def _names(fn, device: str) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with kernel_counter._without_kineto_noise(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def measure_phase(strategies: list[str], size: str, overrides: dict, names: bool, warmup: int,
                  device: str = "cuda") -> list[dict]:
    """One row per strategy measured on ``device`` (module doc; on ``cpu`` the counter's CPU kernels: Inductor's
    C++ kernels, compiled with ``cpp.enable_kernel_profile`` as the bench does, and the ATen ops)."""
    from optimus_bench.models.base import make_optimizer

    case = build("launch_bound", size, device=device, overrides=overrides)
    ref = measure.reference(case, "train")
    rows = []
    for name in strategies:
        strat = resolve([name])[0]
        torch._dynamo.reset()
        module = measure._prepare(case, "train")
        fn = strat.compile(module, None)
        params = [p for p in module.parameters() if p.requires_grad]
        opt = make_optimizer(case.optimizer, params)
        state: dict = {}

        def fwd():
            for p in params:
                p.grad = None
            state["loss"], state["out"] = fn(*case.inputs, case.labels)

        def bwd():
            state["loss"].backward()

        t0 = time.time()
        with measure._compile_context(strat, device, False), measure.exact_float32():
            fwd()  # compiles (on CPU with cpp.enable_kernel_profile, so the counter sees Inductor's kernels)
            bwd()
        measure._sync(device)
        first = time.time() - t0
        ok, d, _, msg = measure.compare(measure._clone_out((state["loss"], state["out"])), ref["out"], case.dtype,
                                        ["loss", "output"])
        grads, gnames = measure._grads(module), sorted(ref["grads"])
        if set(grads) != set(gnames):
            gok, gmsg = False, "gradient sets differ"
        else:
            gok, _, _, gmsg = measure.compare([grads[n] for n in gnames], [ref["grads"][n] for n in gnames],
                                              case.dtype, gnames)
        if opt is not None:
            opt.step()
        for _ in range(warmup):
            fwd()
            bwd()
            if opt is not None:
                opt.step()
        row = {"strategy": name, "first_call_s": round(first, 1), "outputs_match": ok, "grads_match": gok,
               "mismatch": msg or gmsg}
        pieces = [("forward", fwd), ("backward", bwd)] + ([("optimizer", opt.step)] if opt is not None else [])
        listing = {}
        for part, f in pieces:
            row[part] = kernel_counter.count_kernels(f, device)["kernels"]
            if names and device == "cuda":
                fwd() if part == "backward" else None
                listing[part] = _names(f, "cuda")
        row["fwd_bwd"] = row["forward"] + row["backward"]
        row["step"] = row["fwd_bwd"] + row.get("optimizer", 0)
        rows.append(row)
        print(json.dumps(row), flush=True)
        for part, ks in listing.items():
            for k, c in Counter(ks).items():
                print(f"    {part:9s} {c:3d}  {k[:150]}")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phase", choices=["predict", "measure"], default="predict")
    ap.add_argument("--device", default="cuda", choices=["cpu", "cuda"],
                    help="predict: the rules' device; measure: where it runs")
    ap.add_argument("--size", default="gpu")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="e.g. branches=128")
    ap.add_argument("--strategies", nargs="+", default=["greedy", "eqsat"])
    ap.add_argument("--groups", action="store_true", help="predict: print each kernel's FX nodes")
    ap.add_argument("--names", action="store_true", help="measure: print the kernel names per piece")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--overlap-scoring", choices=["auto", "on", "off"], default="off",
                    help="predict: off models the H200's torch 2.11 (see kernel_prediction.py)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    if a.overlap_scoring != "auto":
        from optimus_bridge import inductor_fusion

        inductor_fusion.OVERLAP_SCORING = a.overlap_scoring == "on"
    ov = _overrides(a.set)
    if a.phase == "predict":
        rows = predict_phase(a.strategies, a.device, a.size, ov, a.groups)
    else:
        rows = measure_phase(a.strategies, a.size, ov, a.names, a.warmup, a.device)
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"overrides": ov, "phase": a.phase, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
