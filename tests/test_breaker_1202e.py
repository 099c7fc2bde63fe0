"""Breaker findings of 2026-12-02 (fifth session): inputs that gave wrong results or crashed where eager works,
each compared with eager."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import optimus_eq
from conftest import check, dynamo_graph


def _rand(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _optimize_quietly(gm, example_inputs, strategy, **options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gm2, report = optimus_eq.optimize(gm, example_inputs, strategy=strategy, **options)
    ours = [str(w.message) for w in caught if "optimus_eq" in str(w.message)]
    assert report.fallback is None and not ours, (report.fallback, ours)
    return gm2, report


# Found: linears reading one input whose weights are graph inputs, compiled with ``dynamic=True``: Dynamo makes the
# weights' output-feature counts symbolic, batch_linear_lhs grouped them anyway and summed the symbolic tokens
# (negative integers) into the narrows' starts and lengths, and lowering failed ("narrow(): length must be
# non-negative"): the whole graph fell back to the original with a warning, every other rewrite lost.
@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_linears_of_one_input_with_symbolic_output_features_do_not_make_the_graph_fall_back(strategy):
    def f(x, w0, w1, w2, b0, b1, b2):
        return torch.cat([F.linear(x, w, b) for w, b in ((w0, b0), (w1, b1), (w2, b2))], -1).tanh()

    args = [_rand(4, 5), _rand(3, 5, seed=1), _rand(4, 5, seed=2), _rand(2, 5, seed=3), _rand(3, seed=4),
            _rand(4, seed=5), _rand(2, seed=6)]
    gm, ex = dynamo_graph(f, *args, dynamic=True)
    gm2, _ = _optimize_quietly(gm, ex, strategy, pattern_options={"batch_linear_lhs": {"min_fuse_set_size": 2}})
    torch.testing.assert_close(gm2(*ex), gm(*ex))


def _transposed_outputs_of_fused_ops(x, w1, w2):
    """Two linears of one input (batch_linear_lhs) and tanhs of an unbind (pointwise_through_slice, batch_tanh):
    each output a transposed view of a value the rewrite computes as a narrow or select of a wider one."""
    a, b = x.unbind(1)
    return F.linear(a, w1).t(), F.linear(a, w2).t(), a.tanh().t(), b.tanh().t()


# Found: with a symbolic batch (the recompile ``torch.compile``'s default ``dynamic=None`` makes at the second batch
# size, ``mark_dynamic``, ``dynamic=True``) an output whose eager layout is a transposed new tensor (strides
# ``(1, s0)``) and whose rewritten value is a view of a wider one (``(1, 2 * s0)``) needs a copy with eager's
# strides; the stride fix took only static layouts and raised LoweringError: the whole graph fell back with a
# warning (static batch: optimized). Now a permuted contiguous layout is copied as permute, clone, permute back.
@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_transposed_outputs_under_a_symbolic_batch_are_optimized_with_eager_strides(strategy):
    options = {name: {"min_fuse_set_size": 2} for name in ("batch_linear_lhs", "batch_tanh")}
    w1, w2 = _rand(3, 6, seed=1), _rand(2, 6, seed=2)
    optimus_eq.last_reports.clear()
    compiled = torch.compile(_transposed_outputs_of_fused_ops,
                             backend=optimus_eq.backend(strategy=strategy, compile=False, pattern_options=options))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for batch in (5, 7, 9):  # 7: Dynamo recompiles with a symbolic batch, which 9 reuses
            x = _rand(batch, 2, 6, seed=batch)
            got, want = compiled(x, w1, w2), _transposed_outputs_of_fused_ops(x, w1, w2)
            for g, e in zip(got, want):
                assert g.stride() == e.stride()
                torch.testing.assert_close(g, e)
    assert not [w for w in caught if "optimus_eq" in str(w.message)], [str(w.message) for w in caught]
    assert len(optimus_eq.last_reports) == 2 and all(r.fallback is None for r in optimus_eq.last_reports)
    assert optimus_eq.last_reports[-1].patterns_fired["batch_linear_lhs"] == 1


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_post_grad_transposed_outputs_under_a_symbolic_batch_are_optimized_with_eager_strides(strategy):
    """The same at Aten-IR: AOTAutograd's forward graph under ``dynamic=True`` (the post-grad pass)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor.decomposition import select_decomp_table

    def f(x):
        a, b, c = x.unbind(1)
        return torch.cat([a, b, c], 1).t(), (a * 2).t(), (b * 2).t()

    pass_ = optimus_eq.post_grad_pass(strategy)
    fallbacks = []

    def compiler(gm, example_inputs):
        pass_(gm.graph)
        fallbacks.append(optimus_eq.last_reports[-1].fallback)
        gm.recompile()
        return make_boxed_func(gm)

    torch._dynamo.reset()
    compiled = torch.compile(f, dynamic=True, backend=aot_autograd(
        fw_compiler=compiler, bw_compiler=compiler, decompositions=select_decomp_table()))
    for batch in (5, 7):
        x = _rand(batch, 3, 4, seed=batch).requires_grad_()
        got, want = compiled(x), f(x)
        for g, e in zip(got, want):
            assert g.stride() == e.stride()
            torch.testing.assert_close(g, e)
        sum(o.sum() for o in got).backward()
    assert fallbacks and all(f is None for f in fallbacks), fallbacks


class _Norms(torch.nn.Module):
    """Per-field LayerNorms (batch_layernorm: their weights and biases become packable stacks)."""

    def __init__(self, fields: int = 3, dim: int = 4) -> None:
        super().__init__()
        self.dim = dim
        self.norms = torch.nn.ModuleList([torch.nn.LayerNorm(dim) for _ in range(fields)])

    def forward(self, x):
        return torch.cat([n(p).relu() for p, n in zip(x.split(self.dim, 1), self.norms)], 1)


# Found: when Inductor fails on the optimized graph the backend compiles the original one instead (one warning);
# but parameter packing had already moved the parameters into their buffers (a storage offset Dynamo's symbolic
# context does not know), and compile_fx of the original graph raised ``int(sym)=0 != hint=4``: a crash
# (BackendCompilerFailed) instead of the promised fallback. Now the fallback compiles with detached aliases of the
# moved parameters, as packing does for the packed graph's kept inputs.
@pytest.mark.parametrize("train", [False, True])
def test_inductor_failure_on_a_packed_graph_falls_back_to_the_original(monkeypatch, no_compile_cache, train):
    import copy

    import torch._inductor.compile_fx as cfx

    real, calls = cfx.compile_fx, []

    def failing_once(gm, example_inputs, config_patches=None, **kw):
        calls.append(gm)
        if len(calls) == 1:
            raise RuntimeError("inductor says no")
        return real(gm, example_inputs, config_patches=config_patches, **kw)

    monkeypatch.setattr(cfx, "compile_fx", failing_once)
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = _Norms()
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend=optimus_eq.backend(
        strategy="greedy", pattern_options={"batch_layernorm": {"min_fuse_set_size": 2}}))
    x = _rand(4, 12)
    with warnings.catch_warnings(record=True) as caught, torch.set_grad_enabled(train):
        warnings.simplefilter("always")
        got, want = compiled(x), eager(x)
    ours = [str(w.message) for w in caught if "optimus_eq" in str(w.message)]
    assert len(ours) == 1 and "inductor says no" in ours[0], ours
    assert len(calls) >= 2 and calls[1] is not calls[0]  # compile_fx re-enters itself with the config patches
    assert any(n.startswith("parameter packing") for n in optimus_eq.last_reports[-1].notes)
    torch.testing.assert_close(got, want)
    if train:
        (got * torch.arange(12.0)).sum().backward()
        (want * torch.arange(12.0)).sum().backward()
        for p, q in zip(model.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad)


# Found: ``as_strided`` reads its input's storage at explicit strides from its storage offset, so its values depend
# on the input's layout, not only its values; the translator kept it as an opaque op but let its input be rewritten:
# ``a.tanh()`` of a split piece became a narrow of one batched tanh of the whole input, ``x @ q`` a narrow of one
# fused GEMM, and ``as_strided`` then read other elements (silently wrong values, both strategies). Now the view
# chain as_strided reads stays as written (``aliasing.layout_reader_nodes``).
def _as_strided_of_a_rewritten_piece(x):
    a, b = x.split(3, 1)
    return a.tanh().as_strided((2, 2), (3, 1), 1), b.tanh() * 2


def _as_strided_of_a_fused_gemm(x, p, q):
    return torch.matmul(x, p) * 2, torch.matmul(x, q).as_strided((2, 2), (4, 1))


def _as_strided_of_an_op_whose_input_changed_layout(x):
    # the cat of x.t()'s pieces folds to x.t(): eager's ``a * 3`` is contiguous, the kept mul of the folded
    # input follows its transposed layout; lowering gives the owner of the storage as_strided reads a copy laid
    # out as eager's (``lower_outputs.fix_kept_layouts``)
    p, q = x.t().split(2, 0)
    return (torch.cat([p, q], 0) * 3).as_strided((2, 2), (6, 1))


def _as_strided_scatter_into_a_rewritten_piece(x, s):
    # as_strided_scatter writes ``s`` into a copy of its input at explicit strides: the same layout dependence
    a, b = x.split(3, 1)
    return torch.as_strided_scatter(a.tanh(), s, (2, 2), (3, 1), 1), b.tanh() * 2


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_as_strided_scatter_into_a_rewritten_value_writes_eagers_layout(strategy):
    check(_as_strided_scatter_into_a_rewritten_piece, [_rand(5, 6), _rand(2, 2, seed=1)], strategy,
          pattern_options={"batch_tanh": {"min_fuse_set_size": 2}})


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
@pytest.mark.parametrize("case", ["piece", "gemm", "owner"])
def test_as_strided_of_a_rewritten_value_reads_eagers_layout(strategy, case):
    options = {name: {"min_fuse_set_size": 2} for name in ("batch_tanh", "batch_gemm_lhs")}
    if case == "piece":
        check(_as_strided_of_a_rewritten_piece, [_rand(5, 6)], strategy, pattern_options=options)
    elif case == "gemm":
        check(_as_strided_of_a_fused_gemm, [_rand(5, 6), _rand(6, 4, seed=1), _rand(6, 4, seed=2)], strategy,
              pattern_options=options)
    else:
        c = check(_as_strided_of_an_op_whose_input_changed_layout, [_rand(6, 4)], strategy)
        assert not c.report.ops_after.get("cat"), dict(c.report.ops_after)  # the fold happened


def _view_as_another_dtype_of_a_rewritten_piece(x):
    a, b, c = x.split([1, 2, 3], 1)
    return a.tanh() * 2, b.tanh().view(torch.float32), c.tanh() * 2


# Found: ``view(dtype)`` of another element size needs its input's storage offset divisible; the rewrite made
# ``b.tanh()`` a narrow at offset 1 of a batched tanh, and lowering failed: the whole graph fell back with a warning.
# Now a layout reader too (its input stays as written).
@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_view_as_another_dtype_of_a_rewritten_piece_does_not_fall_back(strategy):
    check(_view_as_another_dtype_of_a_rewritten_piece, [_rand(4, 6, dtype=torch.float16)], strategy, grad=False,
          pattern_options={"batch_tanh": {"min_fuse_set_size": 2}})



def _write_through_a_reshape_of_an_op_whose_input_changed_layout(x):
    p, q = x.t().split(2, 0)
    t = torch.cat([p, q], 0) * 3
    y = t.reshape(-1)
    y.add_(1)
    return t


# Found: ``reshape`` is a view only for some layouts. The mutation kept ``t``'s alias group as written, but ``t``'s
# input, the cat of x.t()'s pieces, folded to ``x.t()``: the kept ``* 3`` came out transposed, ``reshape`` copied
# where eager's viewed, and ``y.add_(1)`` no longer reached ``t`` (silently wrong values, both strategies). Now a
# kept owner whose layout a kept view observes gets a copy laid out as eager's (``lower_outputs.fix_kept_layouts``).
@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_a_write_through_a_reshape_reaches_its_base_as_in_eager(strategy):
    c = check(_write_through_a_reshape_of_an_op_whose_input_changed_layout, [_rand(6, 4)], strategy, grad=False)
    assert not c.report.ops_after.get("cat"), dict(c.report.ops_after)  # the fold happened
