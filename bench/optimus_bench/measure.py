"""Measure one (model, mode, strategy) cell: compile time, correctness, speed, memory, kernels.

Modes: ``inference`` (the model in eval mode under ``torch.no_grad()``) and ``train`` (one training
step: gradients set to None, forward and loss in the compiled region, then ``loss.backward()``, then
the case's optimizer step, eager, when ``case.optimizer`` is not ``"none"``: ``launch_bound`` defaults
to fused Adam). Outputs and gradients are compared on the first step, before any parameter moved. See :func:`run_cell` for every field of the result.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import statistics
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import optimus_eq
from optimus_bench.models.base import BenchCase, make_optimizer
from optimus_bench.strategies import Strategy
from optimus_eq.kernels import count_kernels

MODES = ("inference", "train")

class TrainStep(nn.Module):
    """``forward(*inputs, labels) -> (loss, output)``: the model and its loss, compiled together."""

    def __init__(self, model: nn.Module, loss_fn: Callable) -> None:
        super().__init__()
        self.model, self.loss_fn = model, loss_fn

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, Any]:
        *inputs, labels = args
        out = self.model(*inputs)
        return self.loss_fn(out, labels), out


def tolerances(dtype: torch.dtype) -> tuple[float, float, float]:
    """``(rtol, atol, rel_l2)`` for comparing a compiled run with eager in ``dtype``.

    A tensor matches when it is elementwise close (``torch.testing.assert_close`` with ``rtol`` and
    ``atol * max(1, max|eager|)``) or, failing that, when its relative L2 error
    ``||x - eager|| / ||eager||`` is at most ``rel_l2``. The elementwise bounds are looser than
    torch.testing's fp32 defaults (1.3e-6, 1e-5) because Inductor reorders reductions and fuses ops;
    the L2 bound covers deep networks whose convolutions run in TF32 on CUDA
    (``torch.backends.cudnn.allow_tf32`` is on by default), where eager and compiled convolutions pick
    different algorithms and single elements of a gradient can differ by more than 1e-3 relative.
    """
    if dtype in (torch.float16, torch.bfloat16):
        return 2e-2, 2e-2, 2e-2
    if dtype == torch.float64:
        return 1e-7, 1e-7, 1e-7
    return 1e-3, 1e-4, 5e-3


def _leaves(x: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(x) if isinstance(t, torch.Tensor)]


def compare(actual: Any, expected: Any, dtype: torch.dtype,
            names: list[str] | None = None) -> tuple[bool, float, float, str | None]:
    """Whether every tensor leaf of ``actual`` matches ``expected`` (see :func:`tolerances`).

    Returns ``(ok, max_abs_diff, max_rel_l2, message)``; the message names the first tensor that fails
    (by ``names[i]`` when given, else "tensor i").
    """
    a, e = _leaves(actual), _leaves(expected)
    if len(a) != len(e):
        return False, float("nan"), float("nan"), f"{len(a)} tensors, eager has {len(e)}"
    rtol, atol, rel_l2 = tolerances(dtype)
    worst, worst_rel, msg = 0.0, 0.0, None
    for i, (x, y) in enumerate(zip(a, e)):
        what = names[i] if names and i < len(names) else f"tensor {i}"
        if x.shape != y.shape or x.dtype != y.dtype:
            return False, float("nan"), float("nan"), (f"{what}: {tuple(x.shape)} {x.dtype} vs eager "
                                                       f"{tuple(y.shape)} {y.dtype}")
        if x.numel() == 0 or not (x.is_floating_point() or x.is_complex()):
            if not torch.equal(x, y):
                msg = msg or f"{what}: integer values differ"
            continue
        xd, yd = x.detach().double(), y.detach().double()
        diff = float((xd - yd).abs().max())
        rel = float((xd - yd).norm() / yd.norm().clamp_min(1e-30))
        worst, worst_rel = max(worst, diff), max(worst_rel, rel)
        try:
            torch.testing.assert_close(x.detach(), y.detach(), rtol=rtol, atol=atol * max(1.0, float(yd.abs().max())),
                                       equal_nan=True)
        except AssertionError as exc:
            if not rel <= rel_l2:
                lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
                msg = msg or f"{what} {tuple(x.shape)}: relative L2 error {rel:.1e}; " + "; ".join(lines[:4])
    return msg is None, worst, worst_rel, msg


def _clone_out(x: Any) -> Any:
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, x)


def _grads(module: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in module.named_parameters() if p.grad is not None}


def _step_fn(module: nn.Module, fn: Callable, case: BenchCase, mode: str, cudagraphs: bool) -> Callable[[], Any]:
    """One iteration of ``fn`` (the compiled module): inference, or forward+loss then backward."""
    inputs = case.inputs
    mark = torch.compiler.cudagraph_mark_step_begin if cudagraphs else (lambda: None)
    if mode == "inference":
        def step():
            mark()
            with torch.no_grad():
                return fn(*inputs)
        return step
    params = [p for p in module.parameters() if p.requires_grad]
    optimizer = make_optimizer(case.optimizer, params)

    def train_step():
        mark()
        for p in params:  # zero_grad(set_to_none=True)
            p.grad = None
        loss, out = fn(*inputs, case.labels)
        loss.backward()
        if optimizer is not None:
            optimizer.step()
        return loss, out
    return train_step


def _prepare(case: BenchCase, mode: str) -> nn.Module:
    """A fresh copy of the case's model, in the mode's train/eval state (wrapped with its loss for train)."""
    model = copy.deepcopy(case.model)
    if mode == "inference":
        return model.eval()
    return TrainStep(model.train(), case.loss_fn)


@contextlib.contextmanager
def exact_float32():
    """TF32 off for cuDNN convolutions and cuBLAS matmuls while the compared iteration runs.

    The eager reference and every cell's first (compared) call run under it, so a comparison measures
    the compiler's error, not the difference between two TF32 algorithm choices (which, through the 50
    BatchNorm layers of a training step, reaches a relative L2 error of 6e-3 on ResNeXt-50 for plain
    Inductor). Timed iterations run with PyTorch's defaults.
    """
    flags = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = flags


def reference(case: BenchCase, mode: str) -> dict[str, Any]:
    """Eager results of one iteration: ``{"out": ..., "grads": {param: grad}}`` (grads for train only),
    computed under :func:`exact_float32`."""
    module = _prepare(case, mode)
    with exact_float32():
        out = _step_fn(module, module, case, mode, False)()
    return {"out": _clone_out(out), "grads": _grads(module) if mode == "train" else {}}


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _metric_totals(name: str) -> float | None:
    """Seconds recorded so far under ``name`` in Dynamo's compile-time metrics (``None`` if absent)."""
    try:
        from torch._dynamo.utils import compilation_time_metrics
    except ImportError:
        return None
    return float(sum(compilation_time_metrics.get(name, []) or [0.0]))


_COUNTER_NOISE = ("fxgraph_", "aot_autograd_", "async_compile", "autotune")


def _inductor_counters() -> dict[str, int]:
    """``counters["inductor"]`` now: Inductor's own passes, the built-in Optimus passes (one count per
    rewrite, under their option names, e.g. ``batch_linear``, ``scmerge_split_removed``) and more."""
    from torch._dynamo.utils import counters

    return {k: int(v) for k, v in counters["inductor"].items()}


def _cudagraph_skips() -> int:
    """Graphs Inductor has compiled without CUDA graphs so far (``counters["inductor"]["cudagraph_skips"]``;
    run with ``TORCH_LOGS=cudagraphs`` for the reasons)."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"].get("cudagraph_skips", 0))


def _sum_or_none(values) -> float | None:
    values = list(values)
    return None if not values or any(v is None for v in values) else float(sum(values))


def _reports_summary(reports: list) -> dict[str, Any]:
    """optimus_eq's reports of this cell's graphs, folded into the result's fields."""
    if not reports:
        return {}
    fired: dict[str, int] = {}
    matches: dict[str, int] = {}
    for r in reports:
        for k, v in r.patterns_fired.items():
            fired[k] = fired.get(k, 0) + int(v)
        for k, v in getattr(r, "rule_matches", {}).items():
            matches[k] = matches.get(k, 0) + int(v)
    fallbacks = [r.fallback for r in reports if r.fallback]
    return {
        "graphs": len(reports),
        "optimizer_s": sum(r.times.get("total", 0.0) for r in reports),
        "optimizer_phases_s": {k: sum(r.times.get(k, 0.0) for r in reports)
                               for k in ("translate", "search", "extract", "lower")},
        "egraph_nodes": sum(r.egraph_nodes for r in reports),
        "egraph_classes": sum(r.egraph_classes for r in reports),
        "iterations": sum(r.iterations for r in reports),
        "stop_reasons": sorted({r.stop_reason for r in reports if r.stop_reason}),
        "fx_nodes_before": sum(r.nodes_before for r in reports),
        "fx_nodes_after": sum(r.nodes_after for r in reports),
        # the cost model's estimates (us) of the graphs before and after, summed over the cell's graphs;
        # None when a graph fell back or had nothing to estimate (compare with the measured ms)
        "cost_before_us": _sum_or_none(r.cost_before for r in reports),
        "cost_after_us": _sum_or_none(r.cost_after for r in reports),
        # which cost model priced them (execution mode, constants, "training" when the backward was priced)
        "cost_models": sorted({r.cost_model for r in reports if r.cost_model}),
        # rewrites the plan uses (comparable across strategies; results before 2026-12-02 hold egglog matches
        # here), and egglog's rule matches summed over iterations
        "patterns_fired": fired,
        "rule_matches": matches,
        "fallback": "; ".join(fallbacks) or None,
    }


def run_cell(case: BenchCase, mode: str, strategy: Strategy, device: str, ref: dict[str, Any], *,
             iters: int = 20, warmup: int = 3, fresh_cache: bool = True, optimus_options: dict | None = None,
             log: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Compile ``case.model`` with ``strategy``, check it against ``ref`` and measure it.

    Args:
        case: the model and its inputs (on ``device``); left untouched (a deep copy is compiled).
        mode: ``"inference"`` or ``"train"``.
        strategy: how to compile.
        device: ``"cpu"`` or ``"cuda"``.
        ref: :func:`reference` of the same case and mode.
        iters, warmup: timed and untimed iterations after the first call.
        fresh_cache: compile into an empty Inductor cache, so compile_s is a cold compile and no cell
            reuses another's kernels.
        optimus_options: extra keyword arguments of ``optimus_eq.backend`` for our strategies
            (e.g. ``cost_model``).

    Returns a dict with ``status`` (``"ok"``, ``"mismatch"`` or ``"error"``), ``error`` (text or None),
    ``compile_s`` (first call: Dynamo, optimizer, AOTAutograd, Inductor and one run, seconds),
    ``optimizer_s`` (optimus_eq's share), ``inductor_s`` (Inductor's ``compile_fx_inner``: lowering,
    codegen, kernel compilation of forward and backward graphs), ``other_compile_s`` (the rest),
    ``ms`` (median ms per iteration), ``ms_min``, ``examples_per_s``, ``peak_mem_mib`` (CUDA only:
    peak allocated during the timed iterations), ``kernels`` (and ``launches`` on CUDA), ``outputs_match``,
    ``grads_match`` (train), ``max_abs_diff``, ``max_rel_l2``, ``mismatch`` (text), ``cudagraph_skips``
    (CUDA-graph strategies: graphs that Inductor compiled without CUDA graphs), ``inductor_counters`` (what
    ``counters["inductor"]`` gained during the compile: which built-in Optimus passes fired, and how often), and the optimizer's report fields
    (``egraph_nodes``, ``egraph_classes``, ``iterations``, ``stop_reasons``, ``patterns_fired``,
    ``fx_nodes_before``/``fx_nodes_after``, ``cost_before_us``/``cost_after_us`` (the cost model's
    estimates), ``graphs``, ``fallback``).
    """
    import torch._inductor.config as inductor_config
    import torch._inductor.utils as inductor_utils

    res: dict[str, Any] = {"status": "error", "error": None}
    torch._dynamo.reset()
    optimus_eq.last_reports.clear()
    module = _prepare(case, mode)
    cache = inductor_utils.fresh_cache() if (fresh_cache and strategy.compiles) else contextlib.nullcontext()
    patches = {"cpp.enable_kernel_profile": True} if device == "cpu" else {}
    try:
        with cache, inductor_config.patch(patches):
            fn = strategy.compile(module, optimus_options)
            step = _step_fn(module, fn, case, mode, strategy.cudagraphs and device == "cuda")
            inductor_before = _metric_totals("compile_fx_inner")
            skips_before = _cudagraph_skips()
            counters_before = _inductor_counters()
            log(f"first call ({'compile' if strategy.compiles else 'eager'}) ...")
            t0 = time.perf_counter()
            with exact_float32():
                out = step()
                _sync(device)
            res["compile_s"] = time.perf_counter() - t0 if strategy.compiles else None
            out = _clone_out(out)
            grads = _grads(module) if mode == "train" else {}
            inductor_after = _metric_totals("compile_fx_inner")
            if strategy.compiles and inductor_before is not None:
                res["inductor_s"] = inductor_after - inductor_before
            res.update(_reports_summary(list(optimus_eq.last_reports)))
            if strategy.cudagraphs:
                res["cudagraph_skips"] = _cudagraph_skips() - skips_before
            if strategy.compiles:
                after = _inductor_counters()
                res["inductor_counters"] = {k: v - counters_before.get(k, 0) for k, v in sorted(after.items())
                                            if v != counters_before.get(k, 0)
                                            and not k.startswith(_COUNTER_NOISE)}
            if strategy.compiles:
                res["other_compile_s"] = max(0.0, res["compile_s"] - res.get("optimizer_s", 0.0)
                                             - (res.get("inductor_s") or 0.0))

            ok, diff, rel, msg = compare(out, ref["out"], case.dtype,
                                         ["loss", "output"] if mode == "train" else None)
            res["outputs_match"], res["max_abs_diff"], res["max_rel_l2"] = ok, diff, rel
            if mode == "train":
                names = sorted(ref["grads"])
                if set(grads) != set(names):
                    gok, gdiff, grel = False, float("nan"), float("nan")
                    gmsg = f"gradients of {sorted(set(grads) ^ set(names))[:5]} present in one run only"
                else:
                    gok, gdiff, grel, gmsg = compare([grads[n] for n in names], [ref["grads"][n] for n in names],
                                                     case.dtype, [f"grad of {n}" for n in names])
                res["grads_match"], res["max_grad_diff"], res["max_grad_rel_l2"] = gok, gdiff, grel
                msg = msg or gmsg
            res["mismatch"] = msg

            log(f"timing {warmup} warmup + {iters} iterations ...")
            for _ in range(warmup):
                step()
            _sync(device)
            if device == "cuda":
                # compiled graphs hold reference cycles (GraphModule <-> Graph <-> Node): without a collection
                # an earlier cell's model copy can still be allocated and inflate this cell's peak
                gc.collect()
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            samples = []
            for _ in range(iters):
                t0 = time.perf_counter()
                step()
                _sync(device)
                samples.append((time.perf_counter() - t0) * 1e3)
            res["ms"] = statistics.median(samples)
            res["ms_min"] = min(samples)
            res["examples_per_s"] = case.batch_size / (res["ms"] / 1e3)
            if device == "cuda":
                res["peak_mem_mib"] = torch.cuda.max_memory_allocated() / 2**20
            res.update(count_kernels(step, device))
        res["status"] = "ok" if res["outputs_match"] and res.get("grads_match", True) else "mismatch"
    except Exception as exc:  # one failing cell is recorded and the matrix goes on
        res["error"] = f"{type(exc).__name__}: {exc}"
        res["traceback"] = traceback.format_exc(limit=8)
        if not res.get("graphs"):
            res.update(_reports_summary(list(optimus_eq.last_reports)))
    finally:
        torch._dynamo.reset()
        del module
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
    return res
