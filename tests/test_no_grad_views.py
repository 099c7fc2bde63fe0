"""Views made under ``torch.no_grad()`` of tensors that require grad: they require grad but have no grad_fn,
so no gradient flows through them to their base. Found by a break-it session on global-state regions
(a same-shape view folded to its input gave the gradient ``2x`` for ``u * x``); such views stay as written
(``Translator._no_grad_views``)."""

from __future__ import annotations

import pytest
import torch

from conftest import check, rand

#: ops that are the identity on values (same shape) but, under ``no_grad``, give a view through which no
#: gradient flows to its base (it requires grad, as its base does, and has no grad_fn)
NO_GRAD_IDENTITY_VIEWS = {
    "view_same_shape": lambda x: x.view(4, 12),
    "slice_all": lambda x: x[:, :],
    "split_one_piece": lambda x: torch.split(x, 12, 1)[0],
    "permute_identity": lambda x: x.permute(0, 1),
    "narrow_full": lambda x: x.narrow(1, 0, 12),
}


@pytest.mark.parametrize("name", list(NO_GRAD_IDENTITY_VIEWS))
def test_no_grad_identity_view_used_after_the_region_keeps_no_gradient(strategy, name):
    """Eager: d(u * x)/dx = u = x (u made under no_grad); ours: 2x."""
    g = NO_GRAD_IDENTITY_VIEWS[name]

    def f(x):
        with torch.no_grad():
            u = g(x)
        return u * x

    check(f, [rand(4, 12)], strategy, trace_grad=True)



def test_no_grad_identity_view_returned_is_a_view_without_grad_fn(strategy):
    """Eager's first output is a view of x without grad_fn (a leaf for autograd); folded, it was x itself,
    whose gradient a backward through it would reach."""
    def f(x):
        with torch.no_grad():
            u = x.view(4, 12)
        return u, x * 2

    check(f, [rand(4, 12)], strategy, trace_grad=True)



def test_no_grad_identity_view_inside_autocast_keeps_no_gradient(strategy):
    """The same inside nested autocast / no_grad regions (the no_grad segment sits between two autocast ones)."""
    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with torch.no_grad():
                u = x[:, :]
            v = u.sum(1)
        return v * x.sum(1)

    check(f, [rand(4, 12)], strategy, trace_grad=True)


@pytest.mark.parametrize("strategy_name", ["greedy", "eqsat"])
def test_backend_no_grad_identity_view_gives_wrong_gradient(strategy_name):
    """The same through the backend (``torch.compile``, no Inductor): a training step's gradient is wrong."""
    import optimus_eq

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4, 12))

        def forward(self, x):
            h = x * self.w
            with torch.no_grad():
                scale = h.view(4, 12)  # a no-grad copy of h's values (a view made under no_grad)
            return (h * scale).sum()

    m = M()
    x = torch.randn(4, 12)
    m(x).backward()
    expected = m.w.grad.clone()
    m.w.grad = None
    torch.compile(m, backend=optimus_eq.backend(strategy_name, compile=False))(x).backward()
    torch.testing.assert_close(m.w.grad, expected)
