"""Breaker session 15 (parameter packing through one autograd node per call, ``PackedStacks``; stacks with
gradients left to the graph under CUDA graphs, ``grad_packing_pays``): what it found, and what it pinned.

Every check is differential against eager in float64: values, gradients (None stays None), raised errors.
The models are per-branch ``nn.LayerNorm`` + ``nn.Linear`` layers on pieces of a split input (what the
horizontal batching fuses and packing then stacks), in groups that reach different outputs.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import optimus_eq

F64 = torch.float64
N, D = 8, 4  # branches per group, features per branch


@pytest.fixture(autouse=True)
def _fresh_reports():
    optimus_eq.last_reports.clear()


class _Group(nn.Module):
    """``N`` branches: split -> LayerNorm -> Linear -> tanh per branch -> cat."""

    def __init__(self) -> None:
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(D) for _ in range(N))
        self.lins = nn.ModuleList(nn.Linear(D, D) for _ in range(N))

    def forward(self, x):
        pieces = torch.split(x, D, 1)
        return torch.cat([torch.tanh(lin(norm(p))) for p, norm, lin in zip(pieces, self.norms, self.lins)], 1)


class _Deep(nn.Module):
    """Two groups in sequence and a head: outputs ``(head, hidden)``."""

    def __init__(self) -> None:
        super().__init__()
        self.g1, self.g2, self.head = _Group(), _Group(), nn.Linear(N * D, 1)

    def forward(self, x, y):
        h = self.g2(self.g1(x) + x) * y
        return self.head(h), h


def _pair(cls):
    torch.manual_seed(0)
    m = cls().to(F64)
    return m, copy.deepcopy(m)


def _inputs():
    gen = torch.Generator().manual_seed(1)
    return (torch.randn(5, N * D, generator=gen, dtype=F64), torch.randn(5, N * D, generator=gen, dtype=F64))


def _compiled(m, strategy: str, **kw):
    return torch.compile(m, backend=optimus_eq.backend(strategy=strategy, compile=False, **kw))


def _packed() -> bool:
    return any("buffers" in n for r in optimus_eq.last_reports for n in r.notes if n.startswith("parameter packing"))


def _same_grads(m, ref, what: str) -> None:
    for (name, p), q in zip(m.named_parameters(), ref.parameters()):
        assert (p.grad is None) == (q.grad is None), f"{what}: grad of {name}: {p.grad is None} vs eager's"
        if q.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, msg=lambda s: f"{what}: grad of {name}: {s}")


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_the_compiling_call_inside_a_non_reentrant_checkpoint_saves_what_eager_saves(strategy):
    """Bug: the first call of a compiled model inside ``checkpoint(..., use_reentrant=False)`` failed in backward
    ("A different number of tensors was saved during the original forward and recomputation": 36 against
    18), packing or not: optimize's meta propagation ran ops on meta twins that require grad, and the
    checkpoint's pack hook counted their saved tensors. Fixed: the backend optimizes with the user's
    saved-tensor hooks off (``_user_saved_tensor_hooks_off``), as Dynamo's and AOTAutograd's tracing does."""
    from torch.utils.checkpoint import checkpoint

    x, y = _inputs()
    m, ref = _pair(_Deep)
    f = _compiled(m, strategy)
    grads = []
    for fn in (f, ref):
        xx = x.clone().requires_grad_()
        out, h = checkpoint(fn, xx, y, use_reentrant=False)  # the compiling call
        (out.sum() + h.square().sum()).backward()
        grads.append(xx.grad)
    assert _packed()
    torch.testing.assert_close(grads[0], grads[1])
    _same_grads(m, ref, "checkpointed step")
