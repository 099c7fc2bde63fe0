"""More per-feature towers, written the ways users write them: uneven splits, bias-free layers, a residual inside
a tower, one input shared by every tower, LayerNorm without affine, bf16, batch size 1, detached or frozen
features, shared weights, weights sliced from one parameter, GELU/random ops between towers, grad-mode regions,
dynamic batch, unbind/stack.

Each case is checked against eager by the differential harness (values, strides, aliasing, every input's
gradient incl. None-ness; tests/conftest.py ``check`` traced with grad, tests/test_aten.py ``aot_check`` at
Aten-IR), and where every layer can be batched, the batched GEMMs are counted. The ``xfail(strict=True)`` cases
are shapes where batching is missed (not wrong results): they fail loudly once batching happens, so the count can
move into the passing tests.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import optimus_eq
from conftest import STRATEGIES, check, rand
from test_aten import aot_check

N, D, H, O, B = 6, 16, 32, 4, 8
PRE_GEMMS = ("bmm_add", "baddbmm", "bmm")


def _params(widths, n=N, seed=0, bias=True):
    ps = []
    for i in range(n):
        for j, (a, b) in enumerate(zip(widths, widths[1:])):
            ps.append(rand(b, a, seed=seed + 100 * i + j) * a ** -0.5)
            if bias:
                ps.append(rand(b, seed=seed + 100 * i + 50 + j) * 0.1)
    return ps


def _tower(h, w, act=F.relu, bias=True):
    """A 3-layer MLP over ``h`` with the weights ``w`` (W1, b1, W2, b2, W3, b3, or W1, W2, W3)."""
    w = list(w)
    for j in range(3):
        h = F.linear(h, w.pop(0), w.pop(0) if bias else None)
        if j < 2:
            h = act(h)
    return h


def _towers(body, x, widths=(D, H, H, O), bias=True):
    """``(fn, inputs)``: ``fn(x, *params)`` calls ``body(x, per-feature weight lists)``."""
    ps = _params(widths, bias=bias)
    per = len(ps) // N

    def fn(x, *ps):
        return body(x, [ps[i * per:(i + 1) * per] for i in range(N)])

    return fn, [x] + ps


def _gemms(ops) -> int:
    return sum(ops.get(k, 0) for k in PRE_GEMMS)


# -- the cases: (fn, inputs) builders ---------------------------------------------------------------

def uneven_split():
    """12 features, widths 16 and 8 alternating (two first-layer groups), 2 layers."""
    sizes = [16 if i % 2 == 0 else 8 for i in range(12)]
    ps = []
    for i, s in enumerate(sizes):
        ps += [rand(H, s, seed=i) * s ** -0.5, rand(H, seed=50 + i) * 0.1,
               rand(O, H, seed=100 + i) * H ** -0.5, rand(O, seed=150 + i) * 0.1]

    def fn(x, *ps):
        return torch.cat([F.linear(F.relu(F.linear(h, ps[4 * i], ps[4 * i + 1])), ps[4 * i + 2], ps[4 * i + 3])
                          for i, h in enumerate(torch.split(x, sizes, 1))], 1)

    return fn, [rand(B, sum(sizes), seed=9)] + ps


def no_bias():
    return _towers(lambda x, W: torch.cat([_tower(h, W[i], bias=False) for i, h in enumerate(torch.split(x, D, 1))], 1),
                   rand(B, N * D, seed=9), bias=False)


def residual():
    """4 layers of width 16, each adding its input back."""
    def body(x, W):
        outs = []
        for i, h in enumerate(torch.split(x, D, 1)):
            w = list(W[i])
            for j in range(4):
                y = F.linear(h, w.pop(0), w.pop(0))
                h = (F.relu(y) + h) if j < 3 else y
            outs.append(h)
        return torch.cat(outs, 1)
    return _towers(body, rand(B, N * D, seed=9), widths=(D, D, D, D, O))


def layer_norm_no_affine():
    def body(x, W):
        outs = []
        for i, h in enumerate(torch.split(x, D, 1)):
            w = W[i]
            h = F.relu(F.layer_norm(F.linear(h, w[0], w[1]), (H,)))
            h = F.relu(F.layer_norm(F.linear(h, w[2], w[3]), (H,)))
            outs.append(F.linear(h, w[4], w[5]))
        return torch.cat(outs, 1)
    return _towers(body, rand(B, N * D, seed=9))


def bf16():
    fn, inputs = _towers(lambda x, W: torch.cat([_tower(h, W[i]) for i, h in enumerate(torch.split(x, D, 1))], 1),
                         rand(B, N * D, seed=9))
    return fn, [t.to(torch.bfloat16) for t in inputs]


def batch_one():
    return _towers(lambda x, W: torch.cat([_tower(h, W[i]) for i, h in enumerate(torch.split(x, D, 1))], 1),
                   rand(1, N * D, seed=9))


def detached_feature():
    """feature 2's weights detached: their gradients stay None."""
    return _towers(lambda x, W: torch.cat([_tower(h, [t.detach() for t in W[i]] if i == 2 else W[i])
                                           for i, h in enumerate(torch.split(x, D, 1))], 1),
                   rand(B, N * D, seed=9))


def detached_mid():
    """feature 2 detached after its first layer: its first layer's gradients stay None."""
    def body(x, W):
        outs = []
        for i, h in enumerate(torch.split(x, D, 1)):
            w = W[i]
            h = F.relu(F.linear(h, w[0], w[1]))
            if i == 2:
                h = h.detach()
            outs.append(F.linear(F.relu(F.linear(h, w[2], w[3])), w[4], w[5]))
        return torch.cat(outs, 1)
    return _towers(body, rand(B, N * D, seed=9))


def nondifferentiable_use():
    """feature 2's output only reaches the result through a comparison: its weights get no gradient."""
    def body(x, W):
        outs = [_tower(h, W[i]) for i, h in enumerate(torch.split(x, D, 1))]
        outs[2] = (outs[2] > 0).to(outs[2].dtype)
        return torch.cat(outs, 1)
    return _towers(body, rand(B, N * D, seed=9))


def no_grad_tower():
    """feature 2's tower runs under torch.no_grad() inside the model."""
    def body(x, W):
        outs = []
        for i, h in enumerate(torch.split(x, D, 1)):
            if i == 2:
                with torch.no_grad():
                    outs.append(_tower(h, W[i]))
            else:
                outs.append(_tower(h, W[i]))
        return torch.cat(outs, 1)
    return _towers(body, rand(B, N * D, seed=9))


def shared_weights():
    """features 0 and 1 run the same tower (one set of weights, used twice)."""
    ps = _params((D, H, H, O), n=N - 1)

    def fn(x, *ps):
        return torch.cat([_tower(h, ps[6 * max(i - 1, 0):6 * max(i - 1, 0) + 6])
                          for i, h in enumerate(torch.split(x, D, 1))], 1)

    return fn, [rand(B, N * D, seed=9)] + ps


def sliced_parameter():
    """per-feature weights as slices W[i] of one [N, out, in] parameter."""
    W1, b1 = rand(N, H, D, seed=1) * D ** -0.5, rand(N, H, seed=2) * 0.1
    W2, b2 = rand(N, O, H, seed=3) * H ** -0.5, rand(N, O, seed=4) * 0.1

    def fn(x, W1, b1, W2, b2):
        return torch.cat([F.linear(F.relu(F.linear(h, W1[i], b1[i])), W2[i], b2[i])
                          for i, h in enumerate(torch.split(x, D, 1))], 1)

    return fn, [rand(B, N * D, seed=9), W1, b1, W2, b2]


def chained_gelu():
    """feature i's first hidden layer also reads feature i-1's, through GELU (opaque at Torch-IR)."""
    def body(x, W):
        outs, prev = [], None
        for i, h in enumerate(torch.split(x, D, 1)):
            w = W[i]
            a = F.gelu(F.linear(h, w[0], w[1]))
            if prev is not None:
                a = F.gelu(a + prev)
            prev = a
            outs.append(F.linear(F.gelu(F.linear(a, w[2], w[3])), w[4], w[5]))
        return torch.cat(outs, 1)
    return _towers(body, rand(B, N * D, seed=9))


def gelu_crossed():
    """layer 2 of feature i reads GELU of feature i+1's layer 1."""
    def body(x, W):
        l1 = [F.gelu(F.linear(h, W[i][0], W[i][1])) for i, h in enumerate(torch.split(x, D, 1))]
        l2 = [F.gelu(F.linear(l1[(i + 1) % N], W[i][2], W[i][3])) for i in range(N)]
        return torch.cat([F.linear(l2[i], W[i][4], W[i][5]) for i in range(N)], 1)
    return _towers(body, rand(B, N * D, seed=9))


def mixed_gelu_approximations():
    """exact GELU on even features, the tanh approximation on odd ones: not to be mixed up."""
    return _towers(lambda x, W: torch.cat([_tower(h, W[i], lambda t, i=i: F.gelu(t, approximate="tanh" if i % 2 else "none"))
                                           for i, h in enumerate(torch.split(x, D, 1))], 1),
                   rand(B, N * D, seed=9))


def unbind_stack():
    return _towers(lambda x, W: torch.stack([_tower(h, W[i]) for i, h in enumerate(x.unbind(1))], 1),
                   rand(B, N, D, seed=9))


def shared_input():
    """every tower reads the whole input (no split)."""
    return _towers(lambda x, W: torch.cat([_tower(x, W[i]) for i in range(N)], 1), rand(B, D, seed=9))


def towers_as_list():
    """one output per feature (e.g. per task), returned as a list: no cat joins the towers."""
    return _towers(lambda x, W: [_tower(h, W[i]) for i, h in enumerate(torch.split(x, D, 1))], rand(B, N * D, seed=9))


def gelu_noise():
    """GELU, then Gaussian noise (a random draw kept in order) between layers."""
    def body(x, W):
        outs = []
        for i, h in enumerate(torch.split(x, D, 1)):
            w = W[i]
            h = F.gelu(F.linear(h, w[0], w[1]))
            h = h + 0.1 * torch.randn_like(h)
            outs.append(F.linear(F.gelu(F.linear(h, w[2], w[3])), w[4], w[5]))
        return torch.cat(outs, 1)
    return _towers(body, rand(B, N * D, seed=9))


G, E, BOTH = ("greedy",), ("eqsat",), STRATEGIES

#: name -> (builder, strategies, batched GEMMs of the pre-grad plan or None (correctness only), linears left).
#: One strategy where the case exercises no strategy-specific path (the two alternate), both where gradients'
#: None-ness or the order of kept ops is at stake.
PRE_GRAD = {
    "uneven_split": (uneven_split, G, 3, 0),
    "no_bias": (no_bias, E, 3, 0),
    "residual": (residual, G, 4, 0),
    "layer_norm_no_affine": (layer_norm_no_affine, E, 3, 0),
    "bf16": (bf16, G, 3, 0),
    "batch_one": (batch_one, E, 3, 0),
    "detached_feature": (detached_feature, G, 3, 0),
    "detached_mid": (detached_mid, BOTH, 3, 1),            # feature 2's first layer: another gradient signature
    "nondifferentiable_use": (nondifferentiable_use, BOTH, 3, 3),
    "no_grad_tower": (no_grad_tower, BOTH, None, None),
    "shared_weights": (shared_weights, G, 3, 0),
    "sliced_parameter": (sliced_parameter, E, 2, 0),
    "chained_gelu": (chained_gelu, G, 3, 0),
    "gelu_crossed": (gelu_crossed, E, 3, 0),
    "mixed_gelu_approximations": (mixed_gelu_approximations, G, 3, 0),
    "unbind_stack": (unbind_stack, E, 3, 0),
    "shared_input": (shared_input, E, 2, 1),            # the first layer: one linear of the concatenated weights
}


@pytest.mark.slow
@pytest.mark.parametrize("name,strategy", [(n, s) for n, v in PRE_GRAD.items() for s in v[1]])
def test_pre_grad(name, strategy):
    build, _, gemms, linears = PRE_GRAD[name]
    fn, inputs = build()
    c = check(fn, inputs, strategy, trace_grad=True)
    ops = c.report.ops_after
    if gemms is not None:
        assert _gemms(ops) == gemms and ops.get("linear", 0) == linears, dict(ops)


#: name -> (builder, strategy, forward baddbmm/bmm, backward bmm, backward mm)
POST_GRAD = {
    "uneven_split": (uneven_split, "greedy", 3, 6, 0),
    "residual": (residual, "eqsat", 4, 6, 0),
    "shared_weights": (shared_weights, "eqsat", 3, 6, 0),
    "nondifferentiable_use": (nondifferentiable_use, "greedy", None, 6, 0),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(POST_GRAD))
def test_post_grad_forward_and_backward(name):
    build, strategy, fw_gemms, bw_bmm, bw_mm = POST_GRAD[name]
    fn, inputs = build()
    c = aot_check(fn, inputs, strategy)
    fw, bw = c.reports
    if fw_gemms is not None:
        assert fw.ops_after.get("addmm", 0) + fw.ops_after.get("mm", 0) == 0, dict(fw.ops_after)
        assert fw.ops_after.get("baddbmm", 0) + fw.ops_after.get("bmm", 0) == fw_gemms, dict(fw.ops_after)
    assert bw.ops_after.get("bmm", 0) == bw_bmm and bw.ops_after.get("mm", 0) == bw_mm, dict(bw.ops_after)


# -- through torch.compile, as a user runs it ---------------------------------------------------------

class ModuleTowers(nn.Module):
    def __init__(self, act=nn.ReLU, ln=False):
        super().__init__()

        def mlp():
            layers = [nn.Linear(D, H)] + ([nn.LayerNorm(H)] if ln else [])
            return nn.Sequential(*layers, act(), nn.Linear(H, H), act(), nn.Linear(H, O))

        self.towers = nn.ModuleList(mlp() for _ in range(N))

    def forward(self, x):
        return torch.cat([t(p) for t, p in zip(self.towers, torch.split(x, D, 1))], 1)


def _compare_module(model, strategy, batches=(B,), dynamic=False):
    """The model compiled with ``optimus_eq.backend(strategy, compile=False)`` against eager: outputs and every
    parameter's ``.grad`` (None exactly where eager's is). Returns the reports of the compile."""
    opt = copy.deepcopy(model)
    torch._dynamo.reset()
    optimus_eq.last_reports.clear()  # it keeps the last 100 only: a length taken before would not index it
    compiled = torch.compile(opt, backend=optimus_eq.backend(strategy, compile=False), dynamic=dynamic)
    for b in batches:
        x = rand(b, N * D, seed=b)
        for m in (model, opt):
            m.zero_grad(set_to_none=True)
        want, got = model(x), compiled(x)
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride()
        w = rand(*want.shape, seed=7)
        (want * w).sum().backward()
        (got * w).sum().backward()
        for (name, pe), (_, po) in zip(model.named_parameters(), opt.named_parameters()):
            assert (pe.grad is None) == (po.grad is None), f"{name}.grad: None-ness differs (batch {b})"
            if pe.grad is not None:
                torch.testing.assert_close(po.grad, pe.grad, msg=f"{name}.grad (batch {b})")
    reports = list(optimus_eq.last_reports)
    assert reports and all(r.fallback is None for r in reports)
    return reports


def test_module_with_a_frozen_tower(strategy="greedy"):
    """One tower's parameters frozen (requires_grad False): their .grad stays None, the others' match eager."""
    torch.manual_seed(0)
    model = ModuleTowers()
    for p in model.towers[2].parameters():
        p.requires_grad_(False)
    (rep,) = _compare_module(model, strategy)
    assert rep.ops_after.get("bmm_add", 0) == 3 and rep.ops_after.get("linear", 0) == 3, dict(rep.ops_after)


@pytest.mark.slow
def test_module_dynamic_batch(strategy="eqsat"):
    """dynamic=True: one graph with a symbolic batch, every layer batched, run at several batch sizes."""
    torch.manual_seed(0)
    reports = _compare_module(ModuleTowers(act=nn.GELU, ln=True), strategy, batches=(8, 3, 5), dynamic=True)
    assert len(reports) == 1
    assert reports[0].ops_after.get("bmm_add", 0) == 3 and reports[0].ops_after.get("linear", 0) == 0


# -- missed batching (not wrong results): strict xfails, to be moved up once batched -----------------

@pytest.mark.xfail(strict=True, reason="missed batching, on purpose: towers that feed different outputs have different "
                   "gradient signatures (PlanGraph.grad_signature); batched, a tower whose output gets no gradient "
                   "would give its parameters zeros where eager leaves None. Traced without grad they batch; "
                   "upstream batches them and changes the None-ness")
def test_missed_pre_grad_list_outputs():
    fn, inputs = towers_as_list()
    c = check(fn, inputs, "greedy", trace_grad=True)
    assert _gemms(c.report.ops_after) == 3, dict(c.report.ops_after)


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="missed batching: post-grad backward of towers with LayerNorm without "
                   "affine keeps the input-gradient mm of two layers per feature (12 mm)")
def test_missed_post_grad_layer_norm_no_affine_backward():
    fn, inputs = layer_norm_no_affine()
    c = aot_check(fn, inputs, "greedy")
    assert c.reports[1].ops_after.get("mm", 0) == 0, dict(c.reports[1].ops_after)


def test_pre_grad_gelu_then_random_op():
    """A pure kept op (GELU) may move across random draws (kept_order: draws are ordered among themselves, not
    barriers), so the layer after a per-feature random op is batched too."""
    fn, inputs = gelu_noise()
    # values are random: compare shapes, not values (check would compare draws)
    gm_inputs = [t.clone().requires_grad_() for t in inputs]
    graphs = []
    torch._dynamo.reset()
    torch.compile(fn, backend=lambda gm, ex: graphs.append((gm, ex)) or gm.forward, fullgraph=True)(*gm_inputs)
    _, report = optimus_eq.optimize(*graphs[0], strategy="greedy")
    assert report.fallback is None
    assert report.ops_after.get("linear", 0) == 0, dict(report.ops_after)
