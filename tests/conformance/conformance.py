"""The conformance harness: one upstream Optimus test case, run through the built-in passes of the
installed torch and through optimus_eq, counted and compared with eager.

A :class:`Case` is data: a small function or ``nn.Module`` (one per upstream test case, named in
``upstream``), a factory of random inputs, and the ``pre_grad_fusion_options`` /
``post_grad_fusion_options`` dictionaries the upstream test enables. Two ways to run it:

* **pre-grad** cases (no post-grad options): dynamo captures the Torch-IR graph once; the built-in
  runs ``torch._inductor.fx_passes.pre_grad.pre_grad_passes`` on a copy with
  ``config.pre_grad_fusion_options`` set to the case's options; ours runs
  ``optimus_eq.optimize(gm, strategy=s, pre_grad_fusion_options=...)``. Each result graph is run next
  to the captured graph (op by op, unoptimized) on fresh copies of the same inputs: outputs (values,
  dtypes, shapes, observable strides), inputs after the call, aliasing, and gradients of every floating
  placeholder (inputs and the parameters dynamo lifts) through a random weighted sum of the outputs.
* **post-grad** cases: the module is compiled with an AOTAutograd backend whose forward and backward
  compilers apply the post-grad passes (the built-in's ``post_grad_passes`` under
  ``config.post_grad_fusion_options``, or ours) and then run the graph as is (no Inductor codegen);
  outputs and the gradients of inputs and parameters are compared with the eager module. Pre-grad
  options of a mixed case are applied to the dynamo graph first, the same way.

Counts are of the op kinds in :data:`KINDS` (split/chunk, unbind, cat, stack, linear-family
matmuls, layer_norm, pointwise), on the (forward) graph after the passes.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
import torch
from torch.fx import Graph, GraphModule
from torch.utils._pytree import tree_leaves

import optimus_eq
import oracle

#: The op kinds the conformance suite counts (issue 3, item 5).
KINDS = ("split", "unbind", "cat", "stack", "linear", "layer_norm", "pointwise")

_KIND_OF_NAME = {
    "split": "split", "split_with_sizes": "split", "chunk": "split", "tensor_split": "split",
    "unbind": "unbind",
    "cat": "cat", "concat": "cat", "concatenate": "cat",
    "stack": "stack",
    "linear": "linear", "mm": "linear", "addmm": "linear", "bmm": "linear", "baddbmm": "linear", "bmm_add": "linear",
    "matmul": "linear", "einsum": "linear",
    "layer_norm": "layer_norm", "native_layer_norm": "layer_norm",
}
_POINTWISE = frozenset(
    ["relu", "tanh", "sigmoid", "detach", "clamp", "clamp_min", "clamp_max", "clip", "nan_to_num", "add", "sub",
     "rsub", "subtract", "mul", "multiply", "div", "divide", "truediv", "dropout", "native_dropout", "sin", "cos",
     "exp", "log", "neg", "abs", "sqrt", "rsqrt", "pow", "gelu", "silu", "where", "reciprocal"])


def op_name(node: torch.fx.Node) -> str | None:
    """A plain op name for any call node of Torch-IR or Aten-IR (``aten.add.Tensor`` -> ``"add"``)."""
    if node.op not in ("call_function", "call_method"):
        return None
    t = node.target
    if isinstance(t, str):
        name = t
    elif isinstance(t, torch._ops.OpOverload):
        name = t._schema.name.split("::")[-1]
    elif isinstance(t, torch._ops.OpOverloadPacket):
        name = t._qualified_op_name.split("::")[-1]
    else:
        name = getattr(t, "__name__", str(t))
    name = name.strip("_") if name.startswith("__") else name  # operator.__add__ spellings
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name  # in-place add_ -> add


def kind_of(node: torch.fx.Node) -> str | None:
    """The :data:`KINDS` entry of a node, or None for ops the suite does not count."""
    name = op_name(node)
    if name is None:
        return None
    if name in _KIND_OF_NAME:
        return _KIND_OF_NAME[name]
    return "pointwise" if name in _POINTWISE else None


def count_kinds(gm: GraphModule) -> Counter:
    """Kind -> node count (every kind of :data:`KINDS` present, zeros included)."""
    counts = Counter({k: 0 for k in KINDS})
    for n in gm.graph.nodes:
        k = kind_of(n)
        if k is not None:
            counts[k] += 1
    return counts


# -- cases -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """One ported upstream case.

    Attributes:
        name: a unique short id (the upstream function or module name, with a suffix for variants).
        upstream: where it comes from: ``file::Class::test (function)`` of pytorch/test/inductor.
        build: returns the function or ``nn.Module`` under test (a fresh one per call).
        inputs: returns the random inputs (a fresh list per call).
        pre_grad: the ``pre_grad_fusion_options`` the upstream test enables (None: none).
        post_grad: the ``post_grad_fusion_options`` (None: a pre-grad case).
        fires: our pattern names that must fire (where the upstream test expects its counter > 0).
        done_by: fires name -> patterns of ours that do that job in a better way on this case (a pointwise
            op on the whole tensor instead of a batch of its slices; a bias folded into a baddbmm), so
            that one of them firing counts; the node-count bar still applies.
        grad: compare gradients (False where the function mutates an input or is not differentiable).
        values: compare values (False for random ops such as dropout in training: shapes and dtypes only).
        dynamic: capture with symbolic sizes.
        gap: a known reason why ours may leave more counted nodes than the built-in; the count
            assertion then becomes an expected failure with this reason (it passes once fixed).
        builtin_bug: a case on which the built-in is known to go wrong (the issue's list): ours must be
            right; the built-in's outcome is recorded, not asserted.
        note: anything worth saying in the table.
    """

    name: str
    upstream: str
    build: Callable[[], Any]
    inputs: Callable[[], list]
    pre_grad: dict | None = None
    post_grad: dict | None = None
    fires: tuple[str, ...] = ()
    done_by: dict = field(default_factory=dict)
    grad: bool = True
    values: bool = True
    dynamic: bool = False
    gap: str = ""
    builtin_bug: bool = False
    note: str = ""

    @property
    def level(self) -> str:
        return "pre_grad" if self.post_grad is None else "post_grad"

    @property
    def required(self) -> tuple[str, ...]:
        """Pattern names the case needs registered: every name in its option dictionaries."""
        return tuple(dict.fromkeys([*(self.pre_grad or {}), *(self.post_grad or {}), *self.fires]))


def registered() -> set[str]:
    return {name for name, _, _ in optimus_eq.list_patterns()}


def missing_patterns(case: Case) -> list[str]:
    have = registered()
    return [n for n in case.required if n not in have]


def requires_patterns(*names: str):
    """A skip mark that turns itself off once every name is in ``optimus_eq.list_patterns()``."""
    missing = [n for n in names if n not in registered()]
    return pytest.mark.skipif(bool(missing), reason=f"waiting on pattern(s) {missing}")


def rand(*shape, dtype=torch.float32, seed: int = 0, requires_grad: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).requires_grad_(requires_grad)


# -- outcomes ----------------------------------------------------------------------------------------

@dataclass
class Outcome:
    """What one side (built-in, greedy or eqsat) did to one case."""

    counts: Counter = field(default_factory=Counter)
    nodes: int = 0
    fired: Counter = field(default_factory=Counter)
    status: str = "ok"  # "ok", "strides differ", "wrong: ...", "crash: ..."
    fallback: str | None = None
    graph: str = ""

    @property
    def total(self) -> int:
        return sum(self.counts[k] for k in KINDS)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _fresh(t, grad: bool):
    if isinstance(t, torch.Tensor):
        c = t.detach().clone()
        if grad and c.is_floating_point():
            c.requires_grad_(True)
        return c
    return t


def compare(expected: list, actual: list, ref_in: list, opt_in: list, grad: bool, values: bool,
            ref64: "oracle.Reference | None" = None) -> None:
    """Assert ``actual`` matches ``expected`` (outputs, inputs after the call, aliasing, gradients of the
    floating inputs in ``ref_in``/``opt_in`` through a random weighted sum of the outputs), by the shared
    oracle (tests/oracle.py :func:`oracle.compare_runs`): values and gradients judged against ``ref64``,
    the eager function run in float64 (None: against eager with ``assert_close``'s tolerances)."""
    oracle.compare_runs(actual, expected, opt_in, ref_in, ref64, grad=grad, values=values)


def _status(exc: BaseException, crashed: bool) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    if len(lines) > 1 and lines[0].endswith("raised:"):  # dynamo's BackendCompilerFailed: the cause is next
        lines = lines[1:]
    msg = lines[0] if lines else type(exc).__name__
    if crashed:
        return f"crash: {type(exc).__name__}: {msg[:200]}"
    if "strides" in msg and "eager's" in msg:
        return "strides differ"  # same values, but e.g. a downstream .view(-1) may fail
    if msg.startswith("outputs alias"):
        return "aliases an input"  # same values, but mutating the result writes into the input
    if msg.startswith("eager's outputs are views"):
        return "aliasing lost"  # same values, but a write into the result no longer reaches the input
    return f"wrong: {msg[:200]}"


def _fired_since(before: Counter) -> Counter:
    from torch._dynamo.utils import counters

    now = counters["optimus_eq"]
    return Counter({k: now[k] - before.get(k, 0) for k in now if now[k] - before.get(k, 0) > 0})


# -- pre-grad cases: the dynamo graph ----------------------------------------------------------------

@dataclass
class Captured:
    gm: GraphModule
    example_inputs: list
    trace_inputs: list
    module: Any


def capture(case: Case) -> Captured:
    """The single dynamo graph of the case (parameters are placeholders)."""
    fn = case.build()
    inputs = case.inputs()
    graphs = []

    def grab(gm, example_inputs):
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=grab, fullgraph=True, dynamic=case.dynamic or None)(*inputs)
    assert len(graphs) == 1, f"{case.name}: dynamo produced {len(graphs)} graphs"
    return Captured(graphs[0][0], graphs[0][1], inputs, fn)


def _copy_gm(gm: GraphModule) -> GraphModule:
    """A structural copy (node meta shared shallowly) that passes can rewrite without touching ``gm``."""
    g = Graph()
    out = g.graph_copy(gm.graph, {})
    g.output(out)
    return GraphModule(gm, g)


def _args(cap: Captured, grad: bool) -> list:
    return [_fresh(e, grad) for e in cap.example_inputs]


def run_graph_pair(cap: Captured, test_gm: GraphModule, case: Case, seed: int = 0) -> None:
    """Run the captured graph and ``test_gm`` on fresh copies of the placeholders and compare."""
    ref_in, opt_in = _args(cap, case.grad), _args(cap, case.grad)
    ref64 = oracle.float64_reference(cap.gm, ref_in) if case.values else None
    torch.manual_seed(seed)
    expected = cap.gm(*ref_in)
    torch.manual_seed(seed)
    actual = test_gm(*opt_in)
    compare(expected, actual, ref_in, opt_in, case.grad, case.values, ref64)


def builtin_pre(cap: Captured, case: Case) -> Outcome:
    """The installed torch's pre-grad passes with the case's options, run and compared."""
    from torch._dynamo.utils import counters
    from torch._inductor import config
    from torch._inductor.fx_passes.pre_grad import pre_grad_passes

    out = Outcome()
    before = Counter(counters["inductor"])
    try:
        with config.patch(pre_grad_fusion_options=copy.deepcopy(case.pre_grad or {}), post_grad_fusion_options={}):
            gm = pre_grad_passes(_copy_gm(cap.gm), cap.example_inputs)
    except Exception as exc:
        out.status = _status(exc, crashed=True)
        return out
    out.fired = Counter({k: v - before.get(k, 0) for k, v in counters["inductor"].items() if v - before.get(k, 0) > 0})
    out.counts, out.nodes, out.graph = count_kinds(gm), len(gm.graph.nodes), str(gm.graph)
    try:
        run_graph_pair(cap, gm, case)
    except AssertionError as exc:
        out.status = _status(exc, crashed=False)
    except Exception as exc:
        out.status = _status(exc, crashed=True)
    return out


def ours_pre(cap: Captured, case: Case, strategy: str) -> tuple[Outcome, GraphModule]:
    """``optimus_eq.optimize`` with the case's options; compared by the caller (failures raise)."""
    before = str(cap.gm.graph)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gm2, report = optimus_eq.optimize(cap.gm, cap.example_inputs, strategy=strategy,
                                          pre_grad_fusion_options=copy.deepcopy(case.pre_grad or {}))
    assert str(cap.gm.graph) == before, "optimize() modified its input graph"
    out = Outcome(counts=count_kinds(gm2), nodes=len(gm2.graph.nodes), fired=Counter(report.rule_matches),
                  fallback=report.fallback, graph=str(gm2.graph))
    ours = [str(w.message) for w in caught if "optimus_eq" in str(w.message)]
    if ours and out.fallback is None:
        out.fallback = ours[0]
    return out, gm2


# -- post-grad cases: AOTAutograd graphs ----------------------------------------------------------------

def _builtin_post_pass(options: dict):
    def apply(gm: GraphModule, example_inputs, is_inference: bool) -> GraphModule:
        from torch._guards import detect_fake_mode
        from torch._inductor import config
        from torch._inductor.fx_passes.post_grad import post_grad_passes
        from torch._inductor.virtualized import V

        with config.patch(post_grad_fusion_options=copy.deepcopy(options), pre_grad_fusion_options={}):
            with V.set_fake_mode(detect_fake_mode(example_inputs)):
                post_grad_passes(gm, is_inference)
        return gm
    return apply


def _ours_post_pass(strategy: str, options: dict):
    """optimus_eq's post-grad pass (``optimus_eq.post_grad_pass``, a CustomGraphPass on a torch.fx.Graph)."""
    def apply(gm: GraphModule, example_inputs, is_inference: bool) -> GraphModule:
        make = getattr(optimus_eq, "post_grad_pass", None)
        assert make is not None, "optimus_eq.post_grad_pass is missing (the post-grad entry point)"
        params = inspect.signature(make).parameters
        kwargs = {"strategy": strategy}
        if "post_grad_fusion_options" in params:
            kwargs["post_grad_fusion_options"] = copy.deepcopy(options)
        elif "patterns" in params:
            kwargs["patterns"] = list(options)
        make(**kwargs)(gm.graph)
        gm.recompile()
        return gm
    return apply


def _builtin_pre_pass(options: dict):
    def apply(gm, example_inputs):
        from torch._inductor import config
        from torch._inductor.fx_passes.pre_grad import pre_grad_passes

        with config.patch(pre_grad_fusion_options=copy.deepcopy(options), post_grad_fusion_options={}):
            return pre_grad_passes(gm, example_inputs)
    return apply


def _ours_pre_pass(strategy: str, options: dict):
    def apply(gm, example_inputs):
        return optimus_eq.optimize(gm, example_inputs, strategy=strategy, pre_grad_fusion_options=copy.deepcopy(options))[0]
    return apply


def run_pipeline(case: Case, pre_pass, post_pass, strict: bool) -> Outcome:
    """Compile the case's module with dynamo -> ``pre_pass`` -> AOTAutograd -> ``post_pass`` (forward
    and backward graphs, run without Inductor codegen) and compare with the eager module.

    ``strict``: let comparison failures raise (ours); otherwise record them in the outcome (built-in).
    """
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.utils import counters
    from torch._inductor.decomposition import select_decomp_table

    out = Outcome()
    graphs: list[GraphModule] = []

    def compiler(is_forward: bool):
        def comp(gm, example_inputs):
            gm = post_pass(gm, example_inputs, False) if post_pass else gm
            if is_forward:
                graphs.append(gm)
            return make_boxed_func(gm.forward)
        return comp

    aot = aot_autograd(fw_compiler=compiler(True), bw_compiler=compiler(False), decompositions=select_decomp_table())

    def backend(gm, example_inputs):
        if pre_pass is not None:
            gm = pre_pass(gm, example_inputs)
        return aot(gm, example_inputs)

    module = case.build()
    ref_mod = copy.deepcopy(module)
    inputs = case.inputs()
    ref_in, opt_in = [_fresh(x, case.grad) for x in inputs], [_fresh(x, case.grad) for x in inputs]
    before_inductor, before_ours = Counter(counters["inductor"]), Counter(counters["optimus_eq"])
    torch._dynamo.reset()
    try:
        compiled = torch.compile(module, backend=backend, fullgraph=True)
        torch.manual_seed(0)
        actual = compiled(*opt_in)
    except Exception as exc:
        if strict:
            raise
        out.status = _status(exc, crashed=True)
        return out
    if graphs:
        out.counts, out.nodes, out.graph = count_kinds(graphs[-1]), len(graphs[-1].graph.nodes), str(graphs[-1].graph)
    fired_inductor = Counter({k: v - before_inductor.get(k, 0) for k, v in counters["inductor"].items()
                              if v - before_inductor.get(k, 0) > 0})
    out.fired = _fired_since(before_ours) if strict else fired_inductor
    ref64 = oracle.float64_reference(ref_mod, ref_in) if case.values else None
    torch.manual_seed(0)
    expected = ref_mod(*ref_in)
    params_e = [p for _, p in ref_mod.named_parameters()] if isinstance(ref_mod, torch.nn.Module) else []
    params_a = [p for _, p in module.named_parameters()] if isinstance(module, torch.nn.Module) else []
    try:
        compare(expected, actual, ref_in + params_e, opt_in + params_a, case.grad, case.values, ref64)
    except AssertionError as exc:
        if strict:
            raise
        out.status = _status(exc, crashed=False)
    except Exception as exc:
        if strict:
            raise
        out.status = _status(exc, crashed=True)
    return out


def builtin(case: Case, cap: Captured | None = None) -> Outcome:
    """The built-in's outcome on ``case`` (``cap``: the captured graph of a pre-grad case)."""
    if case.level == "pre_grad":
        return builtin_pre(cap or capture(case), case)
    pre = _builtin_pre_pass(case.pre_grad) if case.pre_grad else None
    return run_pipeline(case, pre, _builtin_post_pass(case.post_grad), strict=False)


def ours(case: Case, strategy: str, cap: Captured | None = None) -> Outcome:
    """Our outcome on ``case``; comparison failures raise AssertionError."""
    if case.level == "pre_grad":
        cap = cap or capture(case)
        out, gm2 = ours_pre(cap, case, strategy)
        run_graph_pair(cap, gm2, case)
        return out
    pre = _ours_pre_pass(strategy, case.pre_grad) if case.pre_grad else None
    return run_pipeline(case, pre, _ours_post_pass(strategy, case.post_grad), strict=True)


def fired_names(fired: Counter, name: str, done_by: tuple[str, ...] = ()) -> bool:
    """True when ``name`` fired, or a pattern with the same rules did (an alias taken first by greedy), or
    one of ``done_by`` (patterns that do its job in a better way on this case: ``Case.done_by``)."""
    if fired.get(name, 0) > 0 or any(fired.get(n, 0) > 0 for n in done_by):
        return True
    reg = optimus_eq.DEFAULT_REGISTRY
    if name not in reg:
        return False
    bodies = {(r.lhs, r.rhs, r.when) for r in reg[name].rules}
    return any(fired.get(p.name, 0) > 0 for p in reg if any((r.lhs, r.rhs, r.when) in bodies for r in p.rules))
