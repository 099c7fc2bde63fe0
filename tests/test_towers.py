"""Per-feature MLP towers: every layer of every tower batched, pre-grad and post-grad, forward and backward.

A tower model splits its dense input by feature, runs a small MLP per feature and concatenates the outputs.
Layer j of every feature reads layer j-1's batched output through views, so each layer is one group: the
group search finds a layer from the fused op of the layer above it (Optimus' walk visits the batched node it
inserted), and pure ops the translator keeps verbatim between layers (GELU at Torch-IR, ``le``/``where`` of
ReLU's backward at Aten-IR) do not order one feature's layers after another's (``optimus_bridge.kept_order``).

The towers are written as functions of their weights, so the differential check compares the gradients of
every weight, bias and LayerNorm parameter with eager's (a module's parameters are not inputs of ``check``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import STRATEGIES, check, rand
from optimus_bench.corpus import ModuleListTowers
from test_aten import aot_check

N = 6  # features: above upstream's min_fuse_set_size of 5, so greedy batches them with its default options

#: (name, layer widths, activation, LayerNorm between layers)
TOWERS = [
    ("3 layers relu", (16, 32, 32, 4), "relu", False),
    ("2 layers", (16, 32, 4), "relu", False),
    ("8 layers", (8,) + (12,) * 7 + (4,), "relu", False),
    ("uneven widths", (16, 64, 8, 24), "relu", False),
    ("gelu", (16, 32, 32, 4), "gelu", False),
    ("tanh", (16, 32, 32, 4), "tanh", False),
    ("layernorm", (16, 32, 32, 4), "relu", True),
    ("layernorm gelu", (16, 24, 24, 4), "gelu", True),
]

#: the towers also checked at Aten-IR (AOTAutograd's forward and backward graphs)
POST_GRAD = [t for t in TOWERS if t[0] in ("3 layers relu", "2 layers", "gelu", "layernorm")]


def tower(widths, act, layer_norm, seed=0):
    """``(fn, inputs)``: ``fn(x, *params)`` runs N towers of ``widths`` over ``torch.split(x, widths[0], 1)``."""
    layers = len(widths) - 1
    params, k = [], seed
    for _ in range(N):
        for j, (a, b) in enumerate(zip(widths, widths[1:])):
            params += [rand(b, a, seed=k) * a ** -0.5, rand(b, seed=k + 1) * 0.1]
            if layer_norm and j < layers - 1:
                params += [1 + 0.1 * rand(b, seed=k + 2), 0.1 * rand(b, seed=k + 3)]
            k += 4
    per = 2 * layers + (2 * (layers - 1) if layer_norm else 0)
    act_fn = getattr(F, act)

    def fn(x, *ps):
        outs = []
        for i, h in enumerate(torch.split(x, widths[0], 1)):
            p = list(ps[i * per:(i + 1) * per])
            for j in range(layers):
                h = F.linear(h, p.pop(0), p.pop(0))
                if j < layers - 1:
                    if layer_norm:
                        h = F.layer_norm(h, (widths[j + 1],), p.pop(0), p.pop(0))
                    h = act_fn(h)
            outs.append(h)
        return torch.cat(outs, 1)

    return fn, [rand(8, N * widths[0], seed=seed + 999)] + params


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name,widths,act,ln", TOWERS, ids=[t[0] for t in TOWERS])
def test_pre_grad_one_gemm_per_layer(name, widths, act, ln, strategy):
    fn, inputs = tower(widths, act, ln)
    layers = len(widths) - 1
    c = check(fn, inputs, strategy, trace_grad=True)
    ops = c.report.ops_after
    gemms = sum(ops.get(k, 0) for k in ("bmm_add", "baddbmm", "bmm"))
    assert ops.get("linear", 0) == 0 and gemms == layers, dict(ops)
    if ln:
        assert ops.get("layer_norm", 0) == layers - 1, dict(ops)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name,widths,act,ln", POST_GRAD, ids=[t[0] for t in POST_GRAD])
def test_post_grad_one_gemm_per_layer_forward_and_backward(name, widths, act, ln, strategy):
    fn, inputs = tower(widths, act, ln)
    layers = len(widths) - 1
    c = aot_check(fn, inputs, strategy)
    fw, bw = c.reports
    assert fw.ops_after.get("baddbmm", 0) == layers, dict(fw.ops_after)
    assert fw.ops_after.get("addmm", 0) == fw.ops_after.get("mm", 0) == 0, dict(fw.ops_after)
    # backward: per layer one GEMM for the weights' gradient and one for the input's (x requires grad here)
    assert bw.ops_after.get("bmm", 0) == 2 * layers, dict(bw.ops_after)
    assert bw.ops_after.get("mm", 0) == 0, dict(bw.ops_after)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_module_tower_three_gemms(strategy):
    """The towers as users write them (three ModuleLists, one comprehension over the split)."""
    torch.manual_seed(0)
    c = check(ModuleListTowers(), [rand(8, N * 16)], strategy)
    assert c.report.ops_after.get("linear", 0) == 0
    assert c.report.ops_after.get("bmm_add", 0) == 3, dict(c.report.ops_after)
