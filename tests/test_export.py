"""torch.export: ``optimize(ep.module())`` at the default level, ``optimize_exported`` and AOTInductor.

An exported program is Aten-IR; the default level is read off the graph (:func:`optimus_eq.api.ir_level`),
so a user who passes ``ep.module()`` gets the post-grad patterns instead of a silent no-op.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

import optimus_eq
from optimus_eq.api import ir_level
from conftest import STRATEGIES, dynamo_graph

D, N = 8, 5  # features per field, fields (the models that write into inputs or take a number / None)


class Fields(torch.nn.Module):
    """Per-field Linear + tanh between a split and a cat, and a second output in a dict (a pytree)."""

    def __init__(self, fields: int = 6, dim: int = 4) -> None:
        super().__init__()
        self.dim = dim
        self.lins = torch.nn.ModuleList([torch.nn.Linear(dim, dim) for _ in range(fields)])

    def forward(self, x):
        xs = torch.split(x, self.dim, 1)
        y = torch.cat([lin(v).tanh() for v, lin in zip(xs, self.lins)], 1)
        return {"y": y, "head": y[:, : self.dim] * 2}


def _model():
    torch.manual_seed(0)
    return Fields().eval()


def _same(actual, expected):
    assert type(actual) is type(expected)
    assert actual.keys() == expected.keys()
    for k in expected:
        torch.testing.assert_close(actual[k], expected[k])


def test_ir_level_is_read_off_the_graph():
    m, x = _model(), torch.randn(8, 24)
    assert ir_level(torch.export.export(m, (x,)).module()) == "post_grad"
    gm, _ = dynamo_graph(m, x)
    assert ir_level(gm) == "pre_grad"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_optimize_exported_module_at_the_default_level(strategy):
    m, x = _model(), torch.randn(8, 24)
    gm = torch.export.export(m, (x,)).run_decompositions().module()
    with torch.no_grad():
        new, report = optimus_eq.optimize(gm, None, strategy=strategy)
        assert report.level == "post_grad" and report.fallback is None
        assert report.rule_matches.get("batch_linear_post_grad", 0) >= 1
        _same(new(x), m(x))  # the pytree calling convention (a dict) is kept


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_optimize_exported_returns_a_program(strategy):
    m, x = _model(), torch.randn(8, 24)
    ep = torch.export.export(m, (x,))
    ep2, report = optimus_eq.optimize_exported(ep, strategy=strategy)
    assert isinstance(ep2, torch.export.ExportedProgram) and ep2 is not ep
    assert report.fallback is None and report.rule_matches.get("batch_linear_post_grad", 0) >= 1
    with torch.no_grad():
        x2 = torch.randn(8, 24)
        _same(ep2.module()(x2), m(x2))
    torch.export.export(ep2.module(), (x,))  # re-exports


@pytest.mark.slow
def test_optimize_exported_keeps_dynamic_dims():
    m, x = _model(), torch.randn(8, 24)
    ep = torch.export.export(m, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    ep2, report = optimus_eq.optimize_exported(ep, strategy="greedy")
    assert report.fallback is None
    (ph,) = [n for n in ep2.graph.nodes if n.op == "placeholder" and n.name in ep2.graph_signature.user_inputs]
    assert not isinstance(ph.meta["val"].shape[0], int)
    with torch.no_grad():
        x3 = torch.randn(5, 24)
        _same(ep2.module()(x3), m(x3))


def test_optimize_exported_rejects_a_graph_module():
    gm = torch.export.export(_model(), (torch.randn(8, 24),)).module()
    with pytest.raises(TypeError, match="ExportedProgram"):
        optimus_eq.optimize_exported(gm)


@pytest.mark.slow
def test_aot_inductor_compiles_the_optimized_program(tmp_path, no_compile_cache):
    m, x = _model(), torch.randn(8, 24)
    ep2, report = optimus_eq.optimize_exported(torch.export.export(m, (x,)), strategy="eqsat")
    assert report.fallback is None
    path = torch._inductor.aoti_compile_and_package(ep2, package_path=str(tmp_path / "model.pt2"))
    runner = torch._inductor.aoti_load_package(path)
    with torch.no_grad():
        _same(runner(x), m(x))


# -- the optimized program's argument names, buffers, input writes, number and None arguments ----------------

# Found: ``optimize_exported`` re-exported the optimized module while its code was not generated yet (a lazy
# GraphModule, whose ``forward`` is ``(*args, **kwargs)`` until first use): the new program's inputs were named
# ``args_0``, ... instead of the user's, so ``ep2.module()`` took ``(args_0)``, a re-export with ``dynamic_shapes``
# keyed by the user's argument name raised (UserError: keys must be ['args_0']), and guard messages named
# ``args_0``. Fixed in export.py (the module's code is generated before the re-export).
@pytest.mark.parametrize("dynamic", [False, True])
def test_optimized_exported_program_keeps_the_users_argument_names(dynamic):
    import inspect

    import optimus_eq
    from torch.export import Dim

    class M(torch.nn.Module):
        def forward(self, x, scale):
            a, b = x.split(2, 1)
            return torch.cat([a.tanh(), b.tanh()], 1) * scale

    shapes = {"x": {0: Dim("B", min=2, max=64)}, "scale": None} if dynamic else None
    ep = torch.export.export(M(), (torch.randn(5, 4), torch.randn(4)), dynamic_shapes=shapes)
    ep2, report = optimus_eq.optimize_exported(ep, strategy="greedy")
    assert report.fallback is None and report.patterns_fired
    names = [s.arg.name for s in ep.graph_signature.input_specs]
    assert [s.arg.name for s in ep2.graph_signature.input_specs] == names
    assert list(inspect.signature(ep2.module().forward).parameters) == ["x", "scale"]
    x, scale = torch.randn(7 if dynamic else 5, 4), torch.randn(4)
    torch.testing.assert_close(ep2.module()(x, scale), ep.module()(x, scale))
    again = torch.export.export(ep2.module(), (x, scale), dynamic_shapes=shapes)  # keyed by the user's names
    torch.testing.assert_close(again.module()(x, scale), M()(x, scale))


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


class _CacheWrite(torch.nn.Module):
    """Per-field Linear + tanh between a split and a cat, whose result is also written into a user input
    (a KV cache), as exported decoders do."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.ModuleList(torch.nn.Linear(D, D) for _ in range(N))

    def forward(self, x, cache):
        xs = torch.split(x, D, 1)
        out = torch.cat([torch.tanh(self.lin[i](xs[i])) for i in range(N)], 1)
        cache[:, :out.shape[0]] = out.t()
        return out * 2


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_exported_program_writing_a_parameter_dependent_value_into_an_input_is_optimized(strategy):
    """torch.export (outside no_grad) leaves the written input's placeholder a leaf FakeTensor that requires
    grad; lowering's meta propagation ran the ``copy_`` on it and autograd refused ("a leaf Variable that
    requires grad is being used in an in-place operation"): every such program fell back."""
    torch.manual_seed(0)
    ep = torch.export.export(_CacheWrite().eval(), (torch.randn(4, N * D), torch.zeros(N * D, 16)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a fallback warns
        ep2, report = optimus_eq.optimize_exported(ep, strategy=strategy)
    assert report.fallback is None and ep2 is not ep
    assert report.patterns_fired.get("batch_aten_tanh") == 1
    x, c1 = torch.randn(4, N * D), torch.randn(N * D, 16)
    c2 = c1.clone()
    want, got = ep.module()(x, c1), ep2.module()(x, c2)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(c2, c1)


class _CountsCalls(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.ModuleList(torch.nn.Linear(D, D) for _ in range(N))

    def forward(self, x, calls):
        xs = torch.split(x, D, 1)
        calls.add_(1)  # a write into a user input the rest does not read
        return torch.cat([torch.tanh(self.lin[i](xs[i])) for i in range(N)], 1), calls


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_an_exported_program_writing_an_unrelated_input_still_batches(strategy):
    """``ExportedProgram.module()`` starts with ``_guards_fn(x, calls)``, an op the alias analysis does not know
    and took to alias all its inputs: the write into ``calls`` put ``x`` in a mutated group, froze every reader
    of ``x`` and of the parameters, and nothing was optimized (no fallback, no warning)."""
    torch.manual_seed(0)
    ep = torch.export.export(_CountsCalls().eval(), (torch.randn(4, N * D), torch.zeros(())))
    ep2, report = optimus_eq.optimize_exported(ep, strategy=strategy)
    assert report.fallback is None
    assert report.patterns_fired.get("batch_linear_post_grad") == 1, report.kept_reasons
    x, c1 = torch.randn(4, N * D), torch.zeros(())
    c2 = c1.clone()
    want, got = ep.module()(x, c1), ep2.module()(x, c2)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(c2, c1)
    assert got[1] is c2 and want[1] is c1


class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.ModuleList(torch.nn.Linear(D, D) for _ in range(N))

    def forward(self, x, scale, bias=None):
        xs = torch.split(x, D, 1)
        out = torch.cat([torch.tanh(self.lin[i](xs[i])) for i in range(N)], 1) * scale
        return out if bias is None else out + bias


@pytest.mark.slow
@pytest.mark.parametrize("scale", [0.5, 2, True])
def test_an_exported_program_with_a_number_argument_keeps_its_dynamic_batch(scale):
    """``graph_signature.user_inputs`` holds a constant argument's value (``0.5``) where a tensor's name stands:
    the dims to keep dynamic were matched by name, missed the count, and the optimized program was exported with
    every dim static ("Guard failed: x.size()[0] == 4" at any other batch size)."""
    torch.manual_seed(0)
    model, bias = _Scaled().eval(), torch.ones(N * D)
    b = torch.export.Dim("b")
    ep = torch.export.export(model, (torch.randn(4, N * D), scale), {"bias": bias},
                             dynamic_shapes={"x": {0: b}, "scale": None, "bias": None})
    ep2, report = optimus_eq.optimize_exported(ep, strategy="greedy")
    assert report.fallback is None and report.patterns_fired.get("batch_linear_post_grad") == 1
    for rows in (4, 7, 2):
        x = torch.randn(rows, N * D)
        torch.testing.assert_close(ep2.module()(x, scale, bias=bias), ep.module()(x, scale, bias=bias))


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_an_exported_program_with_an_argument_passed_as_none_is_optimized(strategy):
    """``ExportedProgram.module()`` gives an argument passed as None a placeholder whose ``val`` is None, which
    read as a graph without FakeTensor meta: every such program (``attention_mask=None``) fell back."""
    torch.manual_seed(0)
    model, scale = _Scaled().eval(), torch.tensor(0.5)
    ep = torch.export.export(model, (torch.randn(4, N * D), scale), {"bias": None})
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a fallback warns
        ep2, report = optimus_eq.optimize_exported(ep, strategy=strategy)
    assert report.fallback is None and report.patterns_fired.get("batch_linear_post_grad") == 1
    x = torch.randn(4, N * D)
    torch.testing.assert_close(ep2.module()(x, scale, bias=None), ep.module()(x, scale, bias=None))
