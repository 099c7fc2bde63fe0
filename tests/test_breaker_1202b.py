"""Breaker findings of 2026-12-02 (second session): inputs that gave wrong results or crashed where eager works,
each compared with eager."""

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


def _packed_training(m):
    """``m`` compiled (greedy, no Inductor), after one training call that packs its parameter stacks."""
    f = torch.compile(m, backend=optimus_eq.backend(strategy="greedy", compile=False))
    f(torch.randn(5, 24, dtype=F64)).sum().backward()
    assert m.lins[1].weight.storage_offset() != 0, "the Linear weights were not packed"
    m.zero_grad(set_to_none=True)
    return f


# Found: under the user's own saved-tensor hooks eager does not check versions (the hook holds what it saved:
# an offloaded copy keeps the forward's weights), but the packed graph's version check still raised when a
# weight was written between forward and backward: a crash where eager trains. Fixed in param_pack
# (ParameterPacks.wrap: the check only where no saved-tensor hooks are active, as eager's own).
@pytest.mark.parametrize("hooks", ["offload copy", "checkpoint"])
def test_in_place_update_under_user_saved_tensor_hooks_trains_as_eager(hooks):
    from torch.utils.checkpoint import checkpoint

    m, ref = _pair()
    f = _packed_training(m)
    x = torch.randn(5, 24, dtype=F64)
    for mod, mm in ((f, m), (ref, ref)):
        if hooks == "checkpoint":
            out = checkpoint(mod, x, use_reentrant=False).square().sum()
        else:
            with torch.autograd.graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t):
                out = mod(x).square().sum()
        with torch.no_grad():
            mm.lins[2].weight.mul_(2.0)
            mm.norms[4].weight.add_(1.0)
        out.backward()  # eager: no version check under saved-tensor hooks
    for (name, p), q in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=lambda s: f"grad of {name}: {s}")
