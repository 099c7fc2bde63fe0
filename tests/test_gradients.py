"""Gradients keep eager's shape of None / zeros / values, per output, and outputs keep eager's requires_grad
(issue 11, classes 2-4), on pre-grad graphs from dynamo whose parameters are graph inputs.

The comparison here is stricter than conftest's ``check`` (which sums all outputs and reads only the
inputs it passes): for every output that requires grad, ``autograd.grad(output, every input that requires
grad, allow_unused=True)`` must be None exactly where eager's is and equal elsewhere, and every output's
``requires_grad`` / ``grad_fn`` must be eager's. Parameters are included (dynamo passes them as inputs).
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn

import optimus_eq
from conftest import dynamo_graph
from optimus_eq.horizontal.linear import bmm_add

SMALL = {"pattern_options": {name: {"min_fuse_set_size": 2} for name in
                             ("batch_linear_lhs", "batch_linear", "batch_layernorm", "batch_tanh")}}


def _flat(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


def gradient_facts(gm, args):
    """Per output: (requires_grad, has grad_fn, per source: None or the gradient of a weighted sum)."""
    outs = _flat(gm(*args))
    sources = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    g = torch.Generator().manual_seed(7)
    facts = []
    for o in outs:
        grads = None
        if o.requires_grad:
            w = torch.randn(o.shape, generator=g).to(o.dtype)
            grads = torch.autograd.grad((o * w).sum(), sources, allow_unused=True, retain_graph=True)
        facts.append((o.requires_grad, o.grad_fn is not None, grads))
    return facts


def assert_same_gradients(gm, gm2, args) -> None:
    exp, act = gradient_facts(gm, args), gradient_facts(gm2, args)
    assert len(exp) == len(act)
    for k, ((erg, efn, eg), (arg, afn, ag)) in enumerate(zip(exp, act)):
        assert (arg, afn) == (erg, efn), f"output {k}: requires_grad/grad_fn {(arg, afn)}, eager {(erg, efn)}"
        if eg is None:
            continue
        for j, (a, e) in enumerate(zip(ag, eg)):
            assert (a is None) == (e is None), f"output {k}, source {j}: gradient {'None' if a is None else 'a tensor'}, eager's {'None' if e is None else 'a tensor'}"
            if e is not None:
                torch.testing.assert_close(a, e, msg=lambda m: f"output {k}, source {j}: {m}")


def optimize(fn, inputs, strategy, **options):
    gm, ex = dynamo_graph(fn, *inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gm2, report = optimus_eq.optimize(gm, ex, strategy=strategy, **options)
    assert report.fallback is None, report.fallback
    assert_same_gradients(gm, gm2, ex)
    for a, e in zip(_flat(gm2(*ex)), _flat(gm(*ex))):
        torch.testing.assert_close(a, e)
    return gm2, report


def _xs(n, *shape):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*shape, generator=g) for _ in range(n)]


class Linears(nn.Module):
    def __init__(self, n, fin=4, fout=3):
        super().__init__()
        torch.manual_seed(0)
        self.l = nn.ModuleList(nn.Linear(fin, fout) for _ in range(n))


# -- class 2: None gradients stay None ---------------------------------------------------------------

def test_batch_linear_detached_and_dead_members_keep_none_gradients(strategy):
    class M(Linears):
        def forward(self, x0, x1, x2, x3):
            # l2's output is detached, l3's only compared: eager leaves their weights' gradients None
            return self.l[0](x0) + self.l[1](x1), self.l[2](x2).detach() * 2, self.l[3](x3) > 0

    _, r = optimize(M(4), _xs(4, 2, 4), strategy, **SMALL)
    assert r.rule_matches["batch_linear"] == 2, dict(r.rule_matches)  # {l0, l1} and {l2, l3}


def test_batch_linear_lhs_detached_member_keeps_none_gradients(strategy):
    class M(Linears):
        def forward(self, x):
            return self.l[0](x) * self.l[1](x), self.l[2](x).detach(), self.l[3](x) > 0

    _, r = optimize(M(4), _xs(1, 2, 4), strategy, **SMALL)
    assert r.rule_matches["batch_linear_lhs"] == 2, dict(r.rule_matches)


def test_batch_layernorm_detached_member_keeps_none_gradients(strategy):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.n = nn.ModuleList(nn.LayerNorm(4) for _ in range(4))
            with torch.no_grad():
                for i, ln in enumerate(self.n):
                    ln.weight.add_(0.1 * i)
                    ln.bias.add_(0.2 * i)

        def forward(self, x0, x1, x2, x3):
            return self.n[0](x0) + self.n[1](x1), self.n[2](x2).detach() + self.n[3](x3).detach()

    _, r = optimize(M(), _xs(4, 2, 4), strategy, **SMALL)
    assert r.rule_matches["batch_layernorm"] == 2, dict(r.rule_matches)


def test_members_feeding_different_outputs_are_not_fused(strategy):
    """A fused op would give each output gradient paths to every member's weight: ``backward`` of output 0
    alone would give l1's weight zeros where eager leaves None."""

    class M(Linears):
        def forward(self, x0, x1):
            return self.l[0](x0), self.l[1](x1)

    _, r = optimize(M(2), _xs(2, 2, 4), strategy, **SMALL)
    assert "batch_linear" not in r.rule_matches


def test_training_graph_with_one_output_still_fuses(strategy):
    """The usual training graph (every member reaches the one loss) fuses with upstream's default options."""

    class M(Linears):
        def forward(self, *xs):
            return torch.stack([torch.relu(l(x)) for l, x in zip(self.l, xs)]).sum()

    _, r = optimize(M(6), _xs(6, 2, 4), strategy)
    assert r.rule_matches["batch_linear"] == 1, dict(r.rule_matches)
    assert r.ops_after["linear"] == 0 and r.ops_before["linear"] == 6


# -- class 3: zero gradients stay tensors --------------------------------------------------------------

def test_cat_split_fold_keeps_zero_gradients_of_the_unused_piece(strategy):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.a, self.b = nn.Linear(4, 3), nn.Linear(4, 3)

        def forward(self, x):
            c = torch.cat([self.a(x), self.b(x)], 1)
            return torch.tanh(c.split([3, 3], 1)[1])

    gm2, r = optimize(M(), _xs(1, 2, 4), strategy)
    assert r.ops_after["split"] == 0, dict(r.ops_after)  # still folded: the link is an empty cat piece
    assert not any(n.target is torch.Tensor.mul or n.target is torch.mul for n in gm2.graph.nodes)


def test_lost_input_gradient_on_a_scalar_output(strategy):
    def f(a, b):
        return torch.cat([a, b]).split([3, 2])[1].sum()

    a, b = torch.randn(3).requires_grad_(), torch.randn(2).requires_grad_()
    optimize(f, [a, b], strategy)


def test_lost_gradient_inf_input_keeps_values():
    """The link adds no value (an empty piece), so inf and NaN in the cut input stay out of the result."""

    def f(a, b):
        return torch.cat([a, b], 1).narrow(1, 2, 3) * 2

    a = torch.full((2, 2), float("inf")).requires_grad_()
    b = torch.randn(2, 3).requires_grad_()
    gm, ex = dynamo_graph(f, a, b)
    gm2, r = optimus_eq.optimize(gm, ex, strategy="eqsat")
    assert r.fallback is None
    torch.testing.assert_close(_flat(gm2(*ex))[0], b * 2)
    assert_same_gradients(gm, gm2, ex)


# -- class 4: requires_grad does not leak through a batch ------------------------------------------------

def test_frozen_linears_batched_with_a_trained_one_need_no_grad(strategy):
    class M(Linears):
        def __init__(self):
            super().__init__(3)
            for l in self.l[1:]:
                l.requires_grad_(False)

        def forward(self, x0, x1, x2):
            return self.l[0](x0), self.l[1](x1), self.l[2](x2)

    _, r = optimize(M(), _xs(3, 2, 4), strategy, **SMALL)
    assert r.rule_matches["batch_linear"] == 1  # the two frozen ones


def test_pointwise_members_without_grad_stay_without_grad(strategy):
    def f(a, b, c, d):
        return torch.tanh(a) + torch.tanh(b), torch.tanh(c), torch.tanh(d)

    xs = _xs(4, 2, 3)
    xs[0].requires_grad_()
    xs[1].requires_grad_()
    _, r = optimize(f, xs, strategy, **SMALL)
    assert r.rule_matches["batch_tanh"] == 2  # {a, b} and {c, d}


# -- the lowering's check, with the grouping guard switched off -------------------------------------------

def _no_signatures(monkeypatch):
    from optimus_eq.horizontal.plan import PlanGraph

    monkeypatch.setattr(PlanGraph, "grad_signature", lambda self, c: None)


def test_lowering_detaches_outputs_eager_does_not_differentiate(strategy, monkeypatch):
    """Without the signature guard, frozen members fused with a trained one would come back requiring
    grad; the lowering's check detaches them (eager's outputs had no grad_fn)."""
    _no_signatures(monkeypatch)

    def f(a, b, c):
        return torch.tanh(a), torch.tanh(b), torch.tanh(c)

    xs = _xs(3, 2, 3)
    xs[0].requires_grad_()
    gm2, r = optimize(f, xs, strategy, **SMALL)
    assert r.rule_matches["batch_tanh"] == 1
    assert any(n.target == "detach" for n in gm2.graph.nodes)


def test_lowering_falls_back_on_extra_gradient_paths(strategy, monkeypatch):
    """Without the signature guard, linears feeding different outputs would be fused and each output would
    reach the other's weight: the lowering refuses such a plan (the original graph, one warning)."""
    _no_signatures(monkeypatch)

    class M(Linears):
        def forward(self, x0, x1):
            return self.l[0](x0), self.l[1](x1)

    gm, ex = dynamo_graph(M(2), *_xs(2, 2, 4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gm2, r = optimus_eq.optimize(gm, ex, strategy=strategy, **SMALL)
    assert r.rule_matches["batch_linear"] == 1
    fused = any(n.target in (torch.bmm, torch.baddbmm, bmm_add) for n in gm2.graph.nodes)
    if strategy == "greedy" or r.fallback is not None:  # greedy fuses destructively: only the fallback is left
        assert not fused and r.fallback is not None and "gradient paths" in r.fallback
        assert any("gradient paths" in str(w.message) for w in caught)
    else:  # eqsat may also have extracted the unfused linears
        assert not fused
    assert_same_gradients(gm, gm2, ex)


# -- random programs: linears (some frozen), layer norms, detach, comparisons, cat/split, several outputs --

class RandomProgram(nn.Module):
    """A random straight-line program over three [2, 4] inputs; ``outs`` picks 1-3 values to return."""

    OPS = ("lin", "lin", "ln", "tanh", "detach", "catsplit", "add", "gt")

    def __init__(self, seed: int) -> None:
        super().__init__()
        import random

        r = random.Random(seed)
        torch.manual_seed(seed)
        self.lins = nn.ModuleList(nn.Linear(4, 4) for _ in range(6))
        self.lns = nn.ModuleList(nn.LayerNorm(4) for _ in range(3))
        for lin in self.lins:
            if r.random() < 0.25:
                lin.requires_grad_(False)
        self.prog, n = [], 3
        for _ in range(r.randint(4, 10)):
            self.prog.append((r.choice(self.OPS), r.randrange(n), r.randrange(n), r.randrange(6), r.randrange(3),
                              r.randint(0, 1)))
            n += 1
        self.outs = sorted({r.randrange(3, n) for _ in range(r.randint(1, 3))})
        self.grad_inputs = [r.random() < 0.5 for _ in range(3)]

    def forward(self, x0, x1, x2):
        v = [x0, x1, x2]
        for op, a, b, li, ni, k in self.prog:
            A, B = v[a], v[b]
            if op == "lin":
                v.append(self.lins[li](A))
            elif op == "ln":
                v.append(self.lns[ni](A))
            elif op == "tanh":
                v.append(torch.tanh(A))
            elif op == "detach":
                v.append(A.detach())
            elif op == "catsplit":
                v.append(torch.cat([A, B], 1).split([4, 4], 1)[k])
            elif op == "add":
                v.append(A + B)
            else:
                v.append((A > 0).to(A.dtype))
        return tuple(v[i] for i in self.outs)


@pytest.mark.parametrize("seed", range(12))
def test_random_programs_keep_gradient_paths(seed, strategy):
    m = RandomProgram(seed)
    xs = [x.requires_grad_(g) for x, g in zip(_xs(3, 2, 4), m.grad_inputs)]
    optimize(m, xs, strategy, **SMALL)
