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
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
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


def _metric_snapshot() -> dict[str, float]:
    """Seconds recorded so far per name in Dynamo's compile-time metrics (``compilation_time_metrics``: Dynamo's
    tracing, AOTAutograd, Inductor's lowering, scheduling, code generation and ``async_compile.wait``, the wait
    for its Triton/C++ compile workers), ``{}`` where torch has none."""
    try:
        from torch._dynamo.utils import compilation_time_metrics
    except ImportError:
        return {}
    return {k: float(sum(v or [0.0])) for k, v in compilation_time_metrics.items()}


def _generated_kernels() -> int | None:
    """Kernels Inductor has generated so far in this process (``torch._inductor.metrics.generated_kernel_count``)."""
    try:
        from torch._inductor import metrics
    except ImportError:
        return None
    return getattr(metrics, "generated_kernel_count", None)


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


@contextlib.contextmanager
def _compile_context(strategy: Strategy, device: str, fresh_cache: bool):
    """The Inductor cache (an empty one per cell with ``fresh_cache``) and config a cell compiles under."""
    import torch._inductor.config as inductor_config
    import torch._inductor.utils as inductor_utils

    cache = inductor_utils.fresh_cache() if (fresh_cache and strategy.compiles) else contextlib.nullcontext()
    patches = {"cpp.enable_kernel_profile": True} if device == "cpu" else {}
    with cache, inductor_config.patch(patches):
        yield


@contextlib.contextmanager
def _gc_pauses():
    """Yield a list that gets ``(generation, seconds)`` for every cyclic garbage collection until the block
    ends, whichever thread triggered it (``gc.callbacks``)."""
    pauses: list[tuple[int, float]] = []
    started: dict[int, float] = {}

    def callback(phase: str, info: dict) -> None:
        key = threading.get_ident()
        if phase == "start":
            started[key] = time.perf_counter()
        elif key in started:
            pauses.append((info["generation"], time.perf_counter() - started.pop(key)))

    gc.callbacks.append(callback)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(callback)


def _compile_and_check(res: dict[str, Any], case: BenchCase, mode: str, strategy: Strategy, device: str,
                       ref: dict[str, Any], module: nn.Module, optimus_options: dict | None,
                       log: Callable[[str], None]) -> Callable[[], Any]:
    """Compile ``module``, run the first (compared) call, fill ``res``'s compile and check fields; return the step."""
    fn = strategy.compile(module, optimus_options)
    step = _step_fn(module, fn, case, mode, strategy.cudagraphs and device == "cuda")
    phases_before, kernels_before = _metric_snapshot(), _generated_kernels()
    skips_before = _cudagraph_skips()
    counters_before = _inductor_counters()
    log(f"first call ({'compile' if strategy.compiles else 'eager'}) ...")
    t0 = time.perf_counter()
    with exact_float32(), _gc_pauses() as pauses:
        out = step()
        _sync(device)
    res["compile_s"] = time.perf_counter() - t0 if strategy.compiles else None
    out = _clone_out(out)
    grads = _grads(module) if mode == "train" else {}
    if strategy.compiles:
        phases_after = _metric_snapshot()
        res["inductor_s"] = phases_after.get("compile_fx_inner", 0.0) - phases_before.get("compile_fx_inner", 0.0)
        # where the first call's compile went, per Dynamo compile-time metric (seconds; nested names overlap)
        res["compile_phases"] = {k: round(v - phases_before.get(k, 0.0), 4) for k, v in phases_after.items()
                                 if v - phases_before.get(k, 0.0) >= 0.001}
        # the cyclic garbage collector's pauses in the first call (any thread), all and full (generation 2)
        res["compile_phases"]["gc (all)"] = round(sum(s for _g, s in pauses), 4)
        res["compile_phases"]["gc (full)"] = round(sum(s for g, s in pauses if g == 2), 4)
        kernels_after = _generated_kernels()
        if kernels_before is not None and kernels_after is not None:
            res["kernels_generated"] = kernels_after - kernels_before
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
    return step


def _status(res: dict[str, Any]) -> str:
    return "ok" if res["outputs_match"] and res.get("grads_match", True) else "mismatch"


def _record_error(res: dict[str, Any], exc: BaseException) -> None:
    res["status"] = "error"
    res["error"] = f"{type(exc).__name__}: {exc}"
    res["traceback"] = traceback.format_exc(limit=8)
    if not res.get("graphs"):
        res.update(_reports_summary(list(optimus_eq.last_reports)))


def time_iterations(step: Callable[[], Any], device: str, iters: int) -> list[float]:
    """``iters`` calls of ``step``, each synchronized; their wall times in ms."""
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        _sync(device)
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples


def timing_fields(samples_by_round: list[list[float]], batch_size: int, rounds: bool) -> dict[str, Any]:
    """The result's timing fields from the timed iterations of each round (ms).

    ``ms`` is the median and ``ms_min`` the fastest of all iterations of all rounds; ``examples_per_s`` =
    batch / ``ms``. With ``rounds`` (``--rounds`` > 1) also ``ms_rounds`` (each round's median) and
    ``ms_spread`` (largest / smallest round median; 1.0 = the rounds agree).
    """
    samples = [s for r in samples_by_round for s in r]
    out: dict[str, Any] = {"ms": statistics.median(samples), "ms_min": min(samples)}
    out["examples_per_s"] = batch_size / (out["ms"] / 1e3)
    if rounds:
        out["ms_rounds"] = [statistics.median(r) for r in samples_by_round]
        out["ms_spread"] = max(out["ms_rounds"]) / min(out["ms_rounds"])
    return out


def run_cell(case: BenchCase, mode: str, strategy: Strategy, device: str, ref: dict[str, Any], *,
             iters: int = 20, warmup: int = 3, fresh_cache: bool = True, optimus_options: dict | None = None,
             log: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Compile ``case.model`` with ``strategy``, check it against ``ref`` and measure it, alone (``--rounds 1``;
    :func:`prepare_cell` and :func:`run_rounds` time the cells of a row side by side).

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
    ``compile_phases`` (the first call's seconds per Dynamo compile-time metric, e.g. ``GraphLowering.run``,
    ``Scheduler.__init__``, ``async_compile.wait``; nested names overlap; ``gc (all)`` and ``gc (full)``: the
    cyclic garbage collector's pauses, all generations and generation 2), ``kernels_generated`` (kernels
    Inductor generated in the first call),
    ``ms`` (median ms per iteration), ``ms_min``, ``examples_per_s``, ``peak_mem_mib`` (CUDA only:
    peak allocated during the timed iterations), ``kernels`` (and ``launches`` on CUDA), ``outputs_match``,
    ``grads_match`` (train), ``max_abs_diff``, ``max_rel_l2``, ``mismatch`` (text), ``cudagraph_skips``
    (CUDA-graph strategies: graphs that Inductor compiled without CUDA graphs), ``inductor_counters`` (what
    ``counters["inductor"]`` gained during the compile: which built-in Optimus passes fired, and how often), and the optimizer's report fields
    (``egraph_nodes``, ``egraph_classes``, ``iterations``, ``stop_reasons``, ``patterns_fired``,
    ``fx_nodes_before``/``fx_nodes_after``, ``cost_before_us``/``cost_after_us`` (the cost model's
    estimates), ``graphs``, ``fallback``).
    """
    res: dict[str, Any] = {"status": "error", "error": None}
    torch._dynamo.reset()
    optimus_eq.last_reports.clear()
    module = _prepare(case, mode)
    try:
        with _compile_context(strategy, device, fresh_cache):
            step = _compile_and_check(res, case, mode, strategy, device, ref, module, optimus_options, log)
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
            res.update(timing_fields([time_iterations(step, device, iters)], case.batch_size, rounds=False))
            if device == "cuda":
                res["peak_mem_mib"] = torch.cuda.max_memory_allocated() / 2**20
            res.update(count_kernels(step, device))
        res["status"] = _status(res)
    except Exception as exc:  # one failing cell is recorded and the matrix goes on
        _record_error(res, exc)
    finally:
        torch._dynamo.reset()
        del module
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
    return res


# ---- rounds: the cells of one (model, mode) row compiled first, then timed side by side ----

def _allocated(device: str) -> int:
    return torch.cuda.memory_allocated() if device == "cuda" else 0


def _frames_compiled() -> int:
    """Frames Dynamo has tried to compile so far (a cache miss each): a rise while timing is a recompile."""
    from torch._dynamo.utils import counters

    return int(counters["frames"]["total"])


@dataclass
class LiveCell:
    """A compiled and checked cell kept ready to run, for :func:`run_rounds`.

    Attributes:
        name: the strategy's name.
        res: the cell's result so far (compile and check fields); :func:`run_rounds` adds the timing fields.
        step: one iteration (the compiled callable with its model copy, optimizer and inputs); ``None`` once
            the cell failed or was released.
        module: the compiled model copy (held so that :func:`release` frees it).
        batch_size: examples per iteration.
        samples: the timed iterations of each round, ms.
        positions: the cell's place in each round's order (0 = timed first).
        footprint: CUDA bytes this cell holds between its iterations (model copy, gradients, optimizer state,
            CUDA-graph pools), measured when it was compiled and warmed up.
        peak: CUDA: ``max_memory_allocated`` during its timed iterations of round 0 less the other live
            cells' footprints, bytes.
    """

    name: str
    res: dict[str, Any]
    step: Callable[[], Any] | None
    module: nn.Module | None
    batch_size: int
    samples: list[list[float]] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    footprint: int = 0
    peak: int | None = None


def reset_compiler(device: str) -> None:
    """Drop every Dynamo cache entry (and CUDA-graph tree) and collect: the start and end of a row in rounds."""
    torch._dynamo.reset()
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


@contextlib.contextmanager
def row_of_compiled(cells: int):
    """Dynamo's recompile limit raised for a row of ``cells`` compiled strategies that stay alive together.

    Every strategy of a row compiles the same ``forward`` code objects with its own backend, and each
    compile is one more cache entry on them; at Dynamo's default limit (8) the ninth strategy would run
    eagerly. The limit is multiplied by the number of cells, so each keeps the budget it has alone.
    """
    cfg = torch._dynamo.config
    name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
    limit = getattr(cfg, name)
    acc = "accumulated_recompile_limit" if hasattr(cfg, "accumulated_recompile_limit") else \
        "accumulated_cache_size_limit"
    with cfg.patch(**{name: limit * max(1, cells), acc: max(getattr(cfg, acc), limit * max(1, cells))}):
        yield


def prepare_cell(case: BenchCase, mode: str, strategy: Strategy, device: str, ref: dict[str, Any], *,
                 fresh_cache: bool = True, optimus_options: dict | None = None,
                 log: Callable[[str], None] = lambda _m: None) -> tuple[dict[str, Any], LiveCell | None]:
    """Compile and check one cell as :func:`run_cell` does, but time nothing: keep its step alive.

    Dynamo is not reset (the row's earlier cells stay compiled; call :func:`reset_compiler` around the row,
    and compile the row inside :func:`row_of_compiled`). Returns ``(res, live)``: ``res`` has the compile and
    check fields and ``status`` ``"ok"``, ``"mismatch"`` or ``"error"``; ``live`` is ``None`` when the cell
    raised (``res`` then holds the error).
    """
    res: dict[str, Any] = {"status": "error", "error": None}
    optimus_eq.last_reports.clear()
    gc.collect()
    before = _allocated(device)
    module = _prepare(case, mode)
    try:
        with _compile_context(strategy, device, fresh_cache):
            step = _compile_and_check(res, case, mode, strategy, device, ref, module, optimus_options, log)
        res["status"] = _status(res)
    except Exception as exc:  # one failing cell is recorded and the row goes on
        _record_error(res, exc)
        del module
        gc.collect()
        return res, None
    _sync(device)
    gc.collect()
    return res, LiveCell(strategy.name, res, step, module, case.batch_size, footprint=_allocated(device) - before)


def run_rounds(cells: list[LiveCell], rounds: int, *, iters: int, warmup: int, device: str,
               log: Callable[[str], None] = lambda _m: None) -> None:
    """Time the live cells of one row side by side, ``rounds`` times, then count their kernels.

    Round ``k`` (from 0) runs the cells in the order of ``cells`` rotated to start at cell ``k mod n``, so
    drift (clocks, host load, leftover compile workers) falls on every strategy alike. In round 0 each cell
    first runs ``warmup`` untimed iterations; in later rounds one untimed iteration (the first call after
    another cell ran pays cold caches and Dynamo's lookup past the other cells' cache entries). Then
    ``iters`` timed iterations, each synchronized. Afterwards each cell's ``res`` gets
    :func:`timing_fields` (``ms`` = median of all its timed iterations of all rounds, ``ms_rounds``,
    ``ms_spread``), ``round_positions``, ``peak_mem_mib`` (CUDA: the peak during its timed iterations of
    round 0 less the other live cells' footprints; no garbage collection runs between cells in later
    rounds), its kernel count, and ``recompiles_while_timed`` when Dynamo compiled
    a frame during its timed iterations (its figures then include a compile). A cell that raises gets
    ``status`` ``"error"`` and leaves the rounds.
    """
    n = len(cells)
    for k in range(rounds):
        for pos in range(n):
            c = cells[(k + pos) % n]
            if c.step is None:
                continue
            try:
                cuda_round0 = device == "cuda" and k == 0  # memory is measured in round 0 only
                if k == 0:
                    if cuda_round0:
                        gc.collect()
                    m0 = _allocated(device)
                    for _ in range(warmup):
                        c.step()
                    _sync(device)
                    if cuda_round0:
                        gc.collect()
                        c.footprint += _allocated(device) - m0  # CUDA-graph recordings, state made lazily
                        torch.cuda.empty_cache()
                        torch.cuda.reset_peak_memory_stats()
                else:
                    c.step()
                    _sync(device)
                log(f"round {k + 1}/{rounds}: {c.name}")
                frames = _frames_compiled()
                c.samples.append(time_iterations(c.step, device, iters))
                c.positions.append(pos)
                if _frames_compiled() != frames:
                    c.res["recompiles_while_timed"] = c.res.get("recompiles_while_timed", 0) + \
                        _frames_compiled() - frames
                if cuda_round0:
                    others = sum(o.footprint for o in cells if o is not c and o.step is not None)
                    c.peak = torch.cuda.max_memory_allocated() - others
            except Exception as exc:  # this cell leaves the rounds; the others go on
                _record_error(c.res, exc)
                c.step = c.module = None
    for c in cells:
        if c.step is None or not c.samples:
            continue
        try:
            c.res.update(timing_fields(c.samples, c.batch_size, rounds=True))
            c.res["round_positions"] = list(c.positions)
            if device == "cuda" and c.peak is not None:
                c.res["peak_mem_mib"] = c.peak / 2**20
            c.res.update(count_kernels(c.step, device))
        except Exception as exc:
            _record_error(c.res, exc)
            c.step = c.module = None


def release(cells: list[LiveCell], device: str) -> None:
    """Free a row's live cells: their steps and model copies, Dynamo's cache entries, the CUDA caching allocator."""
    for c in cells:
        c.step = c.module = None
    cells.clear()
    reset_compiler(device)
