"""Post-grad (Aten-IR) horizontal patterns: batch_linear_post_grad and batch_aten_*.

Each case is an Aten-IR program of n independent identical ops on random shapes and dtypes (fp32, bf16),
compiled with AOTAutograd (forward and backward graphs), optimized in place by the post-grad pass with
one strategy, and compared with eager (outputs, dtypes, strides, gradients: ``test_aten.aot_check``).
The group analysis and builders are those of the pre-grad patterns (docs/DESIGN.md, "Horizontal fusion").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conftest import STRATEGIES
from test_aten import _x, aot_check

aten = torch.ops.aten
DTYPES = (torch.float32, torch.bfloat16)
SMALL = {"min_fuse_set_size": 2}


@dataclass
class HCase:
    fn: Callable
    inputs: list
    n: int
    note: str = ""
    options: dict | None = None     # the pattern's options (default: groups from 2 members)


def _shape(draw, rank_min=1, rank_max=3):
    return [draw(st.integers(1, 5)) for _ in range(draw(st.integers(rank_min, rank_max)))]


@st.composite
def linear_case(draw) -> HCase:
    """n aten.mm / aten.addmm (via F.linear, as AOTAutograd decomposes it) of equal shapes. Sizes >= 2: Inductor's
    decomposition table turns CPU mms with a unit dimension into pointwise ops before any post-grad pass."""
    n, M, K, N = draw(st.integers(2, 6)), draw(st.integers(2, 5)), draw(st.integers(2, 6)), draw(st.integers(2, 5))
    bias, dtype, seed = draw(st.booleans()), draw(st.sampled_from(DTYPES)), draw(st.integers(0, 2**16))
    inputs = [_x((M, K), dtype, seed + i) for i in range(n)] + [_x((N, K), dtype, seed + 100 + i) for i in range(n)]
    if bias:
        inputs += [_x((N,), dtype, seed + 200 + i) for i in range(n)]

    def fn(*a):
        xs, ws, bs = a[:n], a[n:2 * n], a[2 * n:] or [None] * n
        return [torch.nn.functional.linear(x, w, b) for x, w, b in zip(xs, ws, bs)]

    return HCase(fn, inputs, n, f"n={n} M={M} K={K} N={N} bias={bias} {dtype}")


def _unary(op):
    @st.composite
    def case(draw) -> HCase:
        n, shape = draw(st.integers(2, 6)), _shape(draw)
        dtype, seed = draw(st.sampled_from(DTYPES)), draw(st.integers(0, 2**16))

        def fn(*xs):
            return [op(x) for x in xs]

        return HCase(fn, [_x(shape, dtype, seed + i) for i in range(n)], n, f"n={n} shape={shape} {dtype}")

    return case


def _binary(name):
    ops = {"add": (aten.add.Tensor, aten.add.Scalar), "sub": (aten.sub.Tensor, aten.sub.Scalar),
           "mul": (aten.mul.Tensor, aten.mul.Scalar), "div": (aten.div.Tensor, aten.div.Scalar)}

    @st.composite
    def case(draw) -> HCase:
        n, shape = draw(st.integers(2, 6)), _shape(draw)
        dtype, seed = draw(st.sampled_from(DTYPES)), draw(st.integers(0, 2**16))
        form = draw(st.sampled_from(["tensor", "scalar", "alpha", "mode"] if name in ("add", "sub", "div")
                                    else ["tensor", "scalar"]))
        if form == "alpha" and name == "div":
            form = "mode"
        if form == "mode" and name != "div":
            form = "alpha"
        if form == "alpha" and dtype == torch.bfloat16:
            # eager's CPU add/sub with alpha rounds alpha * y differently in its vectorized body and its
            # scalar tail, so the same bf16 element differs with the tensor's size (measured: 4 ulps
            # under cancellation): no fixed reference to compare a batched bf16 op with
            dtype = torch.float32
        tensor_op, scalar_op = ops[name]
        c = draw(st.sampled_from([0.5, 2.0, -3.0]))
        mode = draw(st.sampled_from(["trunc", "floor"]))

        def fn(*a):
            xs, ys = a[:n], a[n:]
            if form == "scalar":
                return [scalar_op(x, c) for x in xs]
            if form == "alpha":
                return [tensor_op(x, y, alpha=c) for x, y in zip(xs, ys)]
            if form == "mode":
                return [aten.div.Tensor_mode(x, y, rounding_mode=mode) for x, y in zip(xs, ys)]
            return [tensor_op(x, y) for x, y in zip(xs, ys)]

        inputs = [_x(shape, dtype, seed + i) for i in range(2 * n)]
        if name == "div":  # keep divisors away from zero (and rounding away from ties)
            inputs = inputs[:n] + [y.sign().where(y != 0, torch.ones_like(y)) * (y.abs() + 0.5) for y in inputs[n:]]
        return HCase(fn, inputs, n, f"n={n} shape={shape} {dtype} form={form} c={c} mode={mode}")

    return case


#: CPU guards raised so that the small test matrices qualify (upstream's CPU default is M <= 1, which
#: Inductor's own decomposition table already turns into pointwise ops before any post-grad pass)
DECOMPOSE_OPTIONS = {"cpu_max_first_dimension_decomposition": 8}


@st.composite
def decompose_mm_case(draw) -> HCase:
    """One aten.mm, aten.addmm or aten.bmm inside the (raised) CPU size guards, plus one outside them."""
    kind = draw(st.sampled_from(["mm", "addmm", "bmm"]))
    M, K, N, B = (draw(st.integers(2, 6)) for _ in range(4))
    dtype, seed = draw(st.sampled_from(DTYPES)), draw(st.integers(0, 2**16))
    big = _x((12, K), dtype, seed + 9)  # first dimension 12 > 8: left alone

    if kind == "bmm":
        inputs = [_x((min(B, 8), M, K), dtype, seed), _x((min(B, 8), K, N), dtype, seed + 1)]

        def fn(a, b, big):
            return aten.bmm.default(a, b), aten.mm.default(big, b[0])
    else:
        inputs = [_x((M, K), dtype, seed), _x((K, N), dtype, seed + 1)]
        if kind == "addmm":
            inputs.append(_x((N,), dtype, seed + 2))

        def fn(a, b, *rest):
            *bias, big = rest
            y = aten.addmm.default(bias[0], a, b) if bias else aten.mm.default(a, b)
            return y, aten.mm.default(big, b)

    return HCase(fn, inputs + [big], 1, f"{kind} M={M} K={K} N={N} B={B} {dtype}", DECOMPOSE_OPTIONS)


@st.composite
def embedding_case(draw) -> HCase:
    """n aten.embedding lookups (via F.embedding) of one dim into tables of their own rows, ids of their own
    shapes (repeats), outputs flattened into one cat; the backward graph keeps eager's per-table backward."""
    n, dim = draw(st.integers(2, 5)), draw(st.integers(1, 4))
    dtype, seed = draw(st.sampled_from(DTYPES)), draw(st.integers(0, 2**16))
    rows = [draw(st.integers(1, 6)) for _ in range(n)]
    shapes = [tuple(draw(st.integers(1, 3)) for _ in range(draw(st.integers(1, 2)))) for _ in range(n)]
    g = torch.Generator().manual_seed(seed)
    ids = [torch.randint(0, r, s, generator=g) for r, s in zip(rows, shapes)]
    tables = [_x((r, dim), dtype, seed + 1 + i) for i, r in enumerate(rows)]

    def fn(*a):
        return torch.cat([torch.nn.functional.embedding(x, w).reshape(-1) for x, w in zip(a[:n], a[n:])])

    return HCase(fn, ids + tables, n, f"n={n} dim={dim} rows={rows} ids={shapes} {dtype}")


HORIZONTAL_CASES = {
    "batch_aten_embedding": embedding_case,
    "decompose_mm_pass": decompose_mm_case,
    "batch_linear_post_grad": linear_case,
    "batch_aten_tanh": _unary(aten.tanh.default),
    "batch_aten_sigmoid": _unary(aten.sigmoid.default),
    "batch_aten_relu": _unary(aten.relu.default),
    "batch_aten_add": _binary("add"),
    "batch_aten_sub": _binary("sub"),
    "batch_aten_mul": _binary("mul"),
    "batch_aten_div": _binary("div"),
}


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", sorted(HORIZONTAL_CASES))
@given(data=st.data())
def test_post_grad_horizontal_soundness(name, strategy, data):
    case = data.draw(HORIZONTAL_CASES[name](), label="case")
    grad = "mode" not in case.note  # rounding division has no useful gradient
    c = aot_check(case.fn, case.inputs, strategy, patterns=[name, "normalization_aten_pass"], grad=grad,
                  pattern_options={name: SMALL if case.options is None else case.options})
    assert c.fw.rule_matches[name] > 0, f"{name} did not fire ({case.note}): {dict(c.fw.rule_matches)}"
    for g in c.graphs:
        for n in g.graph.nodes:
            if n.op == "call_function":
                assert isinstance(n.target, torch._ops.OpOverload) or n.target.__module__ == "_operator"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_decompose_mm_respects_upstreams_guards(strategy):
    """Defaults (CPU: first dimension <= 1) leave a [4, 8] x [8, 3] mm alone; the option name moves the
    bound, and greedy then replaces the mm by a multiply and a sum."""
    a, b = _x((4, 8), seed=1), _x((8, 3), seed=2)

    def fn(a, b):
        return aten.mm.default(a, b)

    c = aot_check(fn, [a, b], strategy, patterns=["decompose_mm_pass", "normalization_aten_pass"], grad=False)
    assert c.fw.rule_matches["decompose_mm_pass"] == 0
    c = aot_check(fn, [a, b], strategy, patterns=["decompose_mm_pass", "normalization_aten_pass"], grad=False,
                  pattern_options={"decompose_mm_pass": {"cpu_max_first_dimension_decomposition": 4}})
    assert c.fw.rule_matches["decompose_mm_pass"] == 1
    if strategy == "greedy":
        assert _fused(c, aten.mm.default) == 0 and _fused(c, aten.sum.dim_IntList) == 1


def test_decompose_mm_unknown_option_is_rejected():
    with pytest.raises(ValueError, match="cpu_max_first_dimension_decomposition"):
        aot_check(lambda a, b: aten.mm.default(a, b), [_x((2, 2)), _x((2, 2))], "greedy",
                  patterns=["decompose_mm_pass", "normalization_aten_pass"],
                  pattern_options={"decompose_mm_pass": {"max_other_dimention_decomposition": 4}})


def _fused(c, target) -> int:
    return sum(1 for n in c.graphs[0].graph.nodes if n.target is target)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_linear_post_grad_is_one_baddbmm(strategy):
    n = 6
    inputs = [_x((4, 8), seed=i) for i in range(n)] + [_x((5, 8), seed=10 + i) for i in range(n)] \
        + [_x((5,), seed=20 + i) for i in range(n)]

    def fn(*a):
        return [torch.nn.functional.linear(x, w, b) for x, w, b in zip(a[:n], a[n:2 * n], a[2 * n:])]

    c = aot_check(fn, inputs, strategy, patterns=["batch_linear_post_grad", "normalization_aten_pass"])
    assert _fused(c, aten.baddbmm.default) == 1 and _fused(c, aten.addmm.default) == 0


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_fp32_and_bf16_are_never_fused_together(strategy):
    xs = [_x((3, 4), torch.float32, i) for i in range(3)] + [_x((3, 4), torch.bfloat16, 9 + i) for i in range(3)]

    def fn(*xs):
        return [aten.tanh.default(x) for x in xs]

    c = aot_check(fn, xs, strategy, patterns=["batch_aten_tanh", "normalization_aten_pass"],
                  pattern_options={"batch_aten_tanh": SMALL})
    assert c.fw.rule_matches["batch_aten_tanh"] == 2
    tanhs = [n for n in c.graphs[0].graph.nodes if n.target is aten.tanh.default]
    assert sorted(str(n.meta["val"].dtype) for n in tanhs) == ["torch.bfloat16", "torch.float32"]
    assert all(n.meta["val"].shape[0] == 3 for n in tanhs)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_alpha_scalar_and_tensor_forms_form_separate_groups(strategy):
    """sub with alpha 2, sub with alpha 1, and sub of a scalar: three groups of two, never mixed."""
    xs = [_x((3, 4), seed=i) for i in range(8)]

    def fn(a, b, c, d, e, f, g, h):
        return (aten.sub.Tensor(a, b, alpha=2), aten.sub.Tensor(c, d, alpha=2), aten.sub.Tensor(e, f),
                aten.sub.Tensor(g, h), aten.sub.Tensor(a, 2.0), aten.sub.Tensor(c, 2.0))

    c = aot_check(fn, xs, strategy, patterns=["batch_aten_sub", "normalization_aten_pass"],
                  pattern_options={"batch_aten_sub": SMALL})
    assert c.fw.rule_matches["batch_aten_sub"] == 3
    subs = [n for n in c.graphs[0].graph.nodes if n.target is aten.sub.Tensor]
    # eqsat's cost model may keep a pair apart (two launches vs stacks + one launch); never a mixed group
    assert all(tuple(n.meta["val"].shape) in ((2, 3, 4), (3, 4)) for n in subs)
    if strategy == "greedy":
        assert len(subs) == 3


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_broadcasting_operands_are_not_fused(strategy):
    xs = [_x((3, 4), seed=i) for i in range(3)] + [_x((4,), seed=9 + i) for i in range(3)]

    def fn(a, b, c, d, e, f):
        return aten.mul.Tensor(a, d), aten.mul.Tensor(b, e), aten.mul.Tensor(c, f)

    c = aot_check(fn, xs, strategy, patterns=["batch_aten_mul", "normalization_aten_pass"],
                  pattern_options={"batch_aten_mul": SMALL})
    assert c.fw.rule_matches["batch_aten_mul"] == 0
