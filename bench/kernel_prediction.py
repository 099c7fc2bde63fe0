"""Predicted against measured kernels per iteration, per bench model, mode and strategy (issue 15, item 1).

Each cell compiles the model with the bench's strategy (``optimus_bench.measure.run_cell``: one compiled
first call checked against eager, then kernels counted with the bench's own profiler counter,
``optimus_eq.kernels.count_kernels``), records every graph handed to Inductor's ``compile_fx`` (after
optimus_eq's rewrite and parameter packing: exactly what Inductor compiles) and predicts its kernels with
:func:`optimus_bridge.inductor_kernels.predict_module` (no Inductor involved). The measured count is split
into kernels inside compiled graphs and ATen ops outside them (the loss seed of ``backward()``, the
optimizer step, AccumulateGrad copies), predicted by :func:`outside_kernels`.

    PYTHONPATH=src:bridge:bench python bench/kernel_prediction.py --device cpu --out DIR \\
        [--models dhen ...] [--modes inference train] [--strategies inductor none greedy eqsat]
        [--phase predict --from-bench BENCH.json PREWARM.tsv ...]

Writes ``DIR/results.json`` after every cell and ``DIR/results.md`` (the error table) at the end.
``--phase predict --device cuda`` on a machine without CUDA re-predicts rows measured on a GPU (the model
traced on CPU, CUDA rules; ``--overlap-scoring off`` for rows measured with torch 2.11, see
:func:`predict_cells`); bench/results/kernel_prediction_h200_2026-12-02/README.md has the command.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

from optimus_bench import measure
from optimus_bench.models import MODELS, build
from optimus_bench.models.base import OPTIMIZERS
from optimus_bench.strategies import resolve
from optimus_bridge.inductor_kernels import predict_module
from optimus_eq import kernels as kernel_counter


#: multi_tensor_apply's launch limits (aten/src/ATen/native/cuda/MultiTensorApply.cuh): tensors per launch by
#: list depth (1..5), blocks per launch, elements per block (chunk)
_MTA_MAX_TENSORS = (110, 64, 48, 36, 30)
_MTA_MAX_BLOCKS, _MTA_CHUNK = 320, 65536


def multi_tensor_launches(numels: list[int], depth: int) -> int:
    """Kernel launches of one CUDA ``multi_tensor_apply`` over tensors of ``numels`` elements with ``depth``
    lists (fused Adam: 4, its ``_foreach_add_`` of the step counts: 1): a launch ends when it holds the
    depth's most tensors or 320 chunks of 65536 elements (a tensor's chunks may spread over launches)."""
    launches, tensors, blocks = 0, 0, 0
    for n in numels:
        if n == 0:
            continue
        tensors += 1
        chunks = -(-n // _MTA_CHUNK)
        for _ in range(chunks):
            blocks += 1
            full_blocks = blocks == _MTA_MAX_BLOCKS
            full_tensors = tensors == _MTA_MAX_TENSORS[depth - 1]
            if full_blocks or full_tensors:
                launches += 1
                blocks = 0
                tensors = 0 if full_tensors else 1  # a tensor cut mid-way starts the next launch
        # the last chunk of a tensor that did not fill a launch stays in the open launch
    return launches + (1 if blocks or tensors else 0)


def outside_kernels(mode: str, optimizer: str, device: str, params: list[int] | None = None) -> int:
    """ATen kernels (and profiler records the counter counts) one iteration runs outside the compiled
    graphs; nothing in inference. Training, CPU: ``backward()``'s seed (``ones_like`` of the loss) and fused
    Adam's step as profiled (``_foreach_add_`` of the step counts, ``_fused_adam_``, ``zeros``). CUDA (the
    H200's kernel lists): two fills (the seed and one more) and, for fused Adam over ``params`` (element
    counts of the trained parameters), the ``Optimizer.step`` record plus :func:`multi_tensor_launches` of
    ``_fused_adam_`` (depth 4) and of the step counts' ``_foreach_add_`` (depth 1). The bench's other
    optimizers are not modelled."""
    if mode != "train":
        return 0
    spec = OPTIMIZERS.get(optimizer)
    fused = spec is not None and spec[1].get("fused")
    if device == "cuda":
        opt = 0
        if fused and params:
            opt = 1 + multi_tensor_launches(params, 4) + multi_tensor_launches([1] * len(params), 1)
        return 2 + opt
    return 1 + (3 if fused else 0)


def _split_counter(device: str):
    """A ``count_kernels`` that also records how many counted CPU events ran inside compiled graphs."""
    last = {}

    def count(step, dev):
        from torch.profiler import ProfilerActivity, profile

        if dev != "cpu":
            return kernel_counter.count_kernels(step, dev)
        with kernel_counter._without_kineto_noise(), profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        events = [e for e in prof.events() if kernel_counter._is_cpu_kernel(e)]
        inside = [e for e in events if e.cpu_parent is not None
                  and e.cpu_parent.name.startswith(kernel_counter._COMPILED_GRAPH)]
        last["inside"] = len(inside)
        last["inside_names"] = sorted(e.name.split("_cpp_fused_")[-1] if "cpp_fused" in e.name else e.name
                                      for e in inside)
        last["outside_names"] = sorted(e.name for e in events if e not in inside)
        return {"kernels": len(events)}
    return count, last


def _recorder(captured: list, compile_too: bool):
    """A stand-in for Inductor's ``compile_fx`` that records ``(graph, example_inputs)`` of each graph
    handed to it (a copy taken before Inductor's own passes change it); with ``compile_too`` it then
    compiles for real (a graph is recorded only when that succeeds), without, it runs the graph as is."""
    import torch._inductor.compile_fx as cfx

    real = cfx.compile_fx

    def compile_fx(gm, example_inputs, *args, **kwargs):
        snapshot = (copy.deepcopy(gm), list(example_inputs))
        if not compile_too:
            captured.append(snapshot)
            return gm.forward
        out = real(gm, example_inputs, *args, **kwargs)
        captured.append(snapshot)
        return out
    return real, compile_fx


def measure_cells(models, modes, strategies, device, size, out: Path, rows: list[dict],
                  budget_s: float | None = None) -> list[dict]:
    """Compile and count every cell (the expensive part): ``measured``, ``measured_inside``, ``status``.
    No new cell starts after ``budget_s`` seconds (a later run with the same ``out`` goes on from there)."""
    start = time.time()
    import torch._inductor.compile_fx as cfx

    captured: list = []
    real, recording = _recorder(captured, True)
    counter, last = _split_counter(device)
    measure.count_kernels = counter
    cfx.compile_fx = recording
    done = {(r["model"], r["mode"], r["strategy"]) for r in rows if r.get("measured") is not None}
    try:
        for model in models:
            for mode in modes:
                todo = [s for s in resolve(strategies) if (model, mode, s.name) not in done]
                if not todo:
                    continue
                case = build(model, size, device=device)
                ref = measure.reference(case, mode)
                for strat in todo:
                    if budget_s is not None and time.time() - start > budget_s:
                        print(f"budget of {budget_s:g} s spent: stopping before {model} {mode} {strat.name}")
                        return rows
                    captured.clear()
                    last.clear()
                    t0 = time.time()
                    res = measure.run_cell(case, mode, strat, device, ref, iters=1, warmup=1, fresh_cache=False)
                    row = {"model": model, "mode": mode, "strategy": strat.name, "status": res["status"],
                           "error": res.get("error"), "measured": res.get("kernels"),
                           "measured_inside": last.get("inside"), "outside_names": last.get("outside_names"),
                           "inside_names": last.get("inside_names"), "graphs": len(captured), "measure_s": round(time.time() - t0, 1)}
                    rows[:] = [r for r in rows if (r["model"], r["mode"], r["strategy"]) != (model, mode, strat.name)]
                    rows.append(row)
                    print(json.dumps({k: v for k, v in row.items() if not k.endswith("_names")}), flush=True)
                    _write(out, device, size, rows)
    finally:
        cfx.compile_fx = real
    return rows


def rows_from_bench(paths: list[Path], strategies: list[str] | None = None) -> list[dict]:
    """Rows of measured kernel counts read from ``optimus-eq bench`` output, for the predict phase.

    ``paths`` in order of preference: a bench JSON (``cells``: model, mode, strategy, status, kernels) or a
    prewarm TSV (tab-separated: model, mode, strategy, status, compile_s, optimizer_s, kernels); a cell takes
    its count from the first file that has it with status ``ok`` and a count. Each row records that file as
    ``source``. ``strategies`` (names) keeps only those. Raises ``ValueError`` on a TSV line of another
    shape."""
    rows: dict[tuple, dict] = {}
    for path in paths:
        if path.suffix == ".json":
            cells = [(c["model"], c["mode"], c["strategy"], c.get("status"), c.get("kernels"))
                     for c in json.loads(path.read_text())["cells"]]
        else:
            cells = []
            for line in path.read_text().splitlines():
                if not line.strip():
                    continue
                f = line.split("\t")
                if len(f) != 7:
                    raise ValueError(f"{path}: expected 7 tab-separated fields, got {len(f)}: {line!r}")
                cells.append((f[0], f[1], f[2], f[3], None if f[6] == "None" else int(f[6])))
        for model, mode, strategy, status, kernels in cells:
            key = (model, mode, strategy)
            if key in rows or status != "ok" or kernels is None:
                continue
            if strategies is not None and strategy not in strategies:
                continue
            rows[key] = {"model": model, "mode": mode, "strategy": strategy, "status": "ok", "error": None,
                         "measured": kernels, "measured_inside": None, "source": str(path)}
    return list(rows.values())


def predict_cells(rows: list[dict], device: str, size: str) -> list[dict]:
    """Predict every measured cell: trace it with the strategy's backend, Inductor's ``compile_fx``
    replaced by a recorder (no kernel compiled), and predict each recorded graph.

    ``device="cuda"`` on a machine without CUDA is emulated: the model is built and traced on CPU (the
    graphs' ops, shapes and strides are the CUDA trace's except where a pass reads the device: ours,
    ``decompose_gemv_pass``, is told to accept CPU as :mod:`cuda_meta` does) and predicted with the CUDA
    rules, so the GPU's measured rows can be re-predicted on the development machine."""
    import torch._inductor.compile_fx as cfx

    emulate = device == "cuda" and not torch.cuda.is_available()
    build_device = "cpu" if emulate else device
    optimus_options = None
    if emulate:
        from cuda_meta import _cpu_gemv_registry

        optimus_options = {"registry": _cpu_gemv_registry()}
    captured: list = []
    real, recording = _recorder(captured, False)
    cfx.compile_fx = recording
    cases: dict = {}
    try:
        for row in rows:
            model, mode = row["model"], row["mode"]
            if (model, mode) not in cases:
                cases = {(model, mode): build(model, size, device=build_device)}
            case = cases[(model, mode)]
            strat = resolve([row["strategy"]])[0]
            captured.clear()
            t0 = time.time()
            try:
                torch._dynamo.reset()
                module = measure._prepare(case, mode)
                fn = strat.compile(module, optimus_options if strat.kind == "optimus_eq" else None)
                step = measure._step_fn(module, fn, case, mode, False)
                step()
                pred = None
                for gm, inputs in captured:
                    p = predict_module(gm, inputs, device, training=(mode == "train"))
                    pred = p if pred is None else pred + p
                if os.environ.get("KP_GROUPS"):
                    for g in pred.groups:
                        print("   group:", " ".join(g))
                row["predicted_graphs"] = len(captured)
                row["predicted_inside"] = pred.kernels if pred else 0
                row["predicted_fused"] = pred.fused if pred else 0
                row["predicted_extern"] = pred.extern if pred else 0
                params = [p.numel() for p in case.model.parameters() if p.requires_grad]
                row["predicted_outside"] = outside_kernels(mode, case.optimizer, device, params)
                row["predicted"] = row["predicted_inside"] + row["predicted_outside"]
                row.pop("predict_error", None)
            except Exception as exc:  # a prediction failure is recorded, the table goes on
                row["predict_error"] = f"{type(exc).__name__}: {exc}"
            finally:
                torch._dynamo.reset()
            if row.get("measured") and row.get("predicted") is not None:
                row["error_pct"] = 100.0 * (row["predicted"] - row["measured"]) / row["measured"]
            row["predict_s"] = round(time.time() - t0, 1)
            print(json.dumps({k: row.get(k) for k in ("model", "mode", "strategy", "measured", "measured_inside",
                                                      "predicted", "error_pct", "predict_error")}), flush=True)
    finally:
        cfx.compile_fx = real
    return rows


def _write(out: Path, device: str, size: str, rows: list[dict]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(_meta(device, size) | {"rows": rows}, indent=1))


def _meta(device: str, size: str) -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = None
    gpu = torch.cuda.get_device_name() if device == "cuda" and torch.cuda.is_available() else None
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "torch": torch.__version__,
            "device": device, "gpu": gpu, "machine": platform.machine(), "size": size, "commit": commit}


def table(rows: list[dict]) -> str:
    """The error table in markdown: one row per cell, the largest absolute error last."""
    lines = ["| model | mode | strategy | measured | inside graphs | predicted | predicted inside (fused + extern) | error |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        err = f"{r['error_pct']:+.1f}%" if "error_pct" in r else (r.get("predict_error") or r.get("error") or "")
        lines.append(f"| {r['model']} | {r['mode']} | {r['strategy']} | {r.get('measured')} | "
                     f"{r.get('measured_inside')} | {r.get('predicted')} | {r.get('predicted_inside')} "
                     f"({r.get('predicted_fused')} + {r.get('predicted_extern')}) | {err} |")
    errs = [abs(r["error_pct"]) for r in rows if "error_pct" in r]
    if errs:
        lines.append("")
        lines.append(f"{len(errs)} cells; max |error| {max(errs):.1f}%, mean {sum(errs) / len(errs):.1f}%, "
                     f"within 10%: {sum(e <= 10 for e in errs)}/{len(errs)}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--size", default="cpu", help="model size preset (cpu or gpu)")
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--modes", nargs="+", default=list(measure.MODES))
    ap.add_argument("--strategies", nargs="+", default=["inductor", "none", "greedy", "eqsat"])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--phase", choices=["both", "measure", "predict"], default="both",
                    help="measure: compile and count (kept in OUT/results.json, cells already there are skipped); "
                         "predict: predict the cells of OUT/results.json again (no Inductor compile)")
    ap.add_argument("--from-bench", nargs="+", type=Path, default=None, metavar="FILE",
                    help="start OUT/results.json from measured counts in optimus-eq bench output (JSON with cells, "
                         "or a prewarm TSV), first file first (see rows_from_bench); then --phase predict")
    ap.add_argument("--budget", type=float, default=None, help="seconds after which no new cell is measured")
    ap.add_argument("--overlap-scoring", choices=["auto", "on", "off"], default="auto",
                    help="model Inductor's buffer-overlap scoring (auto: as the installed Inductor has it; off: "
                         "predicting rows measured with an Inductor without it, e.g. the H200's torch 2.11, on a "
                         "machine with torch 2.13)")
    a = ap.parse_args(argv)
    if a.overlap_scoring != "auto":
        from optimus_bridge import inductor_fusion

        inductor_fusion.OVERLAP_SCORING = a.overlap_scoring == "on"
    path = a.out / "results.json"
    rows = json.loads(path.read_text())["rows"] if path.exists() else []
    if a.from_bench:
        new = [r for r in rows_from_bench(a.from_bench, a.strategies) if r["model"] in a.models and r["mode"] in a.modes]
        keys = {(r["model"], r["mode"], r["strategy"]) for r in new}
        rows = [r for r in rows if (r["model"], r["mode"], r["strategy"]) not in keys] + new
        _write(a.out, a.device, a.size, rows)
    if a.phase in ("both", "measure"):
        measure_cells(a.models, a.modes, a.strategies, a.device, a.size, a.out, rows, a.budget)
    if a.phase in ("both", "predict"):
        keep = [r for r in rows if r["model"] in a.models and r["mode"] in a.modes and r["strategy"] in a.strategies]
        predict_cells(keep, a.device, a.size)
        _write(a.out, a.device, a.size, rows)
        (a.out / "results.md").write_text(table(rows))
        print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
