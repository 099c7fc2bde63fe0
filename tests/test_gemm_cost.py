"""Extern GEMMs priced by FLOPs (``GPUCostModel.gemm_cost``, ``gemm_backward_cost``; docs/DESIGN.md, "Extraction
and cost", "GEMM efficiency"), and the weight packing that makes a batched linear's weight cat free in training.

Why (issue 15, bench/results/h200_2026-12-02d, call 3): under CUDA graphs eqsat batched DLRM's rank-64 cross-net
linears into a ``bmm`` that the launch-and-bytes model priced 9 us cheaper per layer; on the H200 eqsat's
training step took 4.06 ms against greedy's 3.44. A batched fp32 GEMM runs at ~0.8 of one GEMM of a member's
shape (gemm_accuracy.json), and a bmm of few output tiles far slower (cuBLAS does not split its K: the
weight gradient of 4 x rank 64 experts; bench/results/gemm_fit_2026-12-02), which the FLOP price sees and
bytes did not.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import optimus_eq
from conftest import dynamo_graph, rand
from optimus_eq.cost import GPUCostModel, gemm_dims

CG = GPUCostModel.cudagraph(packed_parameters=True)


def test_gemm_dims_read_the_operands_of_each_op():
    assert gemm_dims("linear", (8, 16, 32), [(8, 16, 64), (32, 64), (32,)]) == (1, 128, 32, 64, False, (0, 1))
    assert gemm_dims("addmm", (128, 32), [(32,), (128, 64), (64, 32)]) == (1, 128, 32, 64, False, (1, 2))
    assert gemm_dims("bmm", (4, 415, 4096), [(4, 415, 64), (4, 64, 4096)]) == (4, 415, 4096, 64, True, (0, 1))
    assert gemm_dims("bmm_add", (4, 8, 16), [(4, 8, 1), (4, 8, 3), (4, 3, 16)]) == (4, 8, 16, 3, True, (1, 2))
    assert gemm_dims("mm", (128, 32), [(128, 64), (65, 32)]) is None      # inner sizes disagree
    assert gemm_dims("linear", (128, 32), [(128, 64), None]) is None      # a shape unknown
    assert gemm_dims("relu", (128, 32), [(128, 32)]) is None


def test_gemm_time_is_flops_at_a_shape_dependent_rate_or_bytes():
    m = GPUCostModel()
    big = 8192
    t = m.gemm_us(big, big, big)
    flops = 2.0 * big ** 3
    # a large square GEMM runs near the peak rate (every efficiency factor above 0.98)
    assert flops / m.gemm_flops_per_us < t < flops / (0.97 * m.gemm_flops_per_us)
    # the rate falls for skinny shapes and small inner dims, and for a batched product of the same members
    assert m.gemm_us(4096, 4, 415) / (2 * 4096 * 4 * 415) > 5 * m.gemm_us(4096, 256, 415) / (2 * 4096 * 256 * 415)
    assert m.gemm_us(4096, 415, 64) / (2 * 4096 * 415 * 64) > m.gemm_us(4096, 415, 4096) / (2 * 4096 * 415 * 4096)
    tiles = 4 * math.ceil(415 / m.bmm_tile) * math.ceil(4096 / m.bmm_tile)  # a bmm's occupancy: its output tiles
    occupancy = m.bmm_efficiency * tiles / (tiles + m.bmm_half_tiles)
    assert m.gemm_us(415, 4096, 64, 4, True) == pytest.approx(4 * m.gemm_us(415, 4096, 64) / occupancy)
    # a matrix-vector product is bandwidth-bound: bytes only
    assert m.gemm_us(4096, 1, 415, moved=4096 * 416 + 415) == pytest.approx((4096 * 416 + 415) * 4 / m.bytes_per_us)
    # bytes win where they take longer than the FLOPs
    assert m.gemm_us(64, 64, 64, moved=10 ** 9) == pytest.approx(4e9 / m.bytes_per_us)


def test_backward_is_one_gemm_per_matrix_operand_and_a_reduction_per_bias():
    m = GPUCostModel()
    out, args = (4096, 415), [(4096, 64), (415, 64), (415,)]
    n_out, n_x, n_w = 4096 * 415, 4096 * 64, 415 * 64
    dx = m.launch_us + m.gemm_us(4096, 64, 415, moved=n_out + n_w + n_x)
    dw = m.launch_us + m.gemm_us(415, 64, 4096, moved=n_out + n_x + n_w)
    db = m.launch_us + (n_out + 415) * 4 / m.bytes_per_us
    assert m.gemm_backward_cost("linear", out, args, [True, True, True]) == pytest.approx(dx + dw + db)
    assert m.gemm_backward_cost("linear", out, args, [False, True, False]) == pytest.approx(dw)
    assert m.gemm_backward_cost("linear", out, [(4096, 64), None], [True, True]) is None


def test_e_graph_and_input_graph_price_a_gemm_alike():
    """``cost_after`` (e-graph pricing) equals ``cost_before`` (input graph pricing) on a graph with nothing to
    rewrite, and the training graph's extra cost is the GEMMs' backward as ``gemm_backward_cost`` gives it."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 415)
    w2 = torch.nn.Parameter(torch.randn(4, 415, 32))

    def f(x):
        return torch.bmm(lin(x).unsqueeze(0).expand(4, 4096, 415), w2)

    x = rand(4096, 64, seed=1)
    gm, ex = dynamo_graph(f, x)
    _, fwd = optimus_eq.optimize(gm, ex, cost_model=GPUCostModel.cudagraph(training=False), patterns=["normalization_pass"])
    _, train = optimus_eq.optimize(gm, ex, cost_model=GPUCostModel.cudagraph(), patterns=["normalization_pass"])
    assert train.training and fwd.cost_after == pytest.approx(fwd.cost_before, rel=1e-9)
    assert train.cost_after == pytest.approx(train.cost_before, rel=1e-9)
    m = GPUCostModel.cudagraph()
    gemms = m.gemm_cost("linear", (4096, 415), [(4096, 64), (415, 64), (415,)]) + m.gemm_cost(
        "bmm", (4, 4096, 32), [(4, 4096, 415), (4, 415, 32)])
    assert fwd.cost_before == pytest.approx(gemms, abs=0.01)  # and the expand, a view (1e-3 us)
    backward = m.gemm_backward_cost("linear", (4096, 415), [(4096, 64), (415, 64), (415,)], [False, True, True]) + \
        m.gemm_backward_cost("bmm", (4, 4096, 32), [(4, 4096, 415), (4, 415, 32)], [True, True])
    assert train.cost_before - fwd.cost_before == pytest.approx(backward, rel=1e-6)


@pytest.mark.slow
def test_dlrm_cross_net_keeps_its_rank_64_linears_separate_under_cuda_graphs():
    """DLRM's mixture cross net at the gpu preset's widths (415 wide, 4 experts of rank 64, batch 4096),
    training, CUDA-graph model with packed parameters: priced by launch and bytes, eqsat batched the experts'
    ``U`` linears into one ``bmm`` (the plan measured 0.6 ms slower per step than greedy's on the H200); priced
    by FLOPs the ``bmm`` (its weight gradient of 4 x 7 output tiles) is dearer and the linears stay separate. The
    optimized graph's value and gradients equal eager's."""
    from optimus_bench.models.dlrm import LowRankMixtureCrossNet

    torch.manual_seed(0)
    net = LowRankMixtureCrossNet(415, 1, 4, 64)
    x = rand(4096, 415, seed=1).requires_grad_()
    gm, ex = dynamo_graph(lambda x: net(x).sum(), x)
    fired = {}
    for flops in (False, True):
        out, rep = optimus_eq.optimize(gm, ex, cost_model=dataclasses.replace(CG, gemm_flops=flops))
        assert rep.training and not rep.fallback
        fired[flops] = rep.patterns_fired.get("batch_linear", 0)
        xe, xo = x.detach().clone().requires_grad_(), x.detach().clone().requires_grad_()
        res = out(*[xo if e is x else e for e in ex])
        want, got = net(xe).sum(), res[0] if isinstance(res, (tuple, list)) else res
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-2)
        want.backward()
        got.backward()
        torch.testing.assert_close(xo.grad, xe.grad, rtol=1e-4, atol=1e-4)
    assert fired[False] >= 1 and fired[True] == 0  # batched when priced by launches, separate by FLOPs


def _under_accumulate_grad(e) -> bool:
    while e is not None:
        if "AccumulateGrad" in e.name:
            return True
        e = e.cpu_parent
    return False


@pytest.mark.slow
@pytest.mark.parametrize("pack", [True, False])
def test_a_weight_cat_priced_free_is_free_in_a_compiled_training_step(pack, no_compile_cache):
    """The CUDA-graph model with packed parameters prices the cross net's weight cats (one wide GEMM over the
    expert and gate weights of unequal widths, ``[260, 415]`` of ``[1, 415]`` and ``[64, 415]`` pieces) as views.
    Through the backend in training (Inductor on CPU) that holds: the forward graph Inductor compiles has no cat
    of parameters, the backward makes no copy under AccumulateGrad, and each weight's gradient, a slice of one
    buffer, equals eager's. Without packing the cat is in the graph (the case a free price would misjudge)."""
    import torch._inductor.compile_fx as cfx
    from torch.profiler import ProfilerActivity, profile

    from optimus_bench.models.dlrm import LowRankMixtureCrossNet

    torch.manual_seed(0)
    net = LowRankMixtureCrossNet(415, 1, 4, 64)
    ref = LowRankMixtureCrossNet(415, 1, 4, 64)
    ref.load_state_dict(net.state_dict())
    x = rand(512, 415, seed=1)
    seen, real = [], cfx._compile_fx_inner

    def spy(gm, *a, **k):
        if not k.get("is_backward"):
            seen.append(gm)
        return real(gm, *a, **k)

    optimus_eq.last_reports.clear()
    torch._dynamo.reset()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cfx, "_compile_fx_inner", spy)
        f = torch.compile(net, backend=optimus_eq.backend(strategy="eqsat", cost_model=GPUCostModel.cudagraph(),
                                                          pack_parameters=pack))
        f(x).sum().backward()
    (rep,) = optimus_eq.last_reports
    # a wide GEMM over the gates and V (N 260, greedy's form; two of N 4 and N 256 before the round offered
    # the union of its groups: tests/test_group_union.py), and since every layer of a group is searched, one
    # more over the next layer's linears
    assert rep.patterns_fired.get("batch_linear_lhs", 0) >= 1 and rep.training
    assert ("packed parameters" in rep.cost_model) == pack
    cats = [n for g in seen for n in g.graph.nodes if n.target is torch.ops.aten.cat.default
            and all(a.op == "placeholder" for a in n.args[0])]
    assert bool(cats) != pack
    for p in net.parameters():
        p.grad = None
    loss = f(x).sum()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        loss.backward()
    copies = [e.name for e in prof.events() if _under_accumulate_grad(e) and ("copy" in e.name or "clone" in e.name)]
    assert not copies
    ref(x).sum().backward()
    for (name, p), q in zip(net.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, msg=lambda s: f"grad of {name}: {s}")
        assert p.grad.stride() == p.stride()


def test_a_gemm_rate_record_sets_the_gemm_constants():
    fit = {"gemm_flops_per_us": 40e6, "gemm_half_mn": 16.0, "gemm_half_k": 32.0, "bmm_efficiency": 0.7}
    m = GPUCostModel.cudagraph().with_gemm_rate({"device": "x", "gemm": fit, "rows": []})
    assert (m.gemm_flops_per_us, m.gemm_half_mn, m.gemm_half_k, m.bmm_efficiency) == (40e6, 16.0, 32.0, 0.7)
    assert m.execution == "cudagraph"
    merged = GPUCostModel.from_calibration({"launch_us": 20.0, "bytes_per_us": 3e6, "gemm": fit})
    assert merged.gemm_flops_per_us == 40e6 and merged.launch_us == 20.0
    with pytest.raises(ValueError, match="bmm_efficiency"):
        GPUCostModel().with_gemm_rate({"gemm": {**fit, "bmm_efficiency": 0}})
