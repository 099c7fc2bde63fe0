"""batch_gemm_lhs (src/optimus_eq/patterns/gemm_lhs.py): a matmul of a 2-D right operand and the bias-free linears
reading the same input become one linear. Differential tests against eager (values, dtypes, strides, gradients:
conftest's ``check``), the members it takes and leaves, and the choice: eqsat adds groups of two and prices them,
greedy keeps upstream's minimum of 5. The randomized soundness case is ``gemm_lhs_case`` in horizontal_cases.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import optimus_eq
from conftest import check, dynamo_graph
from optimus_eq.horizontal.driver import DEFAULT_OPTIONS


def rand(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def wukong_layer(x, p, w, ln_w, ln_b):
    """Wukong's FMB and LCB on one input (bench/optimus_bench/models/wukong.py): ``x^T @ P`` feeds the
    pairwise products, ``F.linear(x^T, W)`` compresses the fields; both GEMMs read ``x.transpose(1, 2)``."""
    t = x.transpose(1, 2)
    inter = (x @ (t @ p)).flatten(1)
    lcb = F.linear(t, w).transpose(1, 2)
    fmb = F.layer_norm(inter, inter.shape[-1:], ln_w, ln_b).view(x.shape[0], -1, x.shape[2])
    return torch.cat([fmb, lcb], dim=1) + x.repeat(1, 2, 1)[:, : fmb.shape[1] + lcb.shape[1]]


def _wukong_inputs(b=4, fields=8, dim=4, rank=2, n_lcb=4):
    # n_fmb fields = fields * rank / dim
    return [rand(b, fields, dim, seed=1), rand(fields, rank, seed=2), rand(n_lcb, fields, seed=3),
            rand(fields * rank, seed=4), rand(fields * rank, seed=5)]


def _linears(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is F.linear]


def _matmuls(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function" and getattr(n.target, "__name__", "") == "matmul"]


def test_eqsat_prices_the_group_without_a_backward():
    """Inference: one GEMM fewer, one weight cat more (the transposed P is no packable stack), equal kernels;
    the group is added and the cost model decides. Values match eager either way."""
    c = check(wukong_layer, _wukong_inputs(), "eqsat")
    assert c.report.rule_matches["batch_gemm_lhs"] == 1, dict(c.report.rule_matches)


def test_eqsat_fuses_wukong_s_two_gemms_in_a_training_graph_and_matches_eager():
    """Training: the fused GEMM also saves one backward GEMM per operand; gradients match eager's."""
    c = check(wukong_layer, _wukong_inputs(), "eqsat", trace_grad=True)
    assert c.report.rule_matches["batch_gemm_lhs"] == 1, dict(c.report.rule_matches)
    (lin,) = _linears(c.gm2)
    assert tuple(lin.meta["val"].shape)[-1] == 2 + 4  # rank + n_lcb output columns, one GEMM
    assert len(_matmuls(c.gm2)) == 1          # only x @ xp is left a matmul


def test_greedy_keeps_upstream_s_minimum_and_fuses_with_two():
    assert DEFAULT_OPTIONS["min_fuse_set_size"] == 5
    c = check(wukong_layer, _wukong_inputs(), "greedy", trace_grad=True)
    assert not c.report.rule_matches.get("batch_gemm_lhs")
    assert not _linears(c.gm2) or len(_matmuls(c.gm2)) == 2
    c2 = check(wukong_layer, _wukong_inputs(), "greedy", trace_grad=True,
               pattern_options={"batch_gemm_lhs": {"min_fuse_set_size": 2}})
    assert c2.report.rule_matches["batch_gemm_lhs"] == 1
    assert len(_matmuls(c2.gm2)) == 1


@pytest.mark.parametrize("strategy", ["eqsat", "greedy"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mixed_spellings_values_and_gradients(strategy, dtype):
    x = rand(3, 5, 6, seed=1, dtype=dtype)
    ws = [rand(6, 2, seed=2, dtype=dtype), rand(3, 6, seed=3, dtype=dtype), rand(6, 4, seed=4, dtype=dtype),
          rand(1, 6, seed=5, dtype=dtype), rand(6, 1, seed=6, dtype=dtype)]

    def f(x, a, b, c, d, e):
        # one output: members reaching different outputs of a training graph are never fused (their gradient
        # signatures differ, docs/DESIGN.md "Horizontal fusion")
        return torch.cat([(x @ a).relu(), F.linear(x, b).tanh(), torch.matmul(x, c) * 2, F.linear(x, d),
                          (x @ e).sigmoid()], -1)

    c = check(f, [x] + ws, strategy, trace_grad=True, pattern_options={"batch_gemm_lhs": {"min_fuse_set_size": 2}})
    assert c.report.rule_matches["batch_gemm_lhs"] == 1, dict(c.report.rule_matches)
    assert not _matmuls(c.gm2)


def test_members_it_leaves():
    """A biased linear (batch_linear_lhs's), a batched right operand, a 1-D one, another input, another dtype."""
    x = rand(4, 6, seed=1)

    def f(x, w1, b1, m3, v, w2, y, w16):
        return (F.linear(x, w1, b1), x @ m3, x @ v, x @ w2, y @ w2, x.half() @ w16)

    args = [x, rand(3, 6, seed=2), rand(3, seed=3), rand(2, 6, 5, seed=4), rand(6, seed=5), rand(6, 2, seed=6),
            rand(4, 6, seed=7), rand(6, 2, seed=8).half()]
    gm, ex = dynamo_graph(f, *args)
    _, report = optimus_eq.optimize(gm, ex, strategy="eqsat")
    assert report.fallback is None
    assert not report.rule_matches.get("batch_gemm_lhs"), dict(report.rule_matches)


def test_the_pattern_is_registered_after_the_batch_passes():
    names = optimus_eq.DEFAULT_REGISTRY.names()
    assert names.index("batch_linear_lhs") < names.index("batch_gemm_lhs") < names.index("merge_splits_pass")
    assert optimus_eq.DEFAULT_REGISTRY["batch_gemm_lhs"].kind == "horizontal"


def test_training_prices_the_layout_copy_of_a_transposed_weight():
    """In a training graph the matmul member's ``P`` gets its gradient as a transposed slice of the fused
    weight's gradient, which AccumulateGrad copies into ``P``'s layout outside the compiled graph
    (``extract.grad._transposed_param_copies``). With that eager copy priced prohibitively the group is not
    taken in training; at the calibrated price it is (the test above); in inference there is no copy."""
    from optimus_eq.cost import GPUCostModel

    dear = GPUCostModel(eager_launch_us=1e5)
    c = check(wukong_layer, _wukong_inputs(), "eqsat", trace_grad=True, cost_model=dear)
    assert len(_matmuls(c.gm2)) == 2, "the fused GEMM was kept though its weight copy costs more than it saves"
    # inference, at shapes where the wide GEMM saves FLOPs (at the toy shapes above the two plans tie: both
    # GEMMs are launch-bound, and the 1e-3 us views decide)
    c = check(wukong_layer, _wukong_inputs(b=512, fields=32, dim=16, rank=8, n_lcb=16), "eqsat", cost_model=dear)
    assert len(_matmuls(c.gm2)) == 1


@pytest.mark.parametrize("strategy", ["eqsat", "greedy"])
def test_method_calls_join_the_group(strategy):
    """``x.matmul(p)``, ``x.mm(p)`` and ``x.matmul(other=p)`` are the function calls with ``self`` first
    (recipes.SAME_AS_FUNCTION): members like ``torch.matmul``; values and gradients match eager."""
    x = rand(6, 5, seed=1)
    ws = [rand(5, 2, seed=2), rand(5, 3, seed=3), rand(4, 5, seed=4), rand(5, 1, seed=5)]

    def f(x, a, b, c, d):
        return torch.cat([x.matmul(a).relu(), x.mm(b) * 2, F.linear(x, c), x.matmul(other=d).tanh()], -1)

    c = check(f, [x] + ws, strategy, trace_grad=True, pattern_options={"batch_gemm_lhs": {"min_fuse_set_size": 2}})
    assert c.report.rule_matches["batch_gemm_lhs"] == 1, dict(c.report.rule_matches)
    gemms = [n for n in c.gm2.graph.nodes if n.op == "call_method" and n.target in ("matmul", "mm")]
    assert not gemms and len(_linears(c.gm2)) == 1


@pytest.mark.parametrize("trace_grad", [False, True])
def test_eqsat_merges_two_linears_and_a_matmul_of_one_input_into_one_gemm(trace_grad):
    """batch_linear_lhs fuses the two bias-free linears first in the round; batch_gemm_lhs may still take them
    with the matmul (``regroups``), and the one GEMM of all three is the cheaper plan (one launch fewer, the
    same one weight cat). Greedy (upstream's minimum group of 5) keeps three GEMMs. Values and gradients match
    eager."""
    x = rand(64, 256, seed=1)
    ws = [rand(32, 256, seed=2), rand(32, 256, seed=3), rand(256, 32, seed=4)]

    def f(x, a, b, p):
        return torch.cat([F.linear(x, a).relu(), F.linear(x, b).tanh(), (x @ p).sigmoid()], -1)

    c = check(f, [x] + ws, "eqsat", trace_grad=trace_grad)
    assert c.report.rule_matches["batch_gemm_lhs"] == 1 and c.report.cost_after < c.report.cost_before
    (lin,) = _linears(c.gm2)
    assert tuple(lin.meta["val"].shape) == (64, 96) and not _matmuls(c.gm2)
    g = check(f, [x] + ws, "greedy", trace_grad=trace_grad)
    assert len(_linears(g.gm2)) + len(_matmuls(g.gm2)) == 3


def test_regroups_does_not_offer_batch_linear_lhs_s_own_group_again():
    """Two bias-free linears of one input and no matmul: batch_gemm_lhs's group would be batch_linear_lhs's
    exactly; it is not added a second time."""
    x = rand(8, 16, seed=1)

    def f(x, a, b):
        return torch.cat([F.linear(x, a), F.linear(x, b)], -1)

    c = check(f, [x, rand(4, 16, seed=2), rand(4, 16, seed=3)], "eqsat")
    assert c.report.rule_matches["batch_linear_lhs"] == 1 and not c.report.rule_matches.get("batch_gemm_lhs")


def test_the_three_way_group_beside_other_patterns_groups_of_the_round():
    """Other patterns fuse before batch_gemm_lhs in the same round (batch_relu on two other inputs, batch_linear
    on two same-shape linears of other inputs): their members stay out of batch_gemm_lhs's candidates, the
    three GEMMs of x still become one; values and gradients match eager."""
    x, y, z = rand(64, 256, seed=1), rand(64, 256, seed=5), rand(64, 256, seed=6)
    ws = [rand(32, 256, seed=2), rand(32, 256, seed=3), rand(256, 32, seed=4), rand(16, 256, seed=7),
          rand(16, 256, seed=8)]

    def f(x, y, z, a, b, p, u, v):
        gemms = [F.linear(x, a).relu(), F.linear(x, b).tanh(), (x @ p).sigmoid()]
        return torch.cat(gemms + [F.linear(y.relu(), u), F.linear(z.relu(), v)], -1)

    c = check(f, [x, y, z] + ws, "eqsat", trace_grad=True)
    assert c.report.rule_matches["batch_gemm_lhs"] == 1, dict(c.report.rule_matches)
    assert c.report.rule_matches["batch_relu"] >= 1 or c.report.rule_matches["batch_linear"] >= 1
    assert not _matmuls(c.gm2) and any(tuple(n.meta["val"].shape) == (64, 96) for n in _linears(c.gm2))



def test_calls_by_keywords_only_stay_opaque_and_right():
    """``F.linear(weight=w, input=x)`` (keywords only, in another order) stays an opaque call: the e-graph's
    shape analysis reads an op's tensor inputs in slot order, which for such a call is not the signature's (a
    term for it made plans whose lowering the output check rejected: "Sizes of tensors must match"). Values
    match eager and the linears are not batched."""
    x = rand(8, 16, seed=1)

    def f(x, a, b):
        return torch.cat([F.linear(weight=a, input=x), F.linear(weight=b, input=x)], -1)

    c = check(f, [x, rand(4, 16, seed=2), rand(4, 16, seed=3)], "eqsat", trace_grad=True,
              pattern_options={"batch_linear_lhs": {"min_fuse_set_size": 2}})
    assert not c.report.rule_matches.get("batch_linear_lhs")
