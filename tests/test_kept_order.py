"""Kept (opaque) FX nodes: only those with an effect keep their relative order (``optimus_bridge.kept_order``).

Pure kept nodes (``F.gelu``, ``F.silu``, ``torch.sum``, ``torch.erf``, ...) may float between the two effectful
kept nodes around them, so a per-feature tower with an opaque activation between its Linear layers is batched
layer by layer; lowering raises ``LoweringError`` (a fallback to the input graph) where a plan would move a kept
node across an effectful one. Each case here is compared with eager: values, dtypes, strides, aliasing,
gradients (None-ness included), inputs after the call (in-place writes), and, for random ops, the numbers drawn
under one seed. A fallback with a warning is acceptable where a case says so; a wrong value is not.

Random ops at Torch-IR (factories such as ``torch.randn``, ``torch.multinomial``, attention with dropout) and
in-place writes called by their dunder names are effects: the cases below that draw or write check that they
keep eager's order.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import optimus_eq
from conftest import STRATEGIES, _gm_args, check, dynamo_graph, fx_graph

N, D = 6, 8
_G = torch.Generator().manual_seed(1234)
WS = [[torch.randn(D, D, generator=_G) * 0.3 for _ in range(N)] for _ in range(3)]
BS = [[torch.randn(D, generator=_G) * 0.1 for _ in range(N)] for _ in range(3)]
#: groups from two members, for the cases with few branches
SMALL = {"pattern_options": {k: {"min_fuse_set_size": 2} for k in (
    "batch_linear", "batch_relu", "batch_tanh", "batch_sigmoid", "batch_layernorm", "batch_clamp", "batch_detach")}}
GEMMS = ("bmm", "baddbmm", "bmm_add")


def lin(h, layer, i):
    return F.linear(h, WS[layer][i], BS[layer][i])


def _xs(n=N, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(4, D, generator=g) for _ in range(n)]


def _count(gm, names) -> int:
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and getattr(n.target, "__name__", "") in names)


# -- the tower the change is for --------------------------------------------------------------------------

class Tower(torch.nn.Module):
    """Six features, each Linear -> GELU -> Linear -> GELU -> Linear."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(torch.nn.ModuleList(torch.nn.Linear(D, D) for _ in range(3))
                                          for _ in range(N))

    def forward(self, a, b, c, d, e, f):
        outs = []
        for layers, x in zip(self.layers, (a, b, c, d, e, f)):
            h = F.gelu(layers[0](x))
            h = F.gelu(layers[1](h))
            outs.append(layers[2](h))
        return torch.cat(outs, 1)


@pytest.mark.parametrize("trace_grad", [False, True])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_gelu_tower_is_three_batched_gemms(strategy, trace_grad):
    """Every layer of the tower is one batched GEMM (before the change only the last was: the GELUs, chained in
    their original order, made each feature's first Linears depend on the other features' later ones), and
    values and gradients (inputs and, through ``check``, every floating input) equal eager's."""
    c = check(Tower(), _xs(), strategy, trace_grad=trace_grad)
    assert c.report.patterns_fired["batch_linear"] == 3
    assert _count(c.gm2, GEMMS) == 3
    assert _count(c.gm2, ("linear",)) == 0
    assert _count(c.gm2, ("gelu",)) == 12  # the GELUs stay as written, one per feature and layer


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_gelu_tower_parameter_gradients_equal_eagers(strategy):
    """The tower as a module trained through ``optimus_eq.backend``: parameter gradients too."""
    model, ref = Tower(), Tower()
    compiled = torch.compile(model, backend=optimus_eq.backend(strategy=strategy, compile=False), fullgraph=True)
    xs = [x.requires_grad_() for x in _xs(seed=1)]
    xr = [x.detach().clone().requires_grad_() for x in xs]
    torch._dynamo.reset()
    out, want = compiled(*xs), ref(*xr)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    (out * w).sum().backward()
    (want * w).sum().backward()
    for x, y in zip(xs, xr):
        torch.testing.assert_close(x.grad, y.grad, rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-5, msg=name)


# -- pure kept ops next to in-place writes (Torch IR) -------------------------------------------------------

def gelu_read_then_add_(a, b, c, d, e, f):
    outs = []
    for i, x in enumerate((a, b, c, d, e, f)):
        h = lin(x, 0, i)
        g = F.gelu(h)
        h.add_(1.0)  # after the GELU read h
        outs.append(lin(g, 1, i) + h)
    return torch.cat(outs, 1)


def mul_then_silu(a, b, c, d, e, f):
    outs = []
    for i, x in enumerate((a, b, c, d, e, f)):
        h = lin(x, 0, i)
        h.mul_(2.0)  # before the SiLU reads h
        outs.append(lin(F.silu(h), 1, i))
    return torch.cat(outs, 1)


def gelus_then_all_relu_(a, b, c, d, e, f):
    hs = [lin(x, 0, i) for i, x in enumerate((a, b, c, d, e, f))]
    gs = [F.gelu(h) for h in hs]
    for h in hs:
        h.relu_()
    return torch.cat([lin(g, 1, i) + lin(h, 2, i) for i, (g, h) in enumerate(zip(gs, hs))], 1)


def sum_then_setitem(a, b, c, d, e, f):
    outs = []
    for i, x in enumerate((a, b, c, d, e, f)):
        h = lin(x, 0, i)
        s = torch.sum(h, 1, keepdim=True)
        h[:, 0] = 0.0
        outs.append(lin(F.softplus(h), 1, i) * s)
    return torch.cat(outs, 1)


def input_mutated_between_reads(a, b, c, d, e, f):
    outs = []
    for i, x in enumerate((a, b, c, d, e, f)):
        g = F.gelu(x)
        x.mul_(2.0)
        outs.append(lin(g, 0, i) + lin(torch.erf(x), 1, i))
    return torch.cat(outs, 1)


def inputs_mutated_after_tower(a, b, c, d, e, f):
    xs = (a, b, c, d, e, f)
    outs = [lin(F.gelu(lin(x, 0, i)), 1, i) for i, x in enumerate(xs)]
    for x in xs:
        x.add_(1.0)
    return torch.cat(outs + [lin(F.gelu(x), 2, i) for i, x in enumerate(xs)], 1)


def view_of_input_mutated(a, b, c, d, e, f):
    outs = []
    for i, x in enumerate((a, b, c, d, e, f)):
        v = x.t()
        s = torch.sum(x)
        g = F.gelu(lin(x, 0, i))
        v.mul_(3.0)
        outs.append(lin(F.gelu(g), 1, i) + s + torch.sum(x))
    return torch.cat(outs, 1)


def buffer_accumulated(a, b, c, d, e, f):
    acc = torch.zeros(4, D)
    outs = []
    for i, x in enumerate((a, b, c, d, e, f)):
        h = F.gelu(lin(x, 0, i))
        s = F.silu(acc)  # reads the accumulator before this feature's write
        acc.add_(h)
        outs.append(lin(s, 1, i) + lin(h, 2, i))
    return torch.cat(outs, 1), acc


def buffer_copied(a, b, c, d, e, f):
    buf = torch.zeros(4, D)
    outs = []
    for i, x in enumerate((a, b, c, d, e, f)):
        h = F.gelu(lin(x, 0, i))
        r = torch.sum(buf)
        buf.copy_(h)
        outs.append(lin(buf * 1.0, 1, i) + r)
    return torch.cat(outs, 1)


def output_views_mutated(a, b, c, d, e, f):
    outs = []
    for i, x in enumerate((a, b, c, d, e, f)):
        h = lin(x, 0, i)
        g = F.gelu(h)
        h[:2].relu_()
        outs += [lin(g, 1, i), h]
    return outs


MUTATING = [gelu_read_then_add_, mul_then_silu, gelus_then_all_relu_, sum_then_setitem, input_mutated_between_reads,
            inputs_mutated_after_tower, view_of_input_mutated, buffer_accumulated, buffer_copied, output_views_mutated]


def _pairs(fns, both=4):
    """(fn, strategy): both strategies for the first ``both`` programs, then one each, alternating (runtime)."""
    out = [(f, s) for f in fns[:both] for s in STRATEGIES]
    return out + [(f, STRATEGIES[i % 2]) for i, f in enumerate(fns[both:])]


@pytest.mark.parametrize("fn, strategy", _pairs(MUTATING), ids=lambda v: getattr(v, "__name__", v))
def test_pure_kept_ops_stay_on_their_side_of_in_place_writes(fn, strategy):
    check(fn, _xs(), strategy, grad=False)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_pure_reads_around_writes_symbolic_trace(strategy):
    for fn in (gelu_read_then_add_, mul_then_silu, input_mutated_between_reads):
        check(fn, _xs(), strategy, source="fx", grad=False)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_small_groups_with_in_place_relu(strategy):
    def fn(a, b, c):
        outs = []
        for i, x in enumerate((a, b, c)):
            h = lin(x, 0, i)
            g = F.gelu(h)
            torch.relu_(h)
            outs.append(lin(g, 1, i) + torch.tanh(h))
        return torch.cat(outs, 1)

    check(fn, _xs(3), strategy, grad=False, **SMALL)


# -- global-state regions, asserts --------------------------------------------------------------------------

def no_grad_layer(a, b, c, d, e, f):
    outs = []
    for i, x in enumerate((a, b, c, d, e, f)):
        h = F.gelu(lin(x, 0, i))
        with torch.no_grad():
            h2 = F.gelu(lin(h, 1, i))
        outs.append(lin(h2, 2, i) + h)
    return torch.cat(outs, 1)


def no_grad_some_features(a, b, c, d, e, f):
    outs = []
    for i, x in enumerate((a, b, c, d, e, f)):
        h = F.gelu(lin(x, 0, i))
        with torch.set_grad_enabled(i % 2 == 0):
            h = F.gelu(lin(h, 1, i))
        outs.append(lin(h, 2, i))
    return torch.cat(outs, 1)


def autocast_some_features(a, b, c, d, e, f):
    outs = []
    for i, x in enumerate((a, b, c, d, e, f)):
        h = F.gelu(lin(x, 0, i))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=i < 3):
            h = F.silu(lin(h, 1, i))
        outs.append(lin(h.float(), 2, i))
    return torch.cat(outs, 1)


def asserts_between_layers(a, b, c, d, e, f):
    outs = []
    for i, x in enumerate((a, b, c, d, e, f)):
        h = F.gelu(lin(x, 0, i))
        torch._assert_async((h > -1e9).all())
        outs.append(lin(F.gelu(lin(h, 1, i)), 2, i))
    return torch.cat(outs, 1)


def no_grad_write_after_gelu(a, b, c, d, e, f):
    outs = []
    for i, x in enumerate((a, b, c, d, e, f)):
        h = lin(x, 0, i)
        g = F.gelu(h)
        with torch.no_grad():
            h.mul_(0.5)
        outs.append(lin(g, 1, i) + h)
    return torch.cat(outs, 1)


def autocast_write_after_gelu(a, b, c, d, e, f):
    outs = []
    for i, x in enumerate((a, b, c, d, e, f)):
        h = lin(x, 0, i)
        g = F.gelu(h)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h2 = F.silu(lin(g, 1, i))
        h.mul_(2.0)
        outs.append(lin(h2.float(), 2, i) + h)
    return torch.cat(outs, 1)


def inference_mode_layer(a, b, c, d, e, f):
    outs = []
    for i, x in enumerate((a, b, c, d, e, f)):
        h = F.gelu(lin(x, 0, i))
        with torch.inference_mode():
            h2 = F.gelu(lin(h, 1, i))
        outs.append(h2.clone())
    return torch.cat(outs, 1)


REGIONS = [no_grad_some_features, autocast_some_features, no_grad_layer, asserts_between_layers,
           no_grad_write_after_gelu, autocast_write_after_gelu, inference_mode_layer]
WRITES = (no_grad_write_after_gelu, autocast_write_after_gelu, inference_mode_layer)


@pytest.mark.slow
@pytest.mark.parametrize("fn, strategy", _pairs(REGIONS, both=2), ids=lambda v: getattr(v, "__name__", v))
def test_regions_and_asserts_inside_towers(fn, strategy):
    grad = fn not in WRITES  # a write after the GELU that saved h, or inference tensors: no backward
    check(fn, _xs(), strategy, grad=grad, trace_grad=grad)


# -- random ops: the numbers drawn under one seed -----------------------------------------------------------

def _same_draws(fn, inputs, strategy, *, source="dynamo", fallback_random=True, **options):
    """Optimize ``fn``'s graph, run it and the original under one seed, and compare outputs and input gradients
    exactly (up to float rounding of the batched GEMMs). Returns the report."""
    trace = [x.clone() for x in inputs]
    with torch._inductor.config.patch(fallback_random=fallback_random):
        gm, example = (dynamo_graph if source == "dynamo" else fx_graph)(fn, *trace)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gm2, report = optimus_eq.optimize(gm, example, strategy=strategy, **options)
    runs = []
    for g in (gm, gm2):
        xs = [x.clone().requires_grad_() for x in inputs]
        args = _gm_args(example, trace, xs) if source == "dynamo" else xs
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(7)
            out = g(*args)
        out = list(out) if isinstance(out, (tuple, list)) else [out]
        loss = sum((o.float() * torch.linspace(-1, 1, o.numel()).view(o.shape)).sum() for o in out if o.is_floating_point())
        if loss.requires_grad:
            loss.backward()
        runs.append((out, [x.grad for x in xs]))
    (want, want_g), (got, got_g) = runs
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m: f"output {i}: {m}")
    for i, (a, b) in enumerate(zip(got_g, want_g)):
        assert (a is None) == (b is None), f"grad of input {i}: None-ness differs"
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    return report


def dropout_between_layers(a, b, c, d, e, f):
    return torch.cat([lin(F.dropout(F.gelu(lin(F.dropout(F.gelu(lin(x, 0, i)), 0.3), 1, i)), 0.3), 2, i)
                      for i, x in enumerate((a, b, c, d, e, f))], 1)


def rand_like_and_bernoulli(a, b, c, d, e, f):
    outs = []
    for i, x in enumerate((a, b, c, d, e, f)):
        h = F.gelu(lin(x, 0, i))
        h = F.silu(lin(h + torch.rand_like(h), 1, i))
        outs.append(lin(h * torch.bernoulli(torch.sigmoid(h)), 2, i))
    return torch.cat(outs, 1)


def rrelu_between_layers(a, b, c, d, e, f):
    return torch.cat([lin(F.rrelu(lin(F.gelu(lin(x, 0, i)), 1, i), training=True), 2, i)
                      for i, x in enumerate((a, b, c, d, e, f))], 1)


def dropouts_drawn_out_of_feature_order(a, b, c, d, e, f):
    order = (5, 3, 1, 0, 2, 4)
    hs = [F.gelu(lin(x, 0, i)) for i, x in enumerate((a, b, c, d, e, f))]
    drawn = {i: F.dropout(hs[i], 0.5) for i in order}
    return torch.cat([lin(F.gelu(lin(drawn[i], 1, i)), 2, i) for i in range(N)], 1)


def rand_like_drawn_after_a_batched_layer(a, b, c, d, e, f):
    ys = [F.gelu(lin(x, 0, i)) for i, x in enumerate((a, b, c, d, e))]
    n1 = torch.rand_like(a)
    n2 = torch.rand_like(a)
    ys.append(F.gelu(lin(f + n2, 0, 5)))
    return torch.cat([lin(y, 1, i) for i, y in enumerate(ys)], 1), n1


RANDOM = [dropout_between_layers, rand_like_and_bernoulli, rrelu_between_layers, dropouts_drawn_out_of_feature_order,
          rand_like_drawn_after_a_batched_layer]


@pytest.mark.slow
@pytest.mark.parametrize("fn, strategy", _pairs(RANDOM, both=2), ids=lambda v: getattr(v, "__name__", v))
def test_random_ops_draw_as_eager_under_fallback_random(fn, strategy):
    report = _same_draws(fn, _xs(), strategy)
    assert report.fallback is None and report.patterns_fired["batch_linear"] >= 1


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_random_ops_draw_as_eager_symbolic_trace(strategy):
    for fn in (dropout_between_layers, rand_like_drawn_after_a_batched_layer):
        report = _same_draws(fn, _xs(), strategy, source="fx")
        assert report.fallback is None and report.patterns_fired["batch_linear"] >= 1


# Torch-IR factories and samplers (and attention with dropout) draw random numbers though not all are named in
# ``lower_random._RANDOM_NAMES``: ``kept_order`` orders them among the draws. In this program the first feature's GELU
# reads the batched first layer, which needs ``f + n2``; lowering must still draw ``n1`` before ``n2``.
RANDOM_FACTORIES = {
    "randn": lambda: torch.randn(4, D),
    "rand": lambda: torch.rand(4, D),
    "randint": lambda: torch.randint(0, 100, (4, D)).float(),
    "randperm": lambda: torch.randperm(4 * D).float().view(4, D),
    "multinomial": lambda: torch.multinomial(torch.ones(4, D), D).float(),
    "Tensor.multinomial": lambda: torch.ones(4, D).multinomial(D).float(),
    "binomial": lambda: torch.binomial(torch.full((4, D), 5.0), torch.full((4, D), 0.5)),
    "_standard_gamma": lambda: torch._standard_gamma(torch.full((4, D), 2.0)),
    "sdpa_dropout": lambda: F.scaled_dot_product_attention(*[torch.ones(1, 4, D).cumsum(2)] * 3, dropout_p=0.5)[0],
}


def _two_draws(draw):
    def fn(a, b, c, d, e, f):
        ys = [F.gelu(lin(x, 0, i)) for i, x in enumerate((a, b, c, d, e))]
        n1 = draw()
        n2 = draw()
        ys.append(F.gelu(lin(f + n2, 0, 5)))
        return torch.cat(ys, 1), n1
    return fn


@pytest.mark.parametrize("name, strategy", [(n, "greedy") for n in RANDOM_FACTORIES]
                         + [("randn", "eqsat"), ("sdpa_dropout", "eqsat")])
def test_random_factories_keep_their_draw_order(name, strategy):
    """Torch-IR random ops whose aten op is seeded, and attention with dropout, keep their draw order
    (``kept_order._draws_random``): a batched layer that needs the second draw cannot pull it before the first."""
    _same_draws(_two_draws(RANDOM_FACTORIES[name]), _xs(), strategy)


def test_random_factories_as_rand_like_keep_their_draw_order():
    """The same program with ``rand_like`` (in ``_RANDOM_NAMES``): ordered, eager's draws."""
    _same_draws(rand_like_drawn_after_a_batched_layer, _xs(), "greedy", fallback_random=False)


# -- dunder in-place calls ----------------------------------------------------------------------------------

def explicit_iadd(a, b, c, d, e, z):
    ys = [F.gelu(lin(x, 0, i)) for i, x in enumerate((a, b, c, d, e))]
    h = z * 1.0
    g = F.gelu(h)  # reads h before the write
    w = h.__iadd__(1.0)
    ys.append(F.gelu(lin(w, 0, 5)))
    return torch.cat(ys, 1), g


def explicit_setitem(a, b, c, d, e, z):
    ys = [F.gelu(lin(x, 0, i)) for i, x in enumerate((a, b, c, d, e))]
    h = z * 1.0
    g = F.gelu(h)
    h.__setitem__(0, 5.0)
    ys.append(F.gelu(lin(F.silu(h), 0, 5)))  # reads h after the write
    return torch.cat(ys, 1), g


@pytest.mark.parametrize("fn, source, strategy", [(explicit_iadd, "dynamo", "greedy"), (explicit_iadd, "dynamo", "eqsat"),
                                                  (explicit_iadd, "fx", "greedy"), (explicit_setitem, "fx", "eqsat")],
                         ids=lambda v: getattr(v, "__name__", v))
def test_dunder_in_place_calls_are_effects(fn, source, strategy):
    """``x.__iadd__(y)`` and ``x.__setitem__(i, v)`` called by name write ``x`` (``effects.is_mutation``): a pure
    GELU that read ``h`` before the write stays before it, the SiLU after it stays after."""
    check(fn, _xs(), strategy, source=source, grad=False)


def test_operator_setitem_and_iadd_stay_ordered():
    """The same programs in dynamo's spelling of ``h[0] = 5.0`` (``operator.setitem``): eager's values."""
    def setitem(a, b, c, d, e, z):
        ys = [F.gelu(lin(x, 0, i)) for i, x in enumerate((a, b, c, d, e))]
        h = z * 1.0
        g = F.gelu(h)
        h[0] = 5.0
        ys.append(F.gelu(lin(F.silu(h), 0, 5)))
        return torch.cat(ys, 1), g

    for strategy in STRATEGIES:
        check(setitem, _xs(), strategy, grad=False)


# -- gradients: a detach between two batched layers ---------------------------------------------------------

def detach_between_layers(a, b, c, d, e, f):
    outs = []
    for i, x in enumerate((a, b, c, d, e, f)):
        h = F.linear(x, WS[0][i])
        if i == 1:
            h = h.detach()
        outs.append(F.linear(h, WS[1][i]))
    return torch.cat(outs, 1)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_detach_between_batched_layers_traced_with_grad(strategy):
    check(detach_between_layers, _xs(), strategy, trace_grad=True)
    check(detach_between_layers, _xs(), strategy, source="fx", trace_grad=True)


# -- other pure ops between layers; small groups; aliasing outputs -----------------------------------------

def sums_and_erf_between_layers(a, b, c, d, e, f):
    outs = []
    for i, x in enumerate((a, b, c, d, e, f)):
        h = lin(x, 0, i)
        s = torch.sum(h, dim=1, keepdim=True)
        h = lin(torch.erf(h) * s, 1, i)
        outs.append(lin(F.softplus(h), 2, i))
    return torch.cat(outs, 1)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_sums_and_erf_between_layers(strategy):
    c = check(sums_and_erf_between_layers, _xs(), strategy, trace_grad=True)
    assert c.report.patterns_fired["batch_linear"] == 3


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_small_groups_and_aliasing_outputs(strategy):
    def relu_tanh(a, b, c):
        return torch.cat([torch.relu(lin(F.gelu(torch.tanh(lin(x, 0, i))), 1, i)) for i, x in enumerate((a, b, c))], 1)

    def aliasing(a, b, c):
        hs = [F.gelu(lin(x, 0, i)) for i, x in enumerate((a, b, c))]
        ys = [lin(h, 1, i) for i, h in enumerate(hs)]
        return ys[0], ys[1][:, :3], ys[1], hs[2], hs[2].t()

    c = check(relu_tanh, _xs(3), strategy, source="fx", **SMALL)
    assert c.report.patterns_fired["batch_linear"] == 2
    check(aliasing, _xs(3), strategy, **SMALL)


# -- Aten IR (AOTAutograd, post-grad pass on forward and backward) -------------------------------------------

def _aot_inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(4, D, generator=g) for _ in range(N)] + [torch.randn(D, D, generator=g) * 0.3
                                                                 for _ in range(3 * N)]


def aten_gelu_tower(*a):
    xs, ws = a[:N], a[N:]
    outs = []
    for i, x in enumerate(xs):
        h = F.gelu(F.linear(x, ws[i]))
        h = F.gelu(F.linear(h, ws[N + i]))
        outs.append(F.linear(h, ws[2 * N + i]))
    return torch.cat(outs, 1)


def aten_relu_silu_sum_tower(*a):
    xs, ws = a[:N], a[N:]
    outs = []
    for i, x in enumerate(xs):
        h = F.linear(x, ws[i])
        s = torch.sum(h, 1, keepdim=True)
        h = F.linear((torch.relu(h) if i % 2 else F.silu(h)) * s, ws[N + i])
        outs.append(F.linear(torch.erf(h), ws[2 * N + i]))
    return outs


def aten_inputs_written_after_tower(*a):
    xs, ws = a[:N], a[N:]
    outs = [F.linear(F.gelu(F.linear(x, ws[i])), ws[N + i]) for i, x in enumerate(xs)]
    for x in xs:
        x.mul_(2.0)
    return torch.cat(outs, 1), torch.cat([F.gelu(x) for x in xs], 1)


@pytest.mark.slow
@pytest.mark.parametrize("fn, grad, gemms, strategy", [(aten_gelu_tower, True, 3, "greedy"),
                                                       (aten_relu_silu_sum_tower, True, 3, "eqsat"),
                                                       (aten_inputs_written_after_tower, False, None, "greedy")],
                         ids=lambda v: getattr(v, "__name__", v))
def test_aten_towers(fn, grad, gemms, strategy):
    from test_aten import aot_check

    c = aot_check(fn, _aot_inputs(), strategy, grad=grad)
    if gemms is not None:  # the forward: every layer one batched GEMM
        assert sum(1 for n in c.graphs[0].graph.nodes
                   if n.target in (torch.ops.aten.bmm.default, torch.ops.aten.baddbmm.default)) == gemms


@pytest.mark.slow
@pytest.mark.parametrize("fallback_random", [True])
def test_aten_random_ops_draw_as_unoptimized(fallback_random):
    """Dropouts and random factories in an AOTAutograd graph (aten ops tagged ``nondeterministic_seeded``, all
    ordered): the optimized forward and backward draw what the unoptimized ones draw under one seed."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func
    from torch._inductor.decomposition import select_decomp_table

    def fn(*a):
        xs, ws = a[:N], a[N:]
        outs = []
        for i, x in enumerate(xs):
            h = F.dropout(F.gelu(F.linear(x, ws[i])), 0.3)
            h = F.gelu(F.linear(h * torch.randn(4, D), ws[N + i]))
            outs.append(F.linear(h, ws[2 * N + i]))
        return torch.cat(outs, 1), torch.rand_like(xs[0])

    def run(pass_):
        def compiler(gm, example_inputs):
            if pass_ is not None:
                pass_(gm.graph)
                assert optimus_eq.last_reports[-1].fallback is None
            return make_boxed_func(gm)

        torch._dynamo.reset()
        compiled = torch.compile(fn, fullgraph=True, dynamic=False, backend=aot_autograd(
            fw_compiler=compiler, bw_compiler=compiler, decompositions=select_decomp_table()))
        xs = [x.requires_grad_() for x in _aot_inputs()]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(5)
            out = compiled(*xs)
        (out[0] * torch.linspace(-1, 1, out[0].numel()).view(out[0].shape)).sum().backward()
        return out, [x.grad for x in xs]

    with torch._inductor.config.patch(fallback_random=fallback_random):
        want, want_g = run(None)
        got, got_g = run(optimus_eq.post_grad_pass("greedy"))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for a, b in zip(got_g, want_g):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
