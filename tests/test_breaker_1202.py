"""Breaker findings of 2026-12-02: inputs that gave wrong results, each compared with eager."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import optimus_eq

F64 = torch.float64


class _Branches(nn.Module):
    """Six Linear -> LayerNorm -> relu branches over the column blocks of one input (packed stacks)."""

    def __init__(self, n: int = 6, d: int = 4) -> None:
        super().__init__()
        self.d = d
        self.lins = nn.ModuleList(nn.Linear(d, d, dtype=F64) for _ in range(n))
        self.norms = nn.ModuleList(nn.LayerNorm(d, dtype=F64) for _ in range(n))

    def forward(self, x):
        pieces = torch.split(x, self.d, dim=1)
        return torch.cat([torch.relu(n(lin(p))) for lin, n, p in zip(self.lins, self.norms, pieces)], dim=1)


def _pair():
    torch.manual_seed(0)
    m = _Branches()
    torch.manual_seed(0)
    return m, _Branches()


# Found: the graph saves a view of the packed buffer for backward, but `p.data = buffer[i]` leaves each parameter
# its own version counter, so an in-place update between forward and backward reached backward unseen (eager
# raises; unpacked, the stack is a copy). Fixed by param_pack_runtime.SavedVersions.
def test_in_place_parameter_update_between_forward_and_backward_is_not_silently_used():
    m, ref = _pair()
    f = torch.compile(m, backend=optimus_eq.backend(strategy="greedy", compile=False))
    x = torch.randn(5, 24, dtype=F64, requires_grad=True)
    f(x).sum().backward()  # compiles the training graph (packs the parameter stacks)
    want, = torch.autograd.grad(ref(x).square().sum(), x)  # the gradient at the forward's weights
    out = f(x).square().sum()
    with torch.no_grad():
        for lin in m.lins:
            lin.weight.mul_(2.0)
    try:
        got, = torch.autograd.grad(out, x)
    except RuntimeError as exc:  # as eager: the saved weights were modified
        assert "inplace" in str(exc)
    else:
        torch.testing.assert_close(got, want)  # as unpacked: the forward's weights


def test_user_saved_tensor_hooks_still_apply_to_a_packed_graph():
    """The version check chains to the user's own saved-tensor hooks (offloading, checkpointing): they still see
    every saved tensor, and gradients are eager's."""
    m, ref = _pair()
    f = torch.compile(m, backend=optimus_eq.backend(strategy="greedy", compile=False))
    x = torch.randn(5, 24, dtype=F64, requires_grad=True)
    f(x).sum().backward()
    m.zero_grad(set_to_none=True)
    seen = {"pack": 0, "unpack": 0}

    def pack(t):
        seen["pack"] += 1
        return t.clone()  # a copy, as an offloading hook would make

    def unpack(t):
        seen["unpack"] += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        out = f(x).square().sum()
    out.backward()
    ref(x).square().sum().backward()
    assert seen["pack"] > 0 and seen["unpack"] > 0
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
