"""A user's model file, captured with Dynamo and optimized with each strategy: what ``optimus-eq optimize`` and
``optimus-eq explain`` run.

A model file defines a factory, named on the command line as ``FILE.py:FACTORY``, that returns
``(model, example_inputs)`` or ``(model, example_inputs, loss)``: ``model`` is any callable Dynamo can trace
(an ``nn.Module`` usually), ``example_inputs`` a tuple of positional arguments (a single tensor is taken as a
1-tuple), and ``loss`` an optional ``loss(output) -> scalar tensor``. Without ``loss`` the model runs under
``torch.no_grad()`` (inference graphs); with it, each strategy also runs ``loss(model(*inputs)).backward()``
and the gradients of the parameters and of inputs that require grad are checked against eager's.

:func:`run_strategy` compiles the model with a backend that optimizes every graph Dynamo hands it (one per
graph break) and runs it as optimized, without Inductor: at the ``pre_grad`` level the Torch-IR graph itself,
at ``post_grad`` the Aten-IR forward (and backward) graphs AOTAutograd makes with Inductor's decompositions.
Outputs (and gradients) are compared with eager's. :func:`count_compiled_kernels` compiles with Inductor
(``optimus_eq.backend``) and counts kernels per call with torch.profiler.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch.fx import GraphModule
from torch.utils._pytree import tree_leaves

import optimus_eq
from optimus_eq.api import STRATEGIES, check_options
from optimus_eq.horizontal.driver import pattern_options
from optimus_eq.kernels import count_kernels
from optimus_eq.patterns import DEFAULT_REGISTRY
from optimus_eq.report import Report

LEVELS = ("pre_grad", "post_grad")
#: op kinds of the report (``Report.ops_before``) that are split/cat junk
JUNK = Report.JUNK


def horizontal_options(level: str, min_fuse_set_size: int | None) -> dict[str, Any]:
    """:func:`optimus_eq.optimize`'s options that set ``min_fuse_set_size`` on every horizontal pattern of
    ``level`` that batches groups (the groups-of-one rewrites, ``max_fuse_set_size`` 1,
    keep theirs); ``{}`` for None (Optimus' default of 5)."""
    if min_fuse_set_size is None:
        return {}
    names = [p.name for p in DEFAULT_REGISTRY if p.kind == "horizontal" and level in p.levels
             and pattern_options(p, {})["max_fuse_set_size"] > 1]
    return {"pattern_options": {n: {"min_fuse_set_size": min_fuse_set_size} for n in names}}


def check_strategies(strategies: list[str], level: str, options: dict, where: str = "optimize") -> None:
    """Raise ValueError (or TypeError) for an unknown strategy or level, or options :func:`optimus_eq.optimize`
    would refuse, before anything is captured."""
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown or not strategies:
        raise ValueError(f"unknown strategy {unknown or strategies}; valid: {', '.join(STRATEGIES)}")
    for s in strategies:
        check_options(s, where, level=level, **options)


@dataclass
class ModelSpec:
    """What a factory returned.

    Attributes:
        name: ``FILE.py:FACTORY`` as given.
        model: the callable to compile.
        inputs: its positional arguments.
        loss: ``loss(output) -> scalar tensor``, or None (inference).
    """

    name: str
    model: Callable
    inputs: tuple
    loss: Callable | None = None
    start: dict = field(init=False, repr=False, compare=False)
    start_inputs: list = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # the buffers and input tensors as the factory made them: every run (eager's, each strategy's) starts
        # from them (a forward may write into either)
        self.start = ({k: b.detach().clone() for k, b in self.model.named_buffers()}
                      if isinstance(self.model, torch.nn.Module) else {})
        self.start_inputs = [t.detach().clone() if isinstance(t, torch.Tensor) else None
                             for t in tree_leaves(self.inputs)]

    @property
    def device(self) -> str:
        """``"cuda"`` when an input tensor is on a CUDA device, else ``"cpu"``."""
        return "cuda" if any(isinstance(x, torch.Tensor) and x.is_cuda for x in tree_leaves(self.inputs)) else "cpu"


def load_factory(spec: str) -> ModelSpec:
    """Import ``FILE.py`` and call its ``FACTORY``.

    Raises:
        ValueError: ``spec`` is not ``FILE.py:FACTORY``, the file has no such callable, or the factory did not
            return ``(model, example_inputs)`` or ``(model, example_inputs, loss)``.
        FileNotFoundError: no such file.
    """
    path, sep, factory = spec.rpartition(":")
    if not sep or not path or not factory:
        raise ValueError(f"{spec!r}: expected FILE.py:FACTORY, e.g. model.py:make (FACTORY returns (model, "
                         "example_inputs) or (model, example_inputs, loss))")
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"{spec!r}: no file {file}")
    name = f"optimus_eq_user_{abs(hash(str(file.resolve())))}"
    mod_spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[name] = module  # dataclasses, pickling and Dynamo's source lookups find it
    folder = str(file.resolve().parent)
    sys.path.insert(0, folder)  # the file's imports of its neighbours, at the top or inside the factory
    try:
        mod_spec.loader.exec_module(module)
        fn = getattr(module, factory, None)
        if not callable(fn):
            found = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_")
                           and getattr(v, "__module__", None) == name)
            raise ValueError(f"{spec!r}: {file} has no callable {factory!r}; its functions and classes: {found}")
        got = fn()
    finally:
        sys.path.remove(folder)
    if not isinstance(got, (tuple, list)) or len(got) not in (2, 3):
        raise ValueError(f"{spec!r}: {factory}() must return (model, example_inputs) or (model, example_inputs, "
                         f"loss), got {type(got).__name__}")
    model, inputs, loss = (*got, None) if len(got) == 2 else got
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, (tuple, list)):
        raise ValueError(f"{spec!r}: example_inputs must be a tuple of positional arguments (or one tensor), got "
                         f"{type(inputs).__name__}")
    if not callable(model) or (loss is not None and not callable(loss)):
        raise ValueError(f"{spec!r}: the model and the loss must be callables")
    return ModelSpec(spec, model, tuple(inputs), loss)


@dataclass
class GraphRun:
    """One graph Dynamo (or AOTAutograd) handed the backend: as captured, as optimized, and the report.

    ``name``: ``"graph 0"`` (pre-grad), ``"graph 0 forward"`` / ``"graph 0 backward"`` (post-grad);
    ``example_inputs``: what the backend was handed with it (real tensors pre-grad, FakeTensors post-grad)."""

    name: str
    before: GraphModule
    after: GraphModule
    report: Report
    example_inputs: list = field(default_factory=list)


@dataclass
class StrategyRun:
    """One strategy on one model: its graphs and the check against eager.

    Attributes:
        compile_s: seconds of the first call (Dynamo, AOTAutograd at post-grad, the optimizer; no Inductor).
        outputs_match: outputs (and, with a loss, gradients of the parameters and of inputs that require grad)
            equal eager's within rtol/atol.
        max_abs_diff: the largest absolute difference seen.
        mismatch: assert_close's message when they differ.
        error: ``"Type: message"`` when compiling or running raised.
        kernels: kernels per call compiled with Inductor (:func:`count_compiled_kernels`), when counted.
    """

    strategy: str
    level: str
    graphs: list[GraphRun] = field(default_factory=list)
    compile_s: float | None = None
    outputs_match: bool = False
    max_abs_diff: float | None = None
    mismatch: str | None = None
    error: str | None = None
    kernels: int | None = None

    def totals(self) -> dict[str, Any]:
        """Numbers summed over the graphs: nodes, junk nodes, patterns fired, op fates, plan cost, seconds."""
        reps = [g.report for g in self.graphs]
        junk = [r.junk_counts() for r in reps]
        fates: dict[str, int] = {}
        fired: dict[str, int] = {}
        matches: dict[str, int] = {}
        for r in reps:
            for k, v in r.fate_counts().items():
                fates[k] = fates.get(k, 0) + v
            for k, v in r.patterns_fired.items():
                fired[k] = fired.get(k, 0) + v
            for k, v in r.rule_matches.items():
                matches[k] = matches.get(k, 0) + v
        costs = [(r.cost_before, r.cost_after) for r in reps]
        known = all(b is not None and a is not None for b, a in costs) and bool(costs)
        return {
            "graphs": len(reps),
            "nodes_before": sum(r.nodes_before for r in reps), "nodes_after": sum(r.nodes_after for r in reps),
            "junk_before": sum(b for b, _ in junk), "junk_after": sum(a for _, a in junk),
            "left_opaque": sum(r.left_opaque for r in reps),
            "fates": fates, "patterns_fired": fired, "rule_matches": matches,
            "cost_before": sum(b for b, _ in costs) if known else None,
            "cost_after": sum(a for _, a in costs) if known else None,
            "optimize_s": sum(r.times.get("total", 0.0) for r in reps),
            "fallbacks": [r.fallback for r in reps if r.fallback],
        }


@contextlib.contextmanager
def same_start(spec: ModelSpec, seed: int = 0):
    """Run one call of ``spec.model`` (eager's or a strategy's) from the state eager's started from: the
    model's buffers and input tensors as the factory returned them (``ModelSpec.start``, ``start_inputs``: a
    forward that updates a running statistic or a counter, or writes into its input, would otherwise hand the
    next run another model or input) and the global RNG seeded with
    ``seed`` (restored afterwards), so that random ops the plan leaves alone draw what eager drew."""
    if isinstance(spec.model, torch.nn.Module):
        with torch.no_grad():
            for k, b in spec.model.named_buffers():
                s = spec.start.get(k)
                if s is not None and s.shape == b.shape and s.dtype == b.dtype:
                    b.copy_(s)
    with torch.no_grad():
        for t, s in zip(tree_leaves(spec.inputs), spec.start_inputs):
            if s is not None and t.shape == s.shape and t.dtype == s.dtype:
                t.copy_(s)
    devices = [torch.cuda.current_device()] if spec.device == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def eager_result(spec: ModelSpec) -> tuple[list, dict]:
    """Eager's flat outputs and, with a loss, the gradients of the parameters and of inputs that require grad
    (then cleared again); from :func:`same_start`."""
    with same_start(spec):
        if spec.loss is None:
            with torch.no_grad():
                return [t.detach().clone() if isinstance(t, torch.Tensor) else t
                        for t in tree_leaves(spec.model(*spec.inputs))], {}
        return _train_step(spec, spec.model)


#: names of ops that draw random numbers (a hint in a mismatch's message, not a check)
_RANDOM_OPS = ("dropout", "rand", "bernoulli", "normal", "multinomial", "poisson", "rrelu")


def _draws_random(gm: GraphModule) -> bool:
    """Does ``gm`` call an op whose name says it draws random numbers (:data:`_RANDOM_OPS`)?"""
    for n in gm.graph.nodes:
        if n.op in ("call_function", "call_method"):
            name = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))
            if any(r in name for r in _RANDOM_OPS):
                return True
    return False


def _params(model) -> dict[str, torch.Tensor]:
    return dict(model.named_parameters()) if isinstance(model, torch.nn.Module) else {}


def _train_step(spec: ModelSpec, fn: Callable) -> tuple[list, dict]:
    # the parameters' gradients, and those of the example inputs that require grad ("input i", flat position)
    params = {**_params(spec.model),
              **{f"input {i}": t for i, t in enumerate(tree_leaves(spec.inputs))
                 if isinstance(t, torch.Tensor) and t.is_leaf and t.requires_grad}}
    for p in params.values():
        p.grad = None
    out = fn(*spec.inputs)
    spec.loss(out).backward()
    grads = {k: None if p.grad is None else p.grad.detach().clone() for k, p in params.items()}
    for p in params.values():
        p.grad = None
    return [t.detach().clone() if isinstance(t, torch.Tensor) else t for t in tree_leaves(out)], grads


def _compare(run: StrategyRun, expected: tuple[list, dict], got: tuple[list, dict], rtol: float, atol: float):
    worst = 0.0
    pairs = [(f"output {i}", a, b) for i, (a, b) in enumerate(zip(got[0], expected[0]))]
    pairs += [(f"grad of {k}", got[1].get(k), v) for k, v in expected[1].items()]
    if len(got[0]) != len(expected[0]):
        run.mismatch = f"{len(got[0])} outputs, eager has {len(expected[0])}"
    for what, a, b in pairs:
        if run.mismatch:
            break
        if not isinstance(b, torch.Tensor) or not isinstance(a, torch.Tensor):
            if (a is None) != (b is None) or (not isinstance(b, torch.Tensor) and a != b):
                run.mismatch = f"{what}: {a!r} vs eager {b!r}"
            continue
        if a.shape == b.shape and a.numel():
            worst = max(worst, float((a.double() - b.double()).abs().max()))
        try:
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol)
        except AssertionError as exc:
            run.mismatch = f"{what}: {exc}"
    run.max_abs_diff = worst
    run.outputs_match = run.mismatch is None


def _backend(strategy: str, level: str, graphs: list[GraphRun], options: dict) -> Callable:
    """A torch.compile backend that optimizes every graph and runs it as optimized (no Inductor)."""
    count = [0]

    def optimize(gm, example_inputs, name):
        after, report = optimus_eq.optimize(gm, list(example_inputs), strategy=strategy, level=level, **options)
        graphs.append(GraphRun(name, gm, after, report, list(example_inputs)))
        return after

    if level == "pre_grad":
        def pre_grad(gm, example_inputs):
            count[0] += 1
            return optimize(gm, example_inputs, f"graph {count[0] - 1}").forward

        return pre_grad

    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func
    from torch._inductor.decomposition import select_decomp_table

    def post_grad(gm, example_inputs):
        index = count[0]
        count[0] += 1
        return aot_autograd(
            fw_compiler=lambda g, ex: make_boxed_func(optimize(g, ex, f"graph {index} forward")),
            bw_compiler=lambda g, ex: make_boxed_func(optimize(g, ex, f"graph {index} backward")),
            decompositions=select_decomp_table())(gm, example_inputs)

    return post_grad


def run_strategy(spec: ModelSpec, strategy: str, level: str = "pre_grad", *, rtol: float = 1e-4,
                 atol: float = 1e-4, options: dict | None = None, expected: tuple | None = None) -> StrategyRun:
    """Compile ``spec.model`` with ``strategy`` at ``level``, run it once (a training step with a loss), and
    compare with eager.

    Args:
        options: keyword options of :func:`optimus_eq.optimize` (``patterns``, ``pattern_options``, ...).
        expected: eager's result from an earlier call (:func:`eager_result`), to run eager once for many strategies.

    A failure while compiling or running is recorded in ``error``, not raised (the optimizer itself falls back
    to the original graph on its own failures: ``report.fallback``).

    Raises:
        ValueError: an unknown level or strategy (before anything runs).
    """
    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r}; valid: {LEVELS}")
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; valid: {STRATEGIES}")
    run = StrategyRun(strategy, level)
    expected = expected or eager_result(spec)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(spec.model, backend=_backend(strategy, level, run.graphs, dict(options or {})))
        t0 = time.perf_counter()
        with same_start(spec):
            if spec.loss is None:
                with torch.no_grad():
                    got = ([t.detach() if isinstance(t, torch.Tensor) else t
                            for t in tree_leaves(compiled(*spec.inputs))], {})
            else:
                got = _train_step(spec, compiled)
        run.compile_s = time.perf_counter() - t0
        _compare(run, expected, got, rtol, atol)
        if run.mismatch and any(_draws_random(g.before) for g in run.graphs):
            run.mismatch += (" (the graph has random ops: a plan that batches them or hands them inputs of another "
                             "layout, or at post_grad Inductor's decompositions, draw other random numbers than eager; "
                             "torch._inductor.config.fallback_random = True keeps eager's)")
    except Exception as exc:  # recorded: the command prints it and exits non-zero
        run.error = f"{type(exc).__name__}: {exc}"
    finally:
        torch._dynamo.reset()
    return run


def count_compiled_kernels(spec: ModelSpec, strategy: str, level: str = "pre_grad",
                           options: dict | None = None) -> int | None:
    """Kernels one call (one training step with a loss) runs when compiled with Inductor after ``strategy``
    (``"none"``: plain Inductor), counted with torch.profiler (:func:`optimus_eq.kernels.count_kernels`; on
    CPU Inductor compiles with ``cpp.enable_kernel_profile`` so that its C++ kernels are seen). None when
    compiling failed. Compiles for real: seconds to minutes."""
    import torch._inductor.config as inductor_config

    device = spec.device
    patches = {"cpp.enable_kernel_profile": True} if device == "cpu" else {}
    torch._dynamo.reset()
    try:
        with inductor_config.patch(patches):
            compiled = torch.compile(spec.model, backend=optimus_eq.backend(
                strategy=strategy, post_grad=level == "post_grad", pre_grad=level == "pre_grad",
                **dict(options or {})))
            if spec.loss is None:
                with torch.no_grad():
                    step = lambda: compiled(*spec.inputs)  # noqa: E731
                    step()
                    return count_kernels(step, device)["kernels"]
            step = lambda: _train_step(spec, compiled)  # noqa: E731
            step()
            return count_kernels(step, device)["kernels"]
    except Exception:  # noqa: BLE001 - a kernel count is optional; the table says n/a
        return None
    finally:
        torch._dynamo.reset()
