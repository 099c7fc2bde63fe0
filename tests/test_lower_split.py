"""Lowering emits chosen narrows that tile a range of one tensor's dim as one ``torch.split`` + getitems.

A split and N narrows are the same views, but AOTAutograd traces one split's backward as one cat where N
narrows give N ``slice_backward``s that are summed, and CPU Inductor fused DLRM's cross-net relu backwards
worse after the narrow spelling (docs/DESIGN.md, "Kernel counts after lowering"). The structure is asserted
on the lowered graph (one split, no narrows), and every case runs against eager through ``check``
(outputs, gradients, aliasing of outputs and inputs).
"""

from __future__ import annotations

import operator

import pytest
import torch

from conftest import check, dynamo_graph, rand
import oracle
from optimus_bridge.lower import split_groups
from test_lower import assert_meta_like_fake_tensor_prop

import optimus_eq


def _targets(gm: torch.fx.GraphModule) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def _splits(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is torch.split]


# -- split_groups (the plan) ----------------------------------------------------------------------

def test_split_groups_tiling():
    narrows = {f"n{i}": ("x", 1, 3 * i, 3, 12) for i in range(4)}
    groups = split_groups(narrows)
    assert set(groups) == set(narrows)
    g = groups["n0"]
    assert all(groups[c] is g for c in narrows)  # one group
    assert (g.source, g.dim, g.sizes) == ("x", 1, [3, 3, 3, 3])
    assert [g.piece[f"n{i}"] for i in range(4)] == [0, 1, 2, 3]


def test_split_groups_contiguous_range_gets_unread_ends():
    # [2, 5) and [5, 9) of 12: split [2, 3, 4, 3]; pieces 0 and 3 are never read
    g = split_groups({"a": ("x", 0, 5, 4, 12), "b": ("x", 0, 2, 3, 12)})["a"]
    assert g.sizes == [2, 3, 4, 3] and g.piece == {"b": 1, "a": 2}


def test_split_groups_left_alone():
    assert split_groups({"a": ("x", 1, 0, 3, 12)}) == {}                            # one narrow
    assert split_groups({"a": ("x", 1, 0, 3, 12), "b": ("x", 1, 4, 3, 12)}) == {}   # a gap
    assert split_groups({"a": ("x", 1, 0, 4, 12), "b": ("x", 1, 3, 3, 12)}) == {}   # an overlap
    assert split_groups({"a": ("x", 1, 0, 3, 12), "b": ("y", 1, 3, 3, 12)}) == {}   # two tensors
    assert split_groups({"a": ("x", 0, 0, 3, 12), "b": ("x", 1, 3, 3, 12)}) == {}   # two dims
    assert split_groups({"a": ("x", 1, 0, 12, 12), "b": ("x", 1, 0, 0, 12)}) == {}  # whole and empty
    # one group per (tensor, dim); a gap in one does not stop the other
    g = split_groups({"a": ("x", 1, 0, 6, 12), "b": ("x", 1, 6, 6, 12),
                      "c": ("x", 0, 0, 1, 5), "d": ("x", 0, 2, 3, 5)})
    assert set(g) == {"a", "b"} and g["a"].sizes == [6, 6]


# -- lowered graphs -------------------------------------------------------------------------------

class _PerField(torch.nn.Module):
    """split -> a different matmul per field -> stack: nothing folds, the pieces stay views of ``x @ w``.
    Parameters, so that the split tensor requires grad when dynamo traces it (splits are for autograd)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(rand(12, 12))
        self.ws = torch.nn.ParameterList(rand(3, 5) for _ in range(4))

    def forward(self, x):
        parts = torch.split(x @ self.w, 3, dim=1)
        return torch.stack([torch.relu(p) @ self.ws[i] for i, p in enumerate(parts)], 1)


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_tiling_narrows_lowered_as_one_split(strategy):
    c = check(_PerField(), [rand(4, 12)], strategy)
    targets = _targets(c.gm2)
    assert torch.narrow not in targets, c.gm2.code
    (split,) = _splits(c.gm2)
    assert split.args[1:] == ([3, 3, 3, 3], 1), split.args
    getitems = sorted(u.args[1] for u in split.users)
    assert getitems == [0, 1, 2, 3] and all(u.target is operator.getitem for u in split.users)


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_partial_range_split_and_views_of_input(strategy):
    """Slices [2:5) and [5:9) of a parameter (a graph input), returned as they are and used: one split
    [2, 3, 4, 3] whose outputs are still views of the parameter (``check`` compares aliasing with eager's)."""

    class F(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.p = torch.nn.Parameter(rand(4, 12))

        def forward(self, w1, w2):
            a, b = self.p[:, 2:5], self.p[:, 5:9]
            return a, b, (a @ w1) * (b @ w2)

    model = F()
    c = check(model, [rand(3, 6), rand(4, 6)], strategy)
    (split,) = _splits(c.gm2)
    assert split.args[1:] == ([2, 3, 4, 3], 1), split.args
    assert split.args[0].op == "placeholder"
    assert sorted(u.args[1] for u in split.users) == [1, 2]
    assert torch.narrow not in _targets(c.gm2)
    p = model.p
    assert all(o.untyped_storage().data_ptr() == p.untyped_storage().data_ptr() for o in c.outputs[:2])


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_no_split_without_autograd(strategy):
    """Without grad the split buys nothing (no backward to trace) and would count as a split/cat node:
    the same narrows stay narrows (the conformance suite's math_op_fusion_distinct counts splits)."""
    with torch.no_grad():
        c = check(_PerField(), [rand(4, 12)], strategy, grad=False)
    assert not _splits(c.gm2) and _targets(c.gm2).count(torch.narrow) == 4, c.gm2.code


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_unit_pieces_feeding_squeezes(strategy):
    """Size-1 pieces squeezed per field (``x.split(1, 1)`` then ``squeeze(1)``) stay correct; the pieces
    read are emitted as views of one split (or selects), never as narrows."""

    def f(x, ws):
        parts = x.split(1, 1)
        return torch.stack([parts[i].squeeze(1) @ ws[i] for i in range(4)], 0)

    c = check(f, [rand(5, 4, 6), [rand(6, 2) for _ in range(4)]], strategy)
    assert torch.narrow not in _targets(c.gm2), c.gm2.code


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_overlapping_narrows_stay_narrows(strategy):
    def f(x, w1, w2):
        return (x[:, 0:6] @ w1) + (x[:, 3:9] @ w2)

    c = check(f, [rand(4, 12), rand(6, 5), rand(6, 5)], strategy, fallback_ok=False)
    assert not _splits(c.gm2) and _targets(c.gm2).count(torch.narrow) == 2, c.gm2.code


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_split_meta_matches_fake_tensor_prop(strategy, monkeypatch):
    """Split and getitem meta take the fast path (meta twins) and agree with FakeTensorProp."""
    import optimus_bridge.lower_meta as lower

    fast = []
    orig = lower._fast_split
    monkeypatch.setattr(lower, "_fast_split", lambda *a: fast.append(orig(*a)) or fast[-1])
    x = rand(4, 12).requires_grad_()
    gm, ex = dynamo_graph(_PerField(), x)
    gm2, report = optimus_eq.optimize(gm, ex, strategy=strategy)
    assert report.fallback is None and len(_splits(gm2)) == 1
    assert fast and all(v is not None for v in fast)
    assert_meta_like_fake_tensor_prop(gm2, gm)


def test_aten_level_keeps_slices():
    """Aten-IR lowering (post-grad graphs) has no split in its table: narrows stay ``aten.slice``."""
    from optimus_bridge.aten import ATEN_IR

    assert ATEN_IR.split is None


def test_split_through_inductor_training():
    """The lowered split compiles with Inductor, forward and backward, and matches eager (values, grads)."""
    import copy

    model = _PerField()
    ref_model = copy.deepcopy(model)
    x = rand(4, 12).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    compiled = torch.compile(model, backend=optimus_eq.backend(strategy="greedy"))
    ref64 = oracle.float64_reference(ref_model, [x_ref])
    out, expected = compiled(x), ref_model(x_ref)
    oracle.assert_values(out, expected, ref64.outputs[0])
    out.square().sum().backward()
    expected.square().sum().backward()
    leaves = [x_ref, *ref_model.parameters()]
    grads64 = ref64.grads(lambda ys: ys[0].square().sum(), leaves)
    for a, e, r in zip([x.grad, *(p.grad for p in model.parameters())], [t.grad for t in leaves], grads64):
        oracle.assert_values(a, e, r, "gradient", grad=True)  # Inductor's backward sums in its own order
    assert optimus_eq.last_reports and optimus_eq.last_reports[-1].ops_after.get("split", 0) == 1
