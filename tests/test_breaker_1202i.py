"""Breaker session 14b (ablation strategies, tight limits, cost models, post-grad, embedding bags, the command
line as a new user): what it found. One test per bug, each against eager."""

from __future__ import annotations

import pytest
import torch


class _WritesItsInput(torch.nn.Module):
    """A forward that reads its input, then writes into it (an in-place normalization of a caller's buffer)."""

    def forward(self, x):
        a, b = torch.split(x, 2, 1)
        y = torch.cat([b.tanh(), a.tanh()], 1)
        x.mul_(2)
        return y


# Found: ``optimus-eq optimize`` / ``explain`` ran eager and then each strategy on the same example input tensors;
# a forward that writes into its input handed every later run another input, so every strategy, ``none``
# included, was reported "differs from eager" (exit code 1) with nothing wrong. Fixed in modelrun.py (same_start
# restores the example inputs as the factory made them, as it already did the buffers).
@pytest.mark.parametrize("strategy", ["none", "greedy"])
def test_optimize_command_runs_every_strategy_from_eagers_inputs(strategy):
    from optimus_eq.modelrun import ModelSpec, eager_result, run_strategy

    torch.manual_seed(0)
    x = torch.randn(3, 4)
    x0 = x.clone()
    spec = ModelSpec("writes its input", _WritesItsInput(), (x,))
    expected = eager_result(spec)
    run = run_strategy(spec, strategy, expected=expected)
    assert run.error is None, run.error
    assert run.outputs_match, f"{spec.name}: {run.mismatch}"
    torch.testing.assert_close(expected[0][0], torch.cat([x0[:, 2:].tanh(), x0[:, :2].tanh()], 1))


# Found: ``optimus-eq optimize --out FILE`` (an existing file, not a folder) ran every strategy and then died with
# a FileExistsError traceback (exit code 1, as for "differs from eager"); ``explain --html DIR`` likewise with
# IsADirectoryError. Fixed in cli.py (_check_paths: exit code 2 with a message before anything runs).
@pytest.mark.parametrize("command", ["optimize", "explain"])
def test_an_output_path_of_the_wrong_kind_exits_2_before_anything_runs(command, tmp_path, capsys):
    from optimus_eq.cli import main

    model = tmp_path / "m.py"
    model.write_text("raise SystemExit('the model file was imported')\n")
    if command == "optimize":
        (tmp_path / "a_file").write_text("")
        argv = ["optimize", f"{model}:make", "--out", str(tmp_path / "a_file")]
    else:
        argv = ["explain", f"{model}:make", "--html", str(tmp_path)]
    assert main(argv) == 2
    assert "is a" in capsys.readouterr().err


def _bags_one_with_max_norm(i0, i1, i2, i3, w0, w1, w2, w3):
    F = torch.nn.functional
    a = F.embedding_bag(i0, w0, mode="sum")
    b = F.embedding_bag(i1, w1, mode="sum")
    c = F.embedding_bag(i2, w2, mode="sum")
    d = F.embedding_bag(i3, w3, mode="sum", max_norm=1.0)  # renormalizes rows of w3 in place
    return torch.cat([a, b, c, d], 1)


# Found (a silent non-batching, values right): one table with ``max_norm`` among a model's embedding bags (an
# in-place write into one graph input) stops batch_embedding_bag for every other table. aliasing.frozen_nodes
# joins every graph input of the device into the written input's group (dynamo does not guard storage overlap of
# inputs), and freezes every reader of the group, so lookups of the other tables, which run before the write and
# could not see it even if the tables shared storage, are left as written. Not a local fix: frozen_nodes would
# need program order (reads that precede every write of their group may be rewritten if they stay before it).
@pytest.mark.xfail(strict=True, reason="one max_norm table (a write into one graph input) freezes the lookups of "
                   "every table on the device, including those before the write (aliasing.frozen_nodes)")
@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_one_max_norm_table_does_not_stop_the_other_tables_batching(strategy):
    from conftest import check

    g = torch.Generator().manual_seed(0)
    ids = [torch.randint(0, 5, (3, 2), generator=g) for _ in range(4)]
    ws = [torch.randn(5, 4, generator=g) for _ in range(4)]
    c = check(_bags_one_with_max_norm, [*ids, *ws], strategy, grad=False,
              pattern_options={"batch_embedding_bag": {"min_fuse_set_size": 2}})
    assert c.report.patterns_fired.get("batch_embedding_bag") == 1


def _fields(x, w0, w1, w2):
    F = torch.nn.functional
    xs = torch.split(x, 3, 1)
    return torch.cat([F.layer_norm(F.linear(xs[k], w).tanh(), (3,)) for k, w in enumerate([w0, w1, w2])], 1)


# Found: optimizing an optimized graph again (a pre_grad_pass under a backend that already optimized, or a user's
# second optimize call) detached its outputs: gradients silently None. The lowered graph's meta said its computed
# values did not require grad (the fast meta twins carried no requires_grad, and FakeTensorProp stores a detached
# snapshot), so the second pass read eager's gradient facts as "no output requires grad" and lower_grad detached
# them. Fixed in lower_meta.py (the meta keeps requires_grad as dynamo's example_value has it).
@pytest.mark.parametrize("first", ["greedy", "eqsat"])
@pytest.mark.parametrize("second", ["greedy", "eqsat", "taso", "tensat"])
def test_a_graph_optimized_twice_keeps_its_gradients(first, second):
    import optimus_eq
    from conftest import dynamo_graph

    g = torch.Generator().manual_seed(0)
    ins = [torch.randn(4, 9, generator=g)] + [torch.randn(3, 3, generator=g) for _ in range(3)]
    gm, ex = dynamo_graph(_fields, *[t.clone().requires_grad_(True) for t in ins])
    po = {p: {"min_fuse_set_size": 2} for p in ("batch_linear", "batch_tanh", "batch_layernorm")}
    gm2, r1 = optimus_eq.optimize(gm, ex, strategy=first, pattern_options=po)
    gm3, r2 = optimus_eq.optimize(gm2, ex, strategy=second, pattern_options=po)
    assert r1.fallback is None and r2.fallback is None
    for n in gm2.graph.nodes:
        if n.op != "output":
            assert n.meta["val"].requires_grad, n.format_node()
    a = [t.clone().requires_grad_(True) for t in ins]
    b = [t.clone().requires_grad_(True) for t in ins]
    (got,), want = gm3(*a), _fields(*b)
    assert got.requires_grad
    torch.testing.assert_close(got, want)
    for ga, gb in zip(torch.autograd.grad(got.square().sum(), a), torch.autograd.grad(want.square().sum(), b)):
        torch.testing.assert_close(ga, gb, rtol=1e-4, atol=1e-5)


class _TwoFields(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.ModuleList(torch.nn.Linear(2, 2) for _ in range(2))

    def forward(self, x):
        a, b = torch.split(x, 2, 1)
        return torch.cat([self.lin[0](b).tanh(), self.lin[1](a).tanh()], 1)


# Found: with a loss, ``optimus-eq optimize`` / ``explain`` compared only the parameters' gradients: the gradient
# of an example input that requires grad (the model's input gradient, as an attack or a saliency map uses) was
# never checked, so "outputs equal eager" said nothing about it (and the input's .grad accumulated over the runs).
# Fixed in modelrun.py (_train_step: the inputs' gradients too, as "grad of input i", cleared after each run).
def test_optimize_command_compares_the_gradients_of_inputs_that_require_grad():
    from optimus_eq.modelrun import ModelSpec, eager_result, run_strategy

    torch.manual_seed(0)
    x = torch.randn(3, 4, requires_grad=True)
    spec = ModelSpec("input grad", _TwoFields(), (x,), lambda out: out.square().sum())
    outs, grads = eager_result(spec)
    assert "input 0" in grads and x.grad is None
    run = run_strategy(spec, "greedy", expected=(outs, {**grads, "input 0": grads["input 0"] + 1}))
    assert not run.outputs_match and "grad of input 0" in (run.mismatch or ""), run.mismatch
    assert run_strategy(spec, "greedy", expected=(outs, grads)).outputs_match


class _NormedFields(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.ModuleList(torch.nn.Linear(3, 3) for _ in range(3))
        self.ln = torch.nn.ModuleList(torch.nn.LayerNorm(3) for _ in range(3))

    def forward(self, x):
        xs = torch.split(x, 3, 1)
        return torch.cat([self.ln[k](self.lin[k](xs[k]).tanh()) for k in range(3)], 1)


# Found (a fallback with a warning, values right): with ``optimus_eq.pre_grad_pass`` set as Inductor's
# ``pre_grad_custom_pass`` under ``optimus_eq.backend(pack_parameters=True)``, compile_fx runs the pass on the packed
# graph, whose buffer placeholder carries a FakeTensor of another fake mode than the other inputs: "lower failed:
# graph inputs carry FakeTensors of several fake modes; returning the original graph". compile_fx is replaced here
# by what it does first with that config (the custom pre-grad pass), so no Inductor compile runs.
@pytest.mark.xfail(strict=True, reason="the packed graph's buffer placeholder has a FakeTensor of another fake mode "
                   "(lower_meta._input_fakes refuses several modes): a pre_grad_pass on it falls back")
def test_a_pre_grad_pass_on_a_packed_graph_does_not_fall_back(monkeypatch):
    import copy
    import warnings

    import torch._inductor.compile_fx as cfx

    import optimus_eq

    po = {p: {"min_fuse_set_size": 2} for p in ("batch_linear", "batch_tanh", "batch_layernorm")}
    seen = []

    def compile_fx_runs_the_custom_pass(gm, inputs, config_patches=None):
        optimus_eq.pre_grad_pass("greedy", pattern_options=po)(gm.graph)
        seen.append(optimus_eq.last_reports[-1])
        gm.recompile()
        return gm.forward

    monkeypatch.setattr(cfx, "compile_fx", compile_fx_runs_the_custom_pass)
    torch.manual_seed(0)
    m = _NormedFields()
    m2 = copy.deepcopy(m)
    torch._dynamo.reset()
    cm = torch.compile(m, backend=optimus_eq.backend("greedy", pack_parameters=True, pattern_options=po))
    x = torch.randn(4, 9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback warns
        out = cm(x)
    torch.testing.assert_close(out, m2(x))
    assert seen and seen[-1].fallback is None, seen[-1].fallback
