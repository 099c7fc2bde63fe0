"""Measure the cost model's two constants on a device (``optimus-eq calibrate``).

:class:`optimus_eq.cost.GPUCostModel` prices an e-node as ``kernels * launch_us + bytes / bytes_per_us``
(microseconds). This module measures both constants on the machine at hand and writes them as JSON that
:meth:`GPUCostModel.from_calibration` reads:

* ``bytes_per_us``: per op, a least-squares line ``t = floor_us + bytes / bandwidth``
  (``scipy.stats.linregress``) through the GPU time of the memory-bound ops the model prices (``cat`` of 2
  and of 32 pieces, ``add``, ``relu``, ``layer_norm``) over sizes from 64 KiB to 256 MiB, with bytes
  counted exactly as the model counts them (``Cat``: output written and read once; others: inputs read
  plus output written); ``bytes_per_us`` is the median of the per-op bandwidths. The median, not one line
  through all points, because some ATen kernels run far below what Inductor's generated kernels reach
  (on the H200, ATen's ``layer_norm`` over 256 columns at 1.2 TB/s, a 32-piece ``cat`` at 1.8 TB/s, the
  pointwise ops at 4.1-4.3 TB/s), and a pooled line is pulled down by them. On CUDA each op is timed
  inside a CUDA graph of ``reps`` copies, so the CPU's launch cost is not in it.
* ``launch_us``: the marginal cost of one more kernel in an Inductor-compiled graph run without CUDA
  graphs, the setting the optimizer targets: a compiled function of ``k`` independent row sums of small,
  distinct inputs (one Triton kernel each; counted with torch.profiler) is timed for two ``k``, and the
  slope of time over kernels is the launch cost. Recorded beside it: the same slope for eager ATen ops
  (``launch_us_eager``) and the per-kernel time inside a CUDA-graph replay (``launch_us_cudagraph``).

``matmul`` (``linear``) is timed too, but only to report how far a bytes-only model is from a
FLOP-bound op (its residual); it is not part of the fit.

On CPU the same code runs at small sizes with wall-clock timing and no Inductor compile (``launch_us`` is
then the eager slope): a smoke run, not a calibration.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import torch

ITEMSIZE = 4  # fp32, as the cost model assumes
BANDWIDTH_OPS = ("cat2", "cat32", "add", "relu", "layer_norm")


def _op(name: str, numel: int, device: str) -> tuple[Callable[[], Any], int]:
    """One op over ``numel`` output elements, and the bytes the cost model charges it."""
    cols = 256
    rows = max(1, numel // cols)
    n = rows * cols
    if name.startswith("cat"):
        pieces = int(name[3:])
        w = max(1, cols // pieces)
        xs = [torch.randn(rows, w, device=device) for _ in range(pieces)]
        return (lambda: torch.cat(xs, 1)), 2 * rows * w * pieces * ITEMSIZE
    x = torch.randn(rows, cols, device=device)
    if name == "add":
        y = torch.randn(rows, cols, device=device)
        return (lambda: x + y), 3 * n * ITEMSIZE
    if name == "relu":
        return (lambda: torch.relu(x)), 2 * n * ITEMSIZE
    if name == "layer_norm":
        w, b = torch.ones(cols, device=device), torch.zeros(cols, device=device)
        return (lambda: torch.nn.functional.layer_norm(x, (cols,), w, b)), 2 * n * ITEMSIZE
    if name == "linear":
        wt = torch.randn(cols, cols, device=device)
        return (lambda: x @ wt), (2 * n + cols * cols) * ITEMSIZE
    raise ValueError(f"unknown calibration op {name!r}")


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_gpu_us(fn: Callable[[], Any], device: str, reps: int, trials: int = 5) -> float:
    """Median time (us) of one ``fn()`` with the CPU's launch cost removed where possible.

    CUDA: ``reps`` calls captured in one CUDA graph, replayed ``trials`` times (CUDA events).
    CPU: wall clock of ``reps`` calls.
    """
    if device == "cuda":
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(reps):
                fn()
        g.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(trials):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) * 1e3 / reps)
        return statistics.median(times)
    return time_stream_us(fn, device, reps, trials)


def time_stream_us(fn: Callable[[], Any], device: str, reps: int, trials: int = 5) -> float:
    """Wall time (us) per call of ``reps`` back-to-back calls (CPU launch cost included).

    The median of ``trials`` on CUDA; the fastest on CPU, whose cores other processes share.
    """
    for _ in range(3):
        fn()
    _sync(device)
    times = []
    for _ in range(trials):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        _sync(device)
        times.append((time.perf_counter() - t0) * 1e6 / reps)
    return statistics.median(times) if device == "cuda" else min(times)


def fit_line(xs: list[float], ys: list[float]) -> dict[str, float]:
    """Least-squares ``y = intercept + slope * x`` (scipy.stats.linregress) and its r squared."""
    from scipy.stats import linregress

    r = linregress(xs, ys)
    return {"slope": float(r.slope), "intercept": float(r.intercept), "r2": float(r.rvalue ** 2)}


def bandwidth_samples(device: str, sizes: list[int], ops=BANDWIDTH_OPS + ("linear",), reps: int = 20) -> list[dict]:
    """GPU time of each op at each size: ``[{"op", "numel", "bytes", "us"}]``."""
    out = []
    for name in ops:
        for numel in sizes:
            fn, nbytes = _op(name, numel, device)
            out.append({"op": name, "numel": numel, "bytes": nbytes, "us": time_gpu_us(fn, device, reps)})
    return out


def _row_sums(k: int, device: str, rows: int = 64, cols: int = 64):
    xs = [torch.randn(rows, cols + i, device=device) for i in range(k)]  # distinct shapes: no fusion

    def fn(*ts):
        return [t.sum(-1) for t in ts]

    return fn, xs


def _kernels_per_call(fn: Callable[[], Any]) -> int:
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def launch_samples(device: str, ks: tuple[int, int], reps: int, compile_inductor: bool) -> dict[str, Any]:
    """Per-kernel launch cost (us) as the slope of time over kernels between ``ks[0]`` and ``ks[1]`` sums."""
    res: dict[str, Any] = {}
    eager = []
    for k in ks:
        fn, xs = _row_sums(k, device)
        eager.append(time_stream_us(lambda: fn(*xs), device, reps))
    res["launch_us_eager"] = (eager[1] - eager[0]) / (ks[1] - ks[0])
    if device == "cuda":
        graph = []
        for k in ks:
            fn, xs = _row_sums(k, device)
            graph.append(time_gpu_us(lambda: fn(*xs), device, 1))
        res["launch_us_cudagraph"] = (graph[1] - graph[0]) / (ks[1] - ks[0])
    if compile_inductor:
        times, kernels = [], []
        for k in ks:
            torch._dynamo.reset()
            fn, xs = _row_sums(k, device)
            cfn = torch.compile(fn)
            times.append(time_stream_us(lambda: cfn(*xs), device, reps))
            kernels.append(_kernels_per_call(lambda: cfn(*xs)) if device == "cuda" else k)
        res["inductor_kernels"] = kernels
        res["launch_us_inductor"] = (times[1] - times[0]) / max(1, kernels[1] - kernels[0])
    return res


def calibrate(device: str = "cuda", quick: bool = False) -> dict[str, Any]:
    """Measure ``launch_us`` and ``bytes_per_us`` on ``device``; returns the JSON-able record.

    Raises:
        RuntimeError: ``device="cuda"`` without a CUDA device.
    """
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("calibrate --device cuda: no CUDA device")
    if quick or device == "cpu":
        sizes = [2 ** p for p in range(12, 21, 4)]
        ks, reps = (4, 16), 5
    else:
        sizes = [2 ** p for p in range(14, 27, 2)]  # 16k .. 64M elements: 64 KiB .. 256 MiB per fp32 tensor
        ks, reps = (16, 128), 50
    samples = bandwidth_samples(device, sizes, reps=10 if quick else 20)
    launch = launch_samples(device, ks, reps, compile_inductor=device == "cuda")
    meta = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "torch": torch.__version__}
    return fit_record(samples, launch, meta)


def fit_record(samples: list[dict], launch: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """The calibration record from measured ``samples`` (:func:`bandwidth_samples`) and ``launch``
    (:func:`launch_samples`): the cost model's two constants, the per-op fits and the samples."""
    fits = {}
    for name in BANDWIDTH_OPS + ("linear",):
        pts = [s for s in samples if s["op"] == name]
        fits[name] = fit_line([s["bytes"] for s in pts], [s["us"] for s in pts])
    pooled = [s for s in samples if s["op"] in BANDWIDTH_OPS]
    fit = fit_line([s["bytes"] for s in pooled], [s["us"] for s in pooled])
    bandwidths = [1.0 / fits[k]["slope"] for k in BANDWIDTH_OPS if fits[k]["slope"] > 0]
    launch_us = launch.get("launch_us_inductor", launch["launch_us_eager"])
    record = {
        **meta,
        "launch_us": round(max(launch_us, 0.0), 3),
        "bytes_per_us": round(statistics.median(bandwidths), 1) if bandwidths else None,
        "gpu_floor_us": round(statistics.median(fits[k]["intercept"] for k in BANDWIDTH_OPS), 3),
        "pooled_bytes_per_us": round(1.0 / fit["slope"], 1) if fit["slope"] > 0 else None,
        "pooled_r2": round(fit["r2"], 5),
        **{k: (round(v, 3) if isinstance(v, float) else v) for k, v in launch.items()},
        "per_op": {k: {"bytes_per_us": (round(1 / v["slope"], 1) if v["slope"] > 0 else None),
                       "floor_us": round(v["intercept"], 3), "r2": round(v["r2"], 5)} for k, v in fits.items()},
        "samples": samples,
    }
    record["per_op_error"] = _model_error(samples, record)
    return record


def _model_error(samples: list[dict], record: dict) -> dict[str, float]:
    """Median relative error per op of the fitted bytes term (``floor + bytes / bytes_per_us``)."""
    if not record["bytes_per_us"]:
        return {}
    err: dict[str, list[float]] = {}
    for s in samples:
        pred = record["gpu_floor_us"] + s["bytes"] / record["bytes_per_us"]
        err.setdefault(s["op"], []).append(abs(pred - s["us"]) / s["us"])
    return {k: round(statistics.median(v), 3) for k, v in err.items()}


def summary(record: dict[str, Any]) -> str:
    """A few lines for a terminal or a results README."""
    lines = [f"calibration on {record['device']} (torch {record['torch']}, {record['date']})",
             f"  launch_us    = {record['launch_us']} (marginal Inductor kernel without CUDA graphs; "
             f"eager {record.get('launch_us_eager')}, inside a CUDA graph {record.get('launch_us_cudagraph')})",
             f"  bytes_per_us = {record['bytes_per_us']} (median of the per-op fits over {', '.join(BANDWIDTH_OPS)}; "
             f"one pooled line: {record.get('pooled_bytes_per_us')}, r2 {record.get('pooled_r2')}; "
             f"GPU floor {record['gpu_floor_us']} us)",
             "  per op: " + ", ".join(f"{k} {v['bytes_per_us']} B/us (error {record['per_op_error'].get(k)})"
                                      for k, v in record["per_op"].items())]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.refit:
        old = json.loads(Path(args.refit).read_text())
        launch = {k: v for k, v in old.items() if k.startswith("launch_us_") or k == "inductor_kernels"}
        record = fit_record(old["samples"], launch, {k: old[k] for k in ("date", "device", "torch")})
        record["refit_from"] = {k: old.get(k) for k in ("launch_us", "bytes_per_us", "gpu_floor_us")}
    else:
        record = calibrate(args.device, quick=args.quick)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=1))
    print(summary(record))
    print(f"written: {args.out}")
    return 0

