"""bmm_add (src/optimus_eq/horizontal/linear.py), batch_linear's fused op for float32 / float64 biased linears:
``bmm(mat1, mat2) + bias``, and ``baddbmm`` where eager's linear would give another dtype or the add cannot be
traced. A graph optimized from float32 values and run under ``torch.autocast`` keeps the autocast dtype; a graph
calling it pickles and traces; a model on the meta device (where ``torch.is_autocast_enabled`` raises) is
optimized."""

from __future__ import annotations

import pickle
import warnings

import pytest
import torch

import optimus_eq
from conftest import FieldLinears as _Fields, dynamo_graph, rand

D, N = _Fields.DIM, _Fields.FIELDS

#: batch_linear fires from two members
SMALL = {"pattern_options": {"batch_linear": {"min_fuse_set_size": 2}, "batch_linear_lhs": {"min_fuse_set_size": 2},
                             "batch_relu": {"min_fuse_set_size": 2}}}


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_bmm_add_under_runtime_autocast_keeps_the_autocast_dtype(strategy):
    """Symptom: a float32 graph optimized with batch_linear (bias, so bmm_add) and then run inside
    ``torch.autocast("cpu", bfloat16)`` returned float32 where eager's linears return bfloat16: the bmm ran
    in bf16 and ``+ bias`` (float32) promoted it back. baddbmm, which bmm_add replaced, keeps bf16."""
    torch.manual_seed(0)
    lins = [torch.nn.Linear(8, 6) for _ in range(3)]

    def f(a, b, c):
        return lins[0](a).relu() + lins[1](b).relu() + lins[2](c).relu()

    xs = [rand(4, 8, seed=i) for i in range(3)]
    gm, ex = dynamo_graph(f, *xs)
    gm2, report = optimus_eq.optimize(gm, ex, strategy=strategy, **SMALL)
    assert report.rule_matches["batch_linear"] == 1 and "bmm_add" in gm2.code
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected, actual = gm(*ex)[0], gm2(*ex)[0]
    assert actual.dtype == expected.dtype == torch.bfloat16
    ref = gm(*ex)[0].double()  # float32 run: bf16 rounding is the error both sides carry
    assert (actual.double() - ref).abs().max() <= 2 * (expected.double() - ref).abs().max() + 1e-2


def test_graph_with_bmm_add_pickles_and_traces():
    """Symptom (of the first fix of the test above, which read ``mat1.device`` unconditionally): pickling an
    optimized GraphModule with a bmm_add call, or ``torch.fx.symbolic_trace`` of it, raised ``RuntimeError:
    unpackString`` (the device of a Proxy passed to ``torch.is_autocast_enabled``)."""
    torch.manual_seed(0)
    lins = [torch.nn.Linear(8, 6) for _ in range(2)]

    def f(a, b):
        return lins[0](a).relu() * lins[1](b)

    xs = [rand(4, 8, seed=i) for i in range(2)]
    gm, ex = dynamo_graph(f, *xs)
    gm2, report = optimus_eq.optimize(gm, ex, strategy="greedy", **SMALL)
    assert "bmm_add" in gm2.code
    for again in (pickle.loads(pickle.dumps(gm2)), torch.fx.symbolic_trace(gm2)):
        torch.testing.assert_close(again(*ex)[0], gm(*ex)[0])


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_a_model_on_the_meta_device_is_optimized(strategy):
    """The batched linear's ``bmm_add`` asks ``torch.is_autocast_enabled(device_type)``, which raises for
    ``meta``: a model built on the meta device (shape and memory planning) fell back ("unknown device type for
    autocast")."""
    with torch.device("meta"):
        model = _Fields()
    compiled = torch.compile(model, backend=optimus_eq.backend(strategy, compile=False))
    x = torch.empty(4, N * D, device="meta")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        got = compiled(x)
    report = optimus_eq.last_reports[-1]
    assert report.fallback is None and report.patterns_fired.get("batch_linear") == 1
    want = model(x)
    assert (got.shape, got.stride(), got.dtype, got.device) == (want.shape, want.stride(), want.dtype, want.device)
