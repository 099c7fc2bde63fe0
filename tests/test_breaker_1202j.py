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


class _Halves(nn.Module):
    """``N`` linears: the first half on pieces of ``x1`` gives output 0, the second half on pieces of ``x2``
    output 1. Inference batches all ``N``; training batches each half apart (their gradient signatures
    differ: they reach different outputs), so the training graph's two packs share the inference one's storage."""

    def __init__(self) -> None:
        super().__init__()
        self.lins = nn.ModuleList(nn.Linear(D, D) for _ in range(N))

    def forward(self, x1, x2):
        p1, p2, h = torch.split(x1, D, 1), torch.split(x2, D, 1), N // 2
        return (torch.cat([torch.tanh(self.lins[i](p1[i])) for i in range(h)], 1),
                torch.cat([torch.tanh(self.lins[h + i](p2[i])) for i in range(h)], 1))


def test_a_write_into_a_parameter_no_saved_tensor_holds_does_not_raise_where_packs_share_a_storage():
    """Bug: the saved-tensor version check (``SavedVersions``) found a saved tensor's parameters by its storage,
    and two packs on one storage (an inference compile packed all ``N`` weights, the training graph packs two
    halves of them in place) shared one list: backward read a saved view of the second half's weights and
    raised for a write into the first half's weight 0, which eager never saved (``x1`` needs no gradient).
    Fixed: the table is per buffer. A write into a saved half still raises as eager's; gradients equal."""
    x1, x2 = (t[:, :N // 2 * D] for t in _inputs())
    m, ref = _pair(_Halves)
    f = _compiled(m, "eqsat")
    with torch.no_grad():
        torch.testing.assert_close(f(x1, x2), ref(x1, x2))  # packs every weight into one buffer
    weights = [lin.weight for lin in m.lins]
    assert len({w.untyped_storage().data_ptr() for w in weights}) == 1
    optimus_eq.last_reports.clear()

    def step(fn, mod, written: int):
        xx2 = x2.clone().requires_grad_()
        h1, h2 = fn(x1, xx2)
        with torch.no_grad():
            mod.lins[written].weight.add_(1.0)
        (h1.sum() + h2.square().sum()).backward()
        return xx2.grad

    torch.testing.assert_close(step(f, m, 0), step(ref, ref, 0))  # eager: no raise (weight 0 not saved)
    assert optimus_eq.last_reports and _packed()
    assert len({w.untyped_storage().data_ptr() for w in weights}) == 1  # the training packs share it
    _same_grads(m, ref, "after a write into weight 0")
    for fn, mod in ((ref, ref), (f, m)):
        with pytest.raises(RuntimeError, match="inplace"):
            step(fn, mod, N - 1)  # a saved weight: both raise


class _Penalized(nn.Module):
    """``N`` linears on pieces of ``x`` (batched: their weights packed), and an L2 penalty on weight 0 read
    unstacked (autograd saves that parameter itself, which lives inside the pack's buffer)."""

    def __init__(self) -> None:
        super().__init__()
        self.lins = nn.ModuleList(nn.Linear(D, D) for _ in range(N))

    def forward(self, x):
        h = torch.cat([torch.tanh(lin(p)) for p, lin in zip(torch.split(x, D, 1), self.lins)], 1)
        return h, self.lins[0].weight.square().sum()


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_a_write_into_a_sibling_of_a_parameter_saved_unstacked_does_not_raise(strategy):
    """Bug: a packed parameter the graph also reads unstacked (a penalty term) is saved as itself, and its
    address is inside its pack's buffer: the version check took it for a view of the whole pack and raised for
    a write into weight 3 between forward and backward, which eager never saved (``x`` needs no gradient).
    Fixed: a saved tensor checks only the parameters whose bytes it spans. A write into weight 0 itself
    still raises, as eager's."""
    x, _ = _inputs()
    m, ref = _pair(_Penalized)

    def step(fn, mod, written: int):
        h, penalty = fn(x)
        with torch.no_grad():
            mod.lins[written].weight.add_(1.0)
        (h.sum() + penalty).backward()

    f = _compiled(m, strategy)
    for fn, mod in ((f, m), (ref, ref)):
        step(fn, mod, 3)
    assert _packed()
    _same_grads(m, ref, "after a write into weight 3")
    for fn, mod in ((ref, ref), (f, m)):
        with pytest.raises(RuntimeError, match="inplace"):
            step(fn, mod, 0)
