"""Breaker findings of 2026-12-02 (sixth session): torch.export programs, threads, post-grad training and
horizontal-fusion edges, each compared with eager."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

import optimus_eq


class _Counts(torch.nn.Module):
    """A buffer counted up in forward (as BatchNorm's ``num_batches_tracked``), read by the output, between a
    split and a cat of tanhs (rewritten), and a training-mode BatchNorm (its running stats mutated)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(1))
        self.bn = torch.nn.BatchNorm1d(8)

    def forward(self, x):
        self.count.add_(1)
        a, b = torch.split(self.bn(x), 4, 1)
        return torch.cat([a.tanh(), b.tanh()], 1) * self.count


def _buffers(module) -> dict:
    return {k: v.clone() for k, v in module.named_buffers()}


def _optimize_exported_quietly(ep, strategy, **options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ep2, report = optimus_eq.optimize_exported(ep, strategy=strategy, **options)
    ours = [str(w.message) for w in caught if "optimus_eq" in str(w.message)]
    assert report.fallback is None and not ours, (report.fallback, ours)
    return ep2, report


# Found: an ExportedProgram's ``module()`` reads its buffers with ``get_attr``; lowering's meta propagation
# (FakeTensorProp) handed the real buffer to the in-place ``add_``, and FakeTensorMode runs an op whose tensor
# inputs are all real for real: optimizing counted the user's buffer up once (the original program's state
# changed), and the optimized program's first call started from 1 (output 2x eager's). Now get_attr tensors are
# FakeTensors during propagation (lower_meta.AttrFakeTensorProp).
@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
@pytest.mark.parametrize("decompose", [False, True])
def test_optimizing_an_exported_program_does_not_run_its_buffer_mutations(strategy, decompose):
    torch.manual_seed(0)
    model = _Counts().train()
    x = torch.randn(5, 8)
    ep = torch.export.export(copy.deepcopy(model), (x,))
    before = dict(ep.state_dict)
    before = {k: v.clone() for k, v in before.items()}
    ep2, _ = _optimize_exported_quietly(ep, strategy, decompose=decompose)
    for k, v in before.items():  # the user's program is left as it was
        torch.testing.assert_close(ep.state_dict[k], v, rtol=0, atol=0)
    mod, eager = ep2.module(), copy.deepcopy(model)
    for _ in range(2):
        torch.testing.assert_close(mod(x), eager(x))
    got, want = _buffers(mod), _buffers(eager)
    assert got.keys() == want.keys()
    for k in want:
        torch.testing.assert_close(got[k], want[k])


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_optimizing_an_exported_module_leaves_its_buffers(strategy):
    """The same through ``optimize(ep.module(), None)`` (the README's way in)."""
    model, x = _Counts().train(), torch.randn(5, 8)
    gm = torch.export.export(copy.deepcopy(model), (x,)).module()
    before = _buffers(gm)
    new, report = optimus_eq.optimize(gm, None, strategy=strategy, level="post_grad")
    assert report.fallback is None
    for k, v in _buffers(gm).items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)
    torch.testing.assert_close(new(x), model(x))


# Found: ``optimize_exported(ep, example_inputs=(x,))`` (the positional inputs alone, as ``torch.export.export``
# takes them) raised "not enough values to unpack"; ``(x, y)`` unpacked the tensors themselves as args and
# kwargs, and the re-export failed with a fallback warning. Now a ValueError says the form, (args, kwargs).
@pytest.mark.parametrize("bad", ["args_only", "two_tensors"])
def test_optimize_exported_names_the_example_inputs_form(bad):
    model, x = _Counts().eval(), torch.randn(5, 8)
    ep = torch.export.export(copy.deepcopy(model), (x,))  # (the program shares the module's buffers)
    example = (x,) if bad == "args_only" else (x, x)
    with pytest.raises(ValueError, match=r"\(args, kwargs\)"):
        optimus_eq.optimize_exported(ep, example_inputs=example, strategy="greedy")
    ep2, report = optimus_eq.optimize_exported(ep, example_inputs=((x,), {}), strategy="greedy")
    assert report.fallback is None
    torch.testing.assert_close(ep2.module()(x), model(x))


def _detached_views(a, b, c):
    d = [a.detach(), b.detach(), c.detach()]
    return torch.cat([v.tanh() for v in d], 1), d[0].view(-1), d[1].t()


# Found: batch_detach leaves graph outputs alone (eager's detach aliases its input), but not a detach that an
# output views: the fused detach made ``d[0].view(-1)`` a view of a new tensor where eager's viewed the input
# ``a``; lowering raised LoweringError and the whole graph fell back with a warning (every other rewrite lost).
# Now an output's view chain counts as output for the horizontal round (bridge/optimus_bridge/eager_terms.py).
@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_detaches_viewed_by_outputs_do_not_make_the_graph_fall_back(strategy):
    from conftest import check

    options = {name: {"min_fuse_set_size": 2} for name in ("batch_detach", "batch_tanh")}
    args = [torch.randn(3, 4, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    checked = check(_detached_views, args, strategy, trace_grad=True, pattern_options=options)
    assert checked.report.fallback is None
