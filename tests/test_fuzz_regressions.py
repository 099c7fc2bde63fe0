"""Regressions found by fuzzing (session fuzz3): each test is the smallest input that went wrong, with the
symptom it had. Differential checks against eager (conftest.check, test_aten.aot_check)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from conftest import STRATEGIES, check, rand
from test_aten import _x, aot_check


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_backward_graph_with_none_gradient_output(strategy):
    """An integer input gets no gradient: the backward graph returns None for it. Lowering's output
    stride check read ``None.meta`` and every such backward graph fell back (AttributeError)."""

    def f(a, i):
        return torch.cat([t * j for t, j in zip(a.split(2, 1), i.split(2, 1))], 1)

    aot_check(f, [_x((3, 6)), torch.randint(-3, 3, (3, 6))], strategy)


@pytest.mark.parametrize("strategy", STRATEGIES + ("taso", "tensat"))
def test_view_of_input_output_after_a_folded_cat_stays_a_view(strategy):
    """``cat(x.split(3, 1), 1)`` folds to x and gets a copy (eager's cat is new storage); the output after
    it, ``x[:, 1:]``, was judged to alias that output too and was copied as well: a view of x in eager, a
    new tensor here (writing into it no longer reached x). Post-grad the same copy had the wrong strides
    and the graph fell back."""

    def f(x):
        return torch.cat(x.split(3, 1), 1), x[:, 1:]

    c = check(f, [rand(4, 6)], strategy)
    x = c.inputs[0]
    assert c.outputs[1].untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert c.outputs[0].untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_view_of_input_output_after_a_folded_cat_post_grad(strategy):
    def f(x):
        p = x.split(3, 1)
        return p[0], torch.cat(p, 1), x[:, 1:], x

    aot_check(f, [_x((4, 6))], strategy)



def test_taso_drops_states_whose_destructive_steps_left_no_term():
    """taso applied pointwise_through_slice first (relu(narrow(x, 0, 0, 2)) -> narrow(relu(x), ...), the
    left side subsumed), then remove_split_with_size_one (narrow(x, 0, 0, 2) -> x): the subsumed e-node is
    then relu(x) itself, and relu(x)'s class had no e-node left. The objective raised and the whole search
    fell back ("no acyclic term"); such a state is now dropped."""

    def f(x):
        a, b = torch.split(x, [2, 0], 0)
        return torch.relu(a), b

    c = check(f, [rand(2, 3)], "taso", source="fx")
    assert c.report.ops_after.get("split", 0) == 0


@pytest.mark.parametrize("strategy", STRATEGIES + ("taso", "tensat"))
@pytest.mark.parametrize("case", ["head_op", "split_of_op"])
def test_tuple_output_built_by_an_opaque_op(strategy, case):
    """``(relu(p[0]),) + p[1:]`` in a symbolic_trace graph is an ``operator.add`` of tuples (kept verbatim,
    not a tensor). Nothing made the classes it reads extraction roots, so lowering found no e-node chosen
    for relu's class (KeyError) and fell back; same for the tensor a whole split tuple is taken from."""

    if case == "head_op":
        def f(x):
            p = torch.split(x, [1, 1], 0)
            return (torch.relu(p[0]),) + p[1:]
    else:
        def f(x):
            p = torch.tanh(x).split(1, 0)
            return p[1:] + (x,)

    check(f, [rand(2, 3)], strategy, source="fx")


@pytest.mark.parametrize("strategy", STRATEGIES + ("tensat",))
def test_cat_of_zero_size_selects_of_one_tensor(strategy):
    """Zero-size members of a batch_clamp group, concatenated: each select became a zero-length narrow of
    one view, and the run analysis' pointer jump with no progress (end e2 == e) joined two different list
    rests, so the cat's list became the empty list and lowering failed (IndexError) on ``Cat(Nil)``."""

    def f(x):
        v = torch.stack([x], 2)
        return torch.cat([v.clamp(-0.3, 0.4), v.relu().clamp(-0.3, 0.4)], 3)

    check(f, [rand(3, 4, 0, 2)], strategy, source="fx", pattern_options={"batch_clamp": {"min_fuse_set_size": 2}})


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_zero_length_pieces_inside_a_run_still_fold(strategy):
    """The jump guard keeps runs across zero-length pieces inside them (a trailing one now stays in the
    cat: ``cat([z, b, y])`` keeps y)."""

    def f(x):
        a, z, b, y, c = torch.split(x, [2, 0, 2, 0, 2], 1)
        return torch.cat([a, z, b, y, c], 1) * 2

    c = check(f, [rand(3, 6)], strategy)
    assert c.report.ops_after.get("cat", 0) == 0, dict(c.report.ops_after)
    check(lambda x: torch.cat([x.split([2, 0, 2, 0, 2], 1)[i] for i in (1, 2, 3)], 1) + 1, [rand(3, 6)], strategy)


def test_backend_splits_pattern_options_by_level(monkeypatch):
    """``backend(post_grad=True, pattern_options=...)`` gave the post-grad pass the whole dictionary; its
    ``optimize`` rejected the pre-grad names (ValueError inside Inductor: the model failed to compile), and
    the pre-grad ``optimize`` rejected post-grad names. Each level now gets its own patterns' entries."""
    import optimus_bridge.post_grad as pg
    import torch._inductor.compile_fx as cfx
    from torch._dynamo.utils import counters

    import optimus_eq

    made = []

    class Spy(pg.PostGradPass):
        def __init__(self, strategy="eqsat", **options):
            made.append(options)
            super().__init__(strategy, **options)

    monkeypatch.setattr(pg, "PostGradPass", Spy)
    monkeypatch.setattr(cfx, "compile_fx", lambda gm, example_inputs, config_patches=None, **kw: gm.forward)
    opts = {"batch_tanh": {"min_fuse_set_size": 2}, "batch_aten_tanh": {"min_fuse_set_size": 3}}
    be = optimus_eq.backend("greedy", post_grad=True, pattern_options=opts)
    assert made == [{"pattern_options": {"batch_aten_tanh": {"min_fuse_set_size": 3}}}]

    def f(a, b):
        return torch.tanh(a) * 2, torch.tanh(b) * 3

    counters.clear()
    torch._dynamo.reset()
    xs = [rand(3, 4), rand(3, 4)]
    for got, want in zip(torch.compile(f, backend=be)(*xs), f(*xs)):
        torch.testing.assert_close(got, want)
    assert counters["optimus_eq"]["batch_tanh"] == 1
    with pytest.raises(ValueError, match="no_such_pattern"):
        optimus_eq.backend("greedy", post_grad=True, pattern_options={"no_such_pattern": {}})


def test_backend_lets_dynamo_restart_analysis_through(monkeypatch):
    """Under ``dynamic=True`` Inductor raises TensorifyScalarRestartAnalysis for a tensorified float it must
    specialize (LayerNorm's eps): a request to Dynamo to trace again, not a failure. The backend took it
    for an Inductor failure, warned, and compiled the original graph, so every such graph lost the
    optimization."""
    import torch._inductor.compile_fx as cfx
    from torch._dynamo.exc import TensorifyScalarRestartAnalysis

    import optimus_eq

    calls = []

    def fake_compile_fx(gm, example_inputs, config_patches=None, **kw):
        calls.append(gm)
        if len(calls) == 1:
            raise TensorifyScalarRestartAnalysis()
        return gm.forward

    def f(x):
        return torch.cat([t.tanh() for t in x.split(2, 1)], 1)

    monkeypatch.setattr(cfx, "compile_fx", fake_compile_fx)
    torch._dynamo.reset()
    x = rand(3, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.compile(f, backend=optimus_eq.backend("greedy"))(x)
    assert not [w for w in caught if "optimus_eq" in str(w.message)]
    torch.testing.assert_close(out, f(x))
    assert len(calls) == 2 and optimus_eq.last_reports[-1].fallback is None
    assert optimus_eq.last_reports[-1].ops_after.get("cat", 0) == 0  # the retraced graph, optimized


def test_post_grad_pass_checks_pattern_options_at_construction():
    import optimus_eq

    with pytest.raises(ValueError, match="batch_linear"):
        optimus_eq.post_grad_pass("greedy", pattern_options={"batch_linear": {"min_fuse_set_size": 2}})
    with pytest.raises(ValueError):
        optimus_eq.post_grad_pass("greedy", pattern_options={"batch_aten_tanh": {"no_such_option": 2}})
    optimus_eq.post_grad_pass("greedy", pattern_options={"batch_aten_tanh": {"min_fuse_set_size": 2}})


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_output_that_is_a_view_of_another_output(strategy):
    """``y = cat(x.split(3, 1), 1); return y, y[:, 1:]``: y folds to x, so both outputs alias the input and
    each got its own copy; in eager the second is a view into the first (an in-place change of y shows in
    it). Lowering now falls back (LoweringError) rather than return two unrelated tensors."""

    def f(x):
        y = torch.cat(x.split(3, 1), 1)
        return y, y[:, 1:]

    c = check(f, [rand(4, 6)], strategy, fallback_ok=True)
    y, v = c.outputs
    y.add_(100)
    assert bool((v > 50).all())


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_post_grad_detached_output_next_to_its_base(strategy):
    """Aten-IR returns ``alias(v)`` (the detach) and ``v`` (saved for an output that is a view of it);
    ``aten.alias`` is its input, so both outputs became one node, one tensor object: AOTAutograd detached
    it for the first output and the view output regenerated from it had no gradient ("grad of input 0 is
    missing"). Outputs that were distinct nodes now stay distinct objects (an alias view)."""

    def f(x):
        v = torch.stack([x, x], 0)
        return v.detach(), v[:, 0:7].unsqueeze(-3)

    aot_check(f, [_x((3, 4))], strategy)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_outputs_of_distinct_nodes_stay_distinct_objects(strategy):
    def f(x):
        y = torch.tanh(x)
        return y, y.view(y.shape)

    c = check(f, [rand(3, 4)], strategy, source="fx")
    assert c.outputs[0] is not c.outputs[1]


def test_output_overlap_check_under_fake_mode():
    """The output-overlap check enumerates addresses with torch ops; inside Inductor's fake mode they were
    fake tensors and ``.any()`` raised DataDependentOutputException (found by the post-grad fuzzer: every
    such graph fell back)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from optimus_bridge.overlap import may_overlap as _may_overlap

    with FakeTensorMode():
        y = torch.empty(4, 6)
        assert _may_overlap(y, y[:, 1:])
        assert not _may_overlap(y[:, :3], y[:, 3:])  # interleaved spans, no shared element
        assert not _may_overlap(y[:2], y[2:])


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("case", ["restrided", "unaliased"])
def test_one_output_returned_twice_gets_one_copy(strategy, case):
    """A fused member returned twice (``return a, b, a``) needed a copy (eager's strides, or to stop
    aliasing the other member): each position got its own copy, so the two results were no longer one
    tensor (an in-place change of one no longer showed in the other)."""
    if case == "restrided":
        def f(x):
            u = torch.unbind(x, 1)
            a, b = torch.relu(u[2]), torch.relu(u[3])
            return a, b, a
        xs = [rand(4, 4)]
    else:
        def f(x, y):
            a, b = torch.tanh(x), torch.tanh(y)
            return a, b, a
        xs = [rand(4, 4), rand(4, 4, seed=1)]

    c = check(f, xs, strategy, source="fx", pattern_options={"batch_relu": {"min_fuse_set_size": 2},
                                                             "batch_tanh": {"min_fuse_set_size": 2}})
    assert c.outputs[0] is c.outputs[2]


# -- session breaker -----------------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", STRATEGIES)
def test_no_grad_region_keeps_dynamo_requires_grad_meta(strategy):
    """A ``with torch.no_grad():`` in the model: dynamo records ``_set_grad_enabled`` calls (and
    ``_log_api_usage_once``) without meta, which made ``_ensure_meta`` rerun FakeTensorProp over the whole
    graph; FakeTensorProp stores detached FakeTensors, so every ``requires_grad`` was lost: the graph was
    priced as inference (``report.training`` False) and the narrows of the grad-taking ``x @ w`` were not
    lowered as one split."""
    import operator

    class F(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(rand(12, 12, seed=0))
            self.ws = torch.nn.ParameterList(rand(3, 5, seed=i + 1) for i in range(4))

        def forward(self, x):
            with torch.no_grad():
                scale = x.abs().amax()
            parts = torch.split(x @ self.w, 3, dim=1)
            return torch.stack([torch.relu(p) @ self.ws[i] for i, p in enumerate(parts)], 1) * scale

    c = check(F(), [rand(4, 12, seed=9)], strategy)
    assert c.report.training
    splits = [n for n in c.gm2.graph.nodes if n.target is torch.split]
    assert len(splits) == 1 and all(u.target is operator.getitem for u in splits[0].users), c.gm2.code


def _transposed(*shape):
    """A tensor of ``shape`` laid out transposed (strides increasing), as backward graphs often have."""
    return rand(*reversed(shape), seed=3).permute(*reversed(range(len(shape))))


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("case", ["one_piece", "every_piece", "cat_and_piece", "gapped_view"])
def test_post_grad_output_of_a_pointwise_moved_before_a_slice(strategy, case):
    """Post-grad, ``x[:2] * 3`` of a transposed x became ``(x * 3)[:2]`` (pointwise_through_slice): the
    output then has x's strides, eager's has dense ones, and Aten-IR lowering had no way to copy to a
    layout other than contiguous: the graph fell back with a warning (greedy: every case; eqsat:
    ``every_piece`` and ``gapped_view``; session breaker's fuzz: 9 of 210 post-grad cases). ``gapped_view``:
    eager's output is a view with gaps into a cat that folds away (the copy keeps the gaps)."""
    if case == "one_piece":
        def f(x):
            return x[:2] * 3
    elif case == "every_piece":
        def f(x):
            ps = torch.split(x, 2, 0)
            return ps[0] * 3, ps[1] * 3
    elif case == "cat_and_piece":
        def f(x):
            ps = torch.split(x, 2, 0)
            return torch.cat(ps, 1), ps[0] * 3
    else:
        def f(x):
            return torch.cat(torch.split(x, 2, 1), 1)[:, 1:], x.sum()

    x = _transposed(4, 6) if case == "gapped_view" else _transposed(8, 3, 3)
    aot_check(f, [x], strategy)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.int64])
def test_einsum_to_pointwise_keeps_narrow_integer_dtypes(strategy, dtype):
    """``einsum("ay,yz->az")`` of int32 became ``(x.unsqueeze(-1) * w).sum(-2)``, whose ``torch.sum``
    returns int64: the output changed dtype and greedy fell back (lowering's dtype check). Integers narrower
    than int64 are left to eager's einsum; int64 still becomes pointwise."""

    def f(x, w):
        return torch.einsum("ay,yz->az", x, w) * 2

    g = torch.Generator().manual_seed(0)
    x, w = (torch.randint(-4, 4, s, generator=g).to(dtype) for s in ((3, 4), (4, 2)))
    r = check(f, [x, w], strategy, grad=False, patterns=["einsum_to_pointwise_pass", "normalization_pass"]).report
    assert bool(r.rule_matches.get("einsum_to_pointwise_pass")) == (dtype == torch.int64)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_decompose_mm_keeps_narrow_integer_dtypes(strategy, dtype):
    """The same for decompose_mm_pass (post-grad): an int32 ``[1, 5] @ [5, 3]`` (within the CPU size guards)
    became ``aten.sum`` of a product, int64; greedy fell back with a warning."""
    g = torch.Generator().manual_seed(0)
    x, w = (torch.randint(-4, 4, s, generator=g).to(dtype) for s in ((1, 5), (5, 3)))
    c = aot_check(lambda x, w: (x @ w) * 2, [x, w], strategy, grad=False,
                  patterns=["decompose_mm_pass", "normalization_aten_pass"])
    assert bool(c.reports[0].rule_matches.get("decompose_mm_pass")) == (dtype == torch.int64)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("region", ["autocast", "no_grad"])
def test_values_live_across_a_global_state_region_are_extracted(strategy, region):
    """``relu`` of split pieces computed before an autocast (or no_grad) region and concatenated after it:
    lowering emits such live values before the region, but they were not extraction roots; once the cat
    after the region folded (relu of the whole tensor, then narrows), their classes had no chosen e-node and
    lowering raised KeyError (fallback with a warning)."""

    class F(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(6, 6)

        def forward(self, xs):
            ps = xs.split(6, 1)
            a = [torch.relu(p) for p in ps[:2]]
            ctx = torch.autocast("cpu", dtype=torch.bfloat16) if region == "autocast" else torch.no_grad()
            with ctx:
                b = [torch.relu(self.lin(p)) for p in ps[2:]]
            return torch.cat(a + [t.float() for t in b], 1)

    torch.manual_seed(0)
    check(F(), [rand(5, 24, seed=4)], strategy, pattern_options={"batch_relu": {"min_fuse_set_size": 2}})


def test_zero_row_weight_in_a_fused_linear_keeps_its_empty_gradient():
    """batch_linear_lhs fused F.linear(x, w1), w1 of 0 rows, with F.linear(x, w2); eqsat then folded the
    weight cat to w2, w1 left the graph and got no gradient (None) where eager gives an empty [0, 6] one.
    A linear with no output features is no longer a member."""

    def f(x, w1, w2):
        return F.linear(x, w1), F.linear(x, w2)

    for strategy in STRATEGIES:
        r = check(f, [rand(4, 6), rand(0, 6), rand(7, 6)], strategy,
                  pattern_options={"batch_linear_lhs": {"min_fuse_set_size": 2}}).report
        assert not r.rule_matches.get("batch_linear_lhs")


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("dynamic", [False, True])
def test_view_chain_through_the_inputs_own_shape(strategy, dynamic):
    """``x.view(4, -1).view(4, 3, 6).view(4, -1)`` (issue 11, class 6): the middle view is x itself, so the
    last view is congruent to the first. Greedy's destructive rewrite of the last view (a reshape of a
    reshape) removed an e-node that the merge then made the first view's own, leaving its class a self loop:
    ``extract failed: NoAcyclicTerm``, the original graph returned. Now such a class keeps its removed e-node
    as a last resort (the extraction is retried with ``EGraphView.from_egraph(..., restore_subsumed=True)``,
    ``extract.view._restore_subsumed``) and both strategies fold the chain to one reshape."""
    from fuzzing import run_program

    def f(x):
        n = x.shape[0]
        return (x.view(n, -1).view(n, x.shape[1], x.shape[2]).view(n, -1) * 2,)

    def make_inputs():
        x = rand(4, 3, 6, seed=0).requires_grad_()
        return [x], [x]

    got = run_program(f, make_inputs, [strategy], dynamic=dynamic)[strategy]
    assert got.kind == "ok", got
    if not dynamic:
        assert got.reports[0].ops_after.get("reshape", 0) + got.reports[0].ops_after.get("view", 0) == 1


def test_restored_subsumed_enodes_only_for_emptied_classes():
    """The last resort keeps a subsumed e-node only where its e-class has no other e-node, and never a
    subsumed self loop."""
    from optimus_eq.extract.view import _restore_subsumed

    classes = {1: [10], 2: []}
    subsumed = [("Reshape", 1, [0], [(4, 18)]), ("Reshape", 2, [0], [(4, 18)]), ("Reshape", 3, [0], [(2,)])]
    assert _restore_subsumed(classes, subsumed) == subsumed[1:]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_fold_after_a_batch_closes_a_cycle_through_the_group(strategy):
    """Fuzz seed 1007226 (H200 run of session 8), minimized: ``tanh(cat([v]))`` and ``tanh(relu(tanh(v)))`` are
    independent when greedy's batch_tanh fuses them; its later ``cat([v]) -> v`` makes the first member's input
    congruent to ``v``, so the second member's input now reads the group's own first output: a cycle, and the
    members' originals were removed. Greedy fell back (``extract failed: NoAcyclicTerm``). The extraction now
    retries with every removed e-node back (``restore_subsumed="all"``) and keeps the graph's rewrites."""
    from fuzzing import run_program

    def f(x):
        v2 = x.narrow(0, 2, 2).flatten(0)
        v3 = v2.reshape(6)
        v4 = torch.cat([v3], 0)
        v12, v13, v14 = (F.relu(torch.tanh(t)) for t in (v2, v3, v4))
        return torch.tanh(v12), torch.tanh(v13), torch.tanh(v14), v14

    def make_inputs():
        return [rand(8, 3, seed=0)], []

    got = run_program(f, make_inputs, [strategy], pattern_options={"batch_tanh": {"min_fuse_set_size": 2}})[strategy]
    assert got.kind == "ok", got
    assert got.reports[0].fallback is None
    assert not got.reports[0].ops_after.get("cat")


def test_zero_size_pieces_keep_the_egraph_consistent():
    """Found by the fuzzer (seed 40061), minimized by ``fuzzing.minimize``: x1 [8, 0, 2]; the zero-length
    ``cat([v2, x1], 1).narrow(1, 0, 0)`` matched split_of_cat's whole-input rule for both zero-length
    inputs, merging x1 with ``x1.detach()``; extraction refused the e-graph as inconsistent (``extract
    failed: RuntimeError: inconsistent e-graph (Unary(...) in its own argument's e-class)``) and eqsat fell
    back. The rule now needs a piece of positive length."""
    from fuzzing import SMALL, run_program

    def f(x0, x1):
        v2 = x1.detach()
        v4 = torch.split(v2, 1, dim=-1)[0]
        v6 = torch.cat([v2, x1], 1)
        v9 = torch.unbind(v4 * v4, -1)[0]
        v6.narrow(1, 0, 0)
        return (torch.stack([v9], -2),)

    def make_inputs():
        x0, x1 = rand(3, 3, 2, 2, seed=0).bfloat16().requires_grad_(), rand(8, 0, 2).bfloat16().requires_grad_()
        return [x0, x1], [x0, x1]

    got = run_program(f, make_inputs, ["eqsat"], pattern_options=SMALL)["eqsat"]
    assert got.kind == "ok", got


# -- post-grad output aliasing (fuzz_h200_2026-12-01) ----------------------------------------------

def _post_grad_ok(f, make_inputs, ok=("ok",)):
    from fuzzing import SMALL, run_program

    got = run_program(f, make_inputs, list(STRATEGIES), level="post_grad", pattern_options=SMALL)
    for strategy, outcome in got.items():
        assert outcome.kind in ok, (strategy, outcome)


def test_post_grad_outputs_that_overlap_in_eager_overlap_here():
    """Seed 102947: ``v2 = stack([x]); return v2, v2.split(6, 3)[0]``. AOTAutograd returns both outputs as
    the graph gives them (``non_alias``, ``unsafe_view_alias``: it regenerates only aliases of inputs and
    intermediate bases), so they must overlap as in eager. The stack became a view of the input, and
    each output got its own copy: two tensors where eager has one. Output aliasing is now kept at Aten-IR
    as at Torch-IR (``output_alias_nodes``, and lowering's overlap check at every level)."""

    def f(x0):
        v2 = torch.stack([x0], -4)
        return (x0.permute([3, 0, 2, 1]), v2, v2.clamp(min=0.1), torch.split(v2, 6, dim=3)[0])

    def make_inputs():
        x = rand(8, 4, 6, 1, seed=1).requires_grad_()
        return [x], [x]

    _post_grad_ok(f, make_inputs)


def test_post_grad_lone_output_gets_the_copy():
    """Seed 108637: ``stack([v4])`` (a new tensor in eager) became ``v4.unsqueeze`` here, a view of the
    storage that two other outputs (views of v4) share as in eager. The copy must go to the stack's output,
    not to one of the pair (which then no longer overlapped: a fallback before)."""

    def f(x1):
        v4 = (x1 + x1).reshape(1, -1).split(1, 0)[0]
        return (torch.stack([v4], 2), v4.unsqueeze(0), v4.view(-1))

    def make_inputs():
        return [rand(1, 8, 2, 4, seed=2)], []

    _post_grad_ok(f, make_inputs)


def test_post_grad_view_of_an_empty_input_is_still_a_view():
    """Seed 108775: x of shape [6, 0]; ``cat([x]).detach()`` folded to ``x.detach()``, a view of the
    input that requires grad (through AOTAutograd's Function), where eager's is a new tensor. Storage
    identity ignored empty tensors; output aliasing now counts them."""

    def f(x0):
        return (torch.stack([x0, x0], 2), x0.detach(), torch.cat([x0], -1).detach(), x0)

    def make_inputs():
        x = rand(6, 0, seed=3).requires_grad_()
        return [x], [x]

    _post_grad_ok(f, make_inputs)


def test_post_grad_cast_of_a_folded_input_does_not_require_grad():
    """Seed 108373: ``prims.convert_element_type`` sets requires_grad from its input even under no_grad
    (AOTAutograd runs an inference graph so). Folding the reshape/clone chain before it made its input the
    graph input, which requires grad: the output required grad where eager's does not. Such a kept cast
    whose input became a graph input is emitted as ``aten._to_copy`` (``IRLevel.grad_mode_blind``)."""

    def f(x0):
        v2 = torch.cat([x0.reshape(8, 6)], 1)
        return (v2.reshape(8, -1).view(8, 6).reshape(8, -1).to(torch.bfloat16).detach(),)

    def make_inputs():
        x = rand(8, 6, seed=4).half().requires_grad_()
        return [x], [x]

    _post_grad_ok(f, make_inputs)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_restrided_output_that_overlaps_another_falls_back(strategy):
    """Seed 103040: x permuted; ``v = sigmoid(cat([x * x], 1))`` is contiguous in eager, x's layout once the
    cat folds; outputs ``v.unsqueeze(0)`` and ``v[3:]`` share v's storage. Lowering gave each its own
    contiguous copy: eager's layout, but no longer one storage. It now falls back (the original graph)."""
    from fuzzing import run_program

    def f(x1):
        v5 = torch.sigmoid(torch.cat([x1 * x1], 1))
        return (v5.unsqueeze(0), v5[3:])

    def make_inputs():
        return [rand(2, 3, 6, seed=5).permute(2, 1, 0)], []

    got = run_program(f, make_inputs, [strategy])[strategy]
    assert got.kind in ("ok", "fallback"), got


def test_post_grad_view_of_a_cast_of_an_input_does_not_require_grad():
    """Seed 401433 (H200 fuzz, merged code): ``stack([x1.expand(3).to(bf16)], 1).detach()``. The kept
    ``prims.convert_element_type`` of a view of the input requires grad under no_grad (the quirk of the
    seed 108373 test); eager's graph cloned it (the stack), ours made the stack a view of it, so the output
    required grad. A kept cast of an input or of a view of one is now emitted as ``aten._to_copy``."""

    def f(x0, x1):
        return (torch.stack([x1.expand(3).to(torch.bfloat16)], 1).detach(), x0.relu())

    def make_inputs():
        x0, x1 = rand(3, 8, seed=6).half().requires_grad_(), rand(1, seed=7).half().requires_grad_()
        return [x0, x1], [x0, x1]

    _post_grad_ok(f, make_inputs)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_new_output_with_size_one_dims_gets_eager_layout(strategy):
    """Seed 803065 (H200 fuzz): x permuted, ``stack([x.detach()[1:], relu(split piece)], 1)`` of shape
    (1, 2, 1, 2). The batched relu made it a cat of narrows of permuted reshapes; FakeTensor's meta said
    contiguous, as eager's, but the real cat followed the channels-last format its inputs' size-1 dim
    strides suggest: (4, 1, 4, 2) where eager has (4, 2, 2, 1). A new output node with size-1 dims whose
    eager layout is contiguous now ends in ``contiguous()`` (itself when it already is)."""
    from fuzzing import run_program

    def f(x0):
        v1 = x0.detach()
        v3 = v1[1:]
        v6 = torch.split(v3, 1, dim=1)[0]
        v8 = torch.relu(v6)
        return (torch.relu(v6), torch.stack([v3, v8], 1), x0)

    def make_inputs():
        return [rand(2, 1, 2, seed=8).permute(2, 1, 0)], []

    got = run_program(f, make_inputs, [strategy], pattern_options={"batch_relu": {"min_fuse_set_size": 2}})
    assert got[strategy].kind == "ok", got[strategy]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_restrided_output_sharing_storage_without_overlap_is_copied(strategy):
    """Seed 700054: ``unbind(sigmoid(piece), -2)`` returns two disjoint slices of one tensor; the batched
    sigmoid made that tensor a slice of a wider one, so both outputs had other strides than eager's. Lowering
    fell back, because a copy of one would no longer share storage with the other; but no write through one
    reaches the other, so the copies are exact (and the fuzzer's aliasing check agrees)."""
    from fuzzing import SMALL, run_program

    def f(x0):
        v2, v3, v4, v5 = torch.split(x0, 1, dim=2)
        v10, v11, v12, v13 = (torch.sigmoid(v) for v in (v2, v3, v4, v5))
        v16, v17 = torch.unbind(v12, -2)
        return v16, v17, v10 * v11 * v13

    def make_inputs():
        return [rand(6, 2, 4, seed=9)], []

    got = run_program(f, make_inputs, [strategy], pattern_options=SMALL)[strategy]
    assert got.kind == "ok", got


def test_post_grad_restride_ignores_storage_shared_with_saved_tensors():
    """Seed 800513: at Aten-IR the forward graph also returns tensors saved for backward; a user output that
    is a view of a saved ``relu`` got other strides from a batched relu and the graph fell back, because the
    copy would not share storage with the saved tensor. Only outputs the user sees count."""

    def f(x1):
        v9, v10 = torch.unbind(x1, -2)
        v11, v12 = F.relu(v9), F.relu(v10)
        return torch.relu(torch.relu(v12)), v11.reshape(3, -1).view(3, 8).reshape(3, -1), v11.to(torch.bfloat16)

    def make_inputs():
        x1 = rand(3, 2, 8, seed=10).requires_grad_()
        return [x1], [x1]

    _post_grad_ok(f, make_inputs)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_segment_keeps_a_view_of_an_input_beside_a_folded_internal_output(strategy):
    """Seed 905020 (H200 fuzz, final code of the regions change): before a ``no_grad`` region,
    ``v1 = concat([x0])`` (read only after the region) folds to x0 and ``v4`` is a view of x0 returned to the
    user. In the first segment both are outputs that share x0's storage; the copy meant for the pair went to
    v4, the one that must stay a view. A segment's internal outputs may share anything: the other output is
    copied only if it needs a copy for itself."""
    from fuzzing import run_program

    def f(x0, x1):
        v1 = torch.concat([x0], 0)
        v2 = torch.cat([x1], 0)
        v4 = x0.reshape(8, -1).view(8).reshape(8, -1)
        with torch.no_grad():
            v5 = torch.sigmoid(v2)
        v6 = v4.reshape(8, -1).view(8, 1).reshape(8, -1)
        return (v4, v5, v6, torch.concat([v1], -1), x0)

    def make_inputs():
        x0, x1 = rand(8, seed=11).bfloat16().requires_grad_(), rand(4, seed=12).bfloat16().requires_grad_()
        return [x0, x1], [x0, x1]

    got = run_program(f, make_inputs, [strategy])[strategy]
    assert got.kind == "ok", got


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_float32_gradient_through_float16_outputs_is_judged_at_float16(strategy):
    """Seed 902187 (H200 fuzz): ``tanh(x.half())`` and ``tanh(x.half().reshape(6, 2))`` are one value; merged,
    their two float16 output gradients are summed before the tanh backward, in eager after it. Ours was 1.2
    float16 ulps from the float64 gradient, eager 0.2; the oracle's ulp floor was float32's (the leaf's
    dtype). The gradient flows back through float16, so its floor is float16's now (``fuzzing._precision``)."""
    from fuzzing import SMALL, run_program

    def f(x0):
        v3 = x0.to(torch.float16)
        return torch.tanh(v3), torch.tanh(v3.reshape(6, 2))

    def make_inputs():
        g = torch.Generator().manual_seed(122407982)
        x0 = torch.randn((6, 2), generator=g).requires_grad_()
        return [x0], [x0]

    got = run_program(f, make_inputs, [strategy], pattern_options=SMALL)[strategy]
    assert got.kind == "ok", got
