"""Cases ported from pytorch test/inductor/test_group_batch_fusion.py (TestGroupBatchFusion,
TestPostGradBatchLinearFusion) and the einsum case of test_kernel_optimization.py, in our own words.
The modules are the upstream ones made small and put on the CPU; weights are parameters, so their
gradients are compared too."""

from __future__ import annotations

import torch
import torch.nn.functional as F_

from conformance import Case, rand

G = "test_group_batch_fusion.py::TestGroupBatchFusion"


class HighwaySelfGating(torch.nn.Module):
    """Upstream ``_TestHighwaySelfGating``: per input, a gating and a transform Linear, sigmoid, product."""

    def __init__(self, d_model: int = 10, size: int = 20) -> None:
        super().__init__()
        self.size = size
        self.gating_proj = torch.nn.Linear(d_model, d_model)
        self.transform_proj = torch.nn.Linear(d_model, d_model)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        results = [self.gating_proj(x) * torch.sigmoid(self.transform_proj(x)) for x in inputs[: self.size]]
        return torch.cat(results, dim=-1)


class ChainedLinears(torch.nn.Module):
    """Upstream ``MyModule``: three layers of ten Linears whose inputs mix earlier layers' outputs."""

    def __init__(self, z: int = 10, has_bias: bool = True) -> None:
        super().__init__()
        self.n = 10
        self.seq1 = torch.nn.ModuleList([torch.nn.Linear(z, z, has_bias) for _ in range(self.n)])
        self.seq2 = torch.nn.ModuleList([torch.nn.Linear(z, z, has_bias) for _ in range(self.n)])
        self.seq3 = torch.nn.ModuleList([torch.nn.Linear(z, z, has_bias) for _ in range(self.n)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = [x + 0.1 * i for i in range(self.n)]
        x2 = [self.seq1[i](x1[i]) for i in range(self.n)]
        x3 = [x2[i] - 0.1 * i for i in range(self.n)]
        x4 = x1[:3] + x3[3:]
        x5 = [self.seq2[i](x4[i]) for i in range(self.n)]
        x6 = [x5[i] + 0.1 * (self.n - i) for i in range(self.n)]
        x7 = x1[:4] + x3[6:8] + x6[:4]
        return torch.cat([self.seq3[i](x7[i]) for i in range(self.n)], dim=1)


class LinearsOfDifferentShapes(torch.nn.Module):
    """Upstream ``MyModule2``: Linears of three input widths after a split, with BatchNorm (eval)."""

    def __init__(self) -> None:
        super().__init__()
        self.linears = torch.nn.ModuleList([torch.nn.Linear(w, 8) for w in (6, 8, 10, 6, 8, 10)])
        self.bns = torch.nn.ModuleList([torch.nn.BatchNorm1d(8) for _ in range(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = torch.split(x, [6, 8, 10], dim=1)
        a = [self.bns[i](self.linears[i](t[i] + 0.1 * (i + 1))) for i in range(3)]
        a += [self.linears[3](torch.sin(t[0])), self.linears[4](torch.cos(t[1])), self.linears[5](torch.sin(t[2] * 0.5))]
        return torch.sigmoid(torch.cat(a))


class SplitLayerNorms(torch.nn.Module):
    """Upstream ``MyModule3``: split -> per-piece layer_norm -> cat, twice (normalized shapes (10,), (5, 10))."""

    def __init__(self, has_weight: bool = True, has_bias: bool = True) -> None:
        super().__init__()
        self.scale0 = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(10)) for _ in range(5)])
        self.bias0 = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(10)) for _ in range(5)])
        self.scale1 = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(5, 10)) for _ in range(5)]) if has_weight else None
        self.bias1 = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(5, 10)) for _ in range(5)]) if has_bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        l1 = torch.split(x, 10, dim=2)
        l1 = torch.cat([F_.layer_norm(l1[i], (10,), weight=self.scale0[i], bias=self.bias0[i]) for i in range(5)], dim=2)
        l2 = torch.split(l1, 10, dim=2)
        return torch.cat([F_.layer_norm(l2[i], (5, 10), weight=self.scale1[i] if self.scale1 is not None else None,
                                        bias=self.bias1[i] if self.bias1 is not None else None) for i in range(5)], dim=2)


class LinearsSharingInput(torch.nn.Module):
    """Upstream ``MyModule4``: ten linears of one input (output widths z - i % 5), cat, split, again."""

    def __init__(self, z: int = 10, has_bias: bool = True) -> None:
        super().__init__()
        self.has_bias = has_bias
        self.w1 = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(z - i % 5, z)) for i in range(10)])
        self.w2 = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(z - i % 5, z)) for i in range(10)])
        self.b1 = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(z - i % 5)) for i in range(10)])
        self.b2 = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(z - i % 5)) for i in range(10)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + 1.2
        x2 = torch.cat([F_.linear(x, self.w1[i], self.b1[i] if self.has_bias else None) for i in range(10)], dim=1)
        x4 = torch.cat(torch.split(x2, 10, dim=1))
        x6 = torch.cat([F_.linear(x4, self.w2[i], self.b2[i] if self.has_bias else None) for i in range(10)], dim=1)
        return torch.sigmoid(x6)


class LinearModulesSharingInput(torch.nn.Module):
    """Upstream ``test_batch_linear_lhs_fusion_nn_linear_inlined``'s module: nn.Linear of one input."""

    def __init__(self, z: int = 10, n: int = 10, has_bias: bool = True) -> None:
        super().__init__()
        self.linears = torch.nn.ModuleList([torch.nn.Linear(z, z - i % 5, bias=has_bias) for i in range(n)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + 1.2
        return torch.sigmoid(torch.cat([lin(x) for lin in self.linears], dim=1))


class SplitLinears(torch.nn.Module):
    """Upstream ``MyModule5``: split -> one Linear per piece -> cat -> sin (the batch_linear motif)."""

    def __init__(self, has_bias: bool = True) -> None:
        super().__init__()
        self.weights = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(50, 100)) for _ in range(5)])
        self.biases = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(50)) for _ in range(5)]) if has_bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pieces = torch.split(x, 100, dim=1)
        out = [F_.linear(pieces[i], self.weights[i], self.biases[i] if self.biases is not None else None) for i in range(5)]
        return torch.sin(torch.cat(out, dim=1))


class PointwiseOps(torch.nn.Module):
    """Upstream ``_TestPointwiseOps``: two splits into 10 pieces, sigmoid, relu, add, mul, sub, div."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inputs = torch.split(x, 500, dim=1)
        xs, ys = torch.split(inputs[0], 50, dim=1), torch.split(inputs[1], 50, dim=1)
        r1 = [F_.relu(torch.sigmoid(t)) for t in xs]
        r2 = [F_.relu(torch.sigmoid(t)) for t in ys]
        add = [torch.add(a, b) for a, b in zip(r1, r2)]
        mul = [torch.mul(a, a) for a in add]
        sub = [torch.sub(m, m) for m in mul]
        return torch.cat([torch.div(s, s) for s in sub], dim=1)


class PointwiseOpsPostGrad(torch.nn.Module):
    """Upstream ``_TestPointwiseOpsPostGrad``: aten.split pieces through tanh, sigmoid, relu, add."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        aten = torch.ops.aten
        inputs = aten.split(x, 500, 1)
        xs, ys = aten.split(inputs[0], 50, 1), aten.split(inputs[1], 50, 1)
        r1 = [aten.relu(aten.sigmoid(aten.tanh(t))) for t in xs]
        r2 = [aten.relu(aten.sigmoid(aten.tanh(t))) for t in ys]
        return torch.cat([aten.add(a, b) for a, b in zip(r1, r2)], dim=1)


class MathOps(torch.nn.Module):
    """Upstream ``_TestMathOps``: ten copies through clamp, nan_to_num, detach, stacked twice."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def chain(t):
            return torch.nan_to_num(t.clamp(min=-1000.1, max=1000.1), 0.0).detach()

        inputs = [chain(x) for _ in range(10)]
        others = [chain(x) for _ in range(10)]
        return torch.stack((torch.stack(inputs, dim=0), torch.stack(others, dim=0)), dim=0)


class MathOpsDistinct(torch.nn.Module):
    """``MathOps`` on twenty distinct inputs: twenty independent chains that the batch patterns can fuse
    (in the upstream module all twenty chains read the same ``x``, and our e-graph merges them into one)."""

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        def chain(t):
            return torch.nan_to_num(t.clamp(min=-1000.1, max=1000.1), 0.0).detach()

        return torch.stack((torch.stack([chain(x) for x in xs[:10]], dim=0),
                            torch.stack([chain(x) for x in xs[10:]], dim=0)), dim=0)


def _math_inputs():
    """Twenty inputs of shape (4,), each with a nan, an inf and a -inf."""
    xs = [rand(4, seed=i) for i in range(20)]
    for x in xs:
        x[:3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    return xs


class Dropouts(torch.nn.Module):
    """Upstream ``_TestDropout``: split into 5 pieces, dropout (training) on each."""

    def forward(self, x: torch.Tensor):
        return tuple(F_.dropout(p, p=0.05, training=True, inplace=False) for p in x.split([20] * 5, 1))


class LinearsAccumulated(torch.nn.Module):
    """Upstream ``_TestBMMFusionModule``: ten Linears of ten inputs summed in place."""

    def __init__(self) -> None:
        super().__init__()
        self.linears = torch.nn.ModuleList([torch.nn.Linear(10, 10) for _ in range(10)])

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        output = None
        for linear, x in zip(self.linears, inputs):
            output = linear(x) if output is None else output + linear(x)
        return output


class QKV(torch.nn.Module):
    """Upstream ``test_as_strided_storage_offset_after_mm_fusion``'s QKVModel (bmm of q and k after views)."""

    def __init__(self, hidden: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.q_proj = torch.nn.Linear(hidden, hidden, bias=False)
        self.k_proj = torch.nn.Linear(hidden, hidden, bias=False)
        self.v_proj = torch.nn.Linear(hidden, hidden, bias=False)

    def _heads(self, t, seq, batch):
        t = t.view(seq, batch, self.heads, self.head_dim).permute(2, 1, 0, 3)
        t = t.reshape(self.heads, batch * seq, self.head_dim)
        return t.as_strided((self.heads, batch * seq, self.head_dim), (self.head_dim, self.heads * self.head_dim, 1))

    def forward(self, x):
        x = x.permute(1, 0, 2)
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        seq, batch, _ = q.shape
        q = self._heads(q / self.head_dim ** 0.5, seq, batch)
        k = self._heads(k, seq, batch).permute(0, 2, 1)
        v = self._heads(v, seq, batch).permute(0, 2, 1)
        return torch.bmm(q, k), k, v


class EinsumToPointwise(torch.nn.Module):
    """Upstream ``TestEinsumtoPointwise`` (test_kernel_optimization.py): two einsums feeding adds."""

    def forward(self, input, weights, bias, input2, weights2, bias2):
        add1 = torch.functional.einsum("bni, nio -> bno", input, weights).add(bias)
        add2 = torch.functional.einsum("bni, bnio -> bno", input2, weights2) + bias2
        return add1 + add2


def _m(name, test, build, inputs, pre=None, post=None, fires=(), upstream=None, **kw) -> Case:
    return Case(name=name, upstream=upstream or f"{G}::{test}", build=build, inputs=inputs, pre_grad=pre, post_grad=post,
                fires=tuple(fires), **kw)


def _inputs(*shapes, nan=False):
    def make():
        xs = [rand(*s, seed=i) for i, s in enumerate(shapes)]
        if nan:
            xs[0] = torch.tensor([float("nan"), float("inf"), -float("inf"), 3.14])
        return xs
    return make


CASES = [
    _m("group_linear_chained", "test_group_linear_fusion", lambda: ChainedLinears(10, True), _inputs((10, 10)),
       post={"group_linear": {"require_fbgemm": True}}, fires=("group_linear",), note="upstream needs fbgemm"),
    _m("group_linear_chained_nobias", "test_group_linear_fusion", lambda: ChainedLinears(10, False), _inputs((10, 10)),
       post={"group_linear": {"require_fbgemm": True}}, fires=("group_linear",), note="upstream needs fbgemm"),
    _m("group_linear_different_shapes", "test_group_linear_fusion_different_shapes",
       lambda: LinearsOfDifferentShapes().eval(), _inputs((4, 24)), post={"group_linear": {"require_fbgemm": True}},
       fires=("group_linear",), note="upstream needs fbgemm"),
]
for w in (True, False):
    for b in (True, False):
        CASES.append(_m(f"batch_layernorm_w{int(w)}_b{int(b)}", "test_batch_layer_norm_fusion",
                        lambda w=w, b=b: SplitLayerNorms(w, b), _inputs((2, 5, 50)), pre={"batch_layernorm": {}},
                        fires=("batch_layernorm",)))
for b in (True, False):
    CASES.append(_m(f"batch_linear_lhs_b{int(b)}", "test_batch_linear_lhs_fusion", lambda b=b: LinearsSharingInput(10, b),
                    _inputs((20, 10)), pre={"batch_linear_lhs": {}}, fires=("batch_linear_lhs",)))
    CASES.append(_m(f"batch_linear_lhs_nn_linear_b{int(b)}", "test_batch_linear_lhs_fusion_nn_linear_inlined",
                    lambda b=b: LinearModulesSharingInput(10, 10, b), _inputs((20, 10)), pre={"batch_linear_lhs": {}},
                    fires=("batch_linear_lhs",)))
    CASES.append(_m(f"batch_linear_b{int(b)}", "test_batch_linear_pre_grad_fusion", lambda b=b: SplitLinears(b),
                    _inputs((50, 500)), pre={"batch_linear": {}}, fires=("batch_linear",)))
CASES += [
    _m("batch_linear_lhs_predispatch_cpu", "test_predispatch_cpu_device_agnostic_batch_linear_lhs",
       lambda: LinearsSharingInput(10, True), _inputs((20, 10)), pre={"batch_linear_lhs": {"min_fuse_set_size": 2}},
       fires=("batch_linear_lhs",), note="upstream runs the pre-dispatch path (is_predispatch=True)"),
    _m("pointwise_op_fusion", "test_pointwise_op_fusion", PointwiseOps, _inputs((50, 1000)),
       pre={"batch_relu": {}, "batch_sigmoid": {}},
       post={"batch_aten_add": {}, "batch_aten_mul": {}, "batch_aten_sub": {}, "batch_aten_div": {}},
       fires=("batch_relu", "batch_sigmoid", "batch_aten_add", "batch_aten_mul", "batch_aten_sub", "batch_aten_div"),
       done_by={p: ("pointwise_through_slice",) for p in ("batch_relu", "batch_sigmoid", "batch_aten_add", "batch_aten_mul",
                                                         "batch_aten_sub", "batch_aten_div")},
       note="ops on split pieces: pointwise_through_slice computes each op once on the unsplit tensor instead"),
    _m("pointwise_op_fusion_post_grad", "test_pointwise_op_fusion_post_grad", PointwiseOpsPostGrad, _inputs((50, 1000)),
       post={"batch_aten_relu": {}, "batch_aten_sigmoid": {}, "batch_aten_tanh": {}, "unbind_stack_aten_pass": {}},
       fires=("batch_aten_relu", "batch_aten_sigmoid", "batch_aten_tanh", "unbind_stack_aten_pass"),
       done_by={p: ("pointwise_through_slice",) for p in ("batch_aten_relu", "batch_aten_sigmoid", "batch_aten_tanh")},
       note="ops on split pieces: pointwise_through_slice computes each op once on the unsplit tensor instead"),
    _m("gate_fusion_post_grad", "test_gate_fusion_post_grad", HighwaySelfGating, _inputs(*[(10, 10)] * 20),
       post={"batch_linear_post_grad": {"shape_broadcast_batch_linear": True, "fuse_nodes_with_same_users": True},
             "batch_aten_mul": {"fuse_nodes_with_same_parent": False},
             "batch_aten_sigmoid": {"fuse_nodes_with_same_parent": True},
             "batch_aten_add": {"fuse_nodes_with_same_parent": True},
             "normalization_aten_pass": {}, "unbind_stack_aten_pass": {}},
       fires=("batch_linear_post_grad", "batch_aten_sigmoid", "batch_aten_mul", "batch_aten_add"),
       done_by={"batch_aten_add": ("batch_linear_post_grad",)},
       note="the built-in's bias adds are in our aten.baddbmm: no add is left to batch"),
    _m("math_op_fusion", "test_math_op_fusion", MathOps, _inputs((4,), nan=True),
       pre={"normalization_pass": {}, "batch_detach": {}, "batch_nan_to_num": {}, "batch_clamp": {},
            "unbind_stack_pass": {}, "unbind_stack_to_slices_pass": {}},
       grad=False, note="input holds nan and inf; upstream expects batch_clamp/batch_nan_to_num/batch_detach to "
       "fire, but the twenty chains all read the same x and our e-graph merges them into one chain (3 ops), so "
       "there is nothing left to batch; math_op_fusion_distinct checks the batching"),
    _m("math_op_fusion_distinct", "test_math_op_fusion", MathOpsDistinct, _math_inputs,
       pre={"normalization_pass": {}, "batch_detach": {}, "batch_nan_to_num": {}, "batch_clamp": {},
            "unbind_stack_pass": {}, "unbind_stack_to_slices_pass": {}},
       fires=("batch_clamp", "batch_detach", "batch_nan_to_num"), grad=False,
       note="upstream's MathOps on twenty distinct inputs (each with nan and inf), so the chains stay distinct"),
    _m("batch_dropout", "test_batch_dropout_pre_grad_fusion", Dropouts, _inputs((10, 100)),
       pre={"normalization_pass": {}, "batch_dropout": {}}, fires=("batch_dropout",), values=False,
       note="training-mode dropout: random, so shapes and dtypes only"),
    _m("as_strided_after_mm_fusion", "test_as_strided_storage_offset_after_mm_fusion", lambda: QKV().eval(),
       _inputs((1, 8, 64)), post={"batch_linear_post_grad": {"min_fuse_set_size": 3}}, fires=("batch_linear_post_grad",),
       note="upstream applies PostGradBatchLinearFusion by hand on the inference graph",
       gap="the three mms are 7 hops (views, div, as_strided) from the nearest value that reads them all, beyond "
           "max_fuse_search_depth 5 of our group search; with max_fuse_search_depth 10 it fires"),
    _m("batch_linear_post_grad", "test_batch_linear_post_grad_fusion", LinearsAccumulated, _inputs(*[(10, 10)] * 10),
       post={"batch_linear_post_grad": {"require_fbgemm": False}}, fires=("batch_linear_post_grad",),
       upstream="test_group_batch_fusion.py::TestPostGradBatchLinearFusion::test_batch_linear_post_grad_fusion"),
    _m("einsum_to_pointwise", "test_einsum_to_pointwise", EinsumToPointwise,
       _inputs((64, 9, 32), (9, 32, 16), (9, 16), (64, 9, 20), (64, 9, 20, 16), (64, 9, 16)),
       pre={"einsum_to_pointwise_pass": {}}, fires=("einsum_to_pointwise_pass",),
       upstream="test_kernel_optimization.py::TestKernelOptimization::test_einsum_to_pointwise"),
]
