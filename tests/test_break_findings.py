"""Inputs found to give results that differ from eager (each an xfail(strict=True) until fixed).

Found by a break-it session on the newest features (global-state regions, parameter packing, CLI).
"""

from __future__ import annotations

import pytest
import torch

from conftest import check, rand

#: ops that are the identity on values (same shape) but, under ``no_grad``, give a tensor that does not
#: require grad (a view made in no_grad mode); eager's gradient does not flow through them
NO_GRAD_IDENTITY_VIEWS = {
    "view_same_shape": lambda x: x.view(4, 12),
    "slice_all": lambda x: x[:, :],
    "split_one_piece": lambda x: torch.split(x, 12, 1)[0],
    "permute_identity": lambda x: x.permute(0, 1),
    "narrow_full": lambda x: x.narrow(1, 0, 12),
}

_REASON = ("a no-op view inside `with torch.no_grad()` is simplified to its input (a placeholder of the "
           "segment), and the stitched graph then reads the input itself, which requires grad: the view's "
           "no-grad-ness is lost (needs a .detach() as cat(split(x)) gets)")


@pytest.mark.xfail(strict=True, reason=_REASON)
@pytest.mark.parametrize("name", list(NO_GRAD_IDENTITY_VIEWS))
def test_no_grad_identity_view_used_after_the_region_keeps_no_gradient(strategy, name):
    """Eager: d(u * x)/dx = u = x (u made under no_grad); ours: 2x."""
    g = NO_GRAD_IDENTITY_VIEWS[name]

    def f(x):
        with torch.no_grad():
            u = g(x)
        return u * x

    check(f, [rand(4, 12)], strategy, trace_grad=True)


@pytest.mark.xfail(strict=True, reason=_REASON)
def test_no_grad_identity_view_returned_does_not_require_grad(strategy):
    """Eager's first output does not require grad; ours is the input itself and does (and carries its grad)."""
    def f(x):
        with torch.no_grad():
            u = x.view(4, 12)
        return u, x * 2

    check(f, [rand(4, 12)], strategy, trace_grad=True)


@pytest.mark.xfail(strict=True, reason=_REASON)
def test_no_grad_identity_view_inside_autocast_keeps_no_gradient(strategy):
    """The same inside nested autocast / no_grad regions (the no_grad segment sits between two autocast ones)."""
    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with torch.no_grad():
                u = x[:, :]
            v = u.sum(1)
        return v * x.sum(1)

    check(f, [rand(4, 12)], strategy, trace_grad=True)


@pytest.mark.xfail(strict=True, reason=_REASON)
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
