"""optimus_eq.modelrun, what ``optimus-eq optimize`` and ``optimus-eq explain`` run: eager once, then each strategy
on the same model and inputs, compared with eager's outputs and gradients. Every run starts from eager's start (the
factory's buffers and inputs, one RNG seed), so that a model with nothing wrong is not reported "differs from
eager"; a mismatch of a graph with random ops says why it may differ; with a loss, the gradients of inputs that
require grad are compared too."""

from __future__ import annotations

import pytest
import torch


class _RunningMean(torch.nn.Module):
    """A forward that updates a buffer it reads (a running normalizer, as recommendation models keep)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("mean", torch.zeros(4))

    def forward(self, x):
        self.mean.mul_(0.5).add_(x.mean(0), alpha=0.5)
        return self.lin(x - self.mean)


class _Dropouts(torch.nn.Module):
    """Six branches with a dropout each, in training mode."""

    def __init__(self) -> None:
        super().__init__()
        self.lins = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(6))
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return torch.cat([self.drop(lin(p)).relu() for lin, p in zip(self.lins, x.split(4, 1))], 1)


# Found: ``optimus-eq optimize`` ran eager once and then each strategy on the same model object without resetting
# it, and without a common random seed: a model whose forward updates a buffer it reads, or a training step with
# dropout, was reported "differs from eager" (exit code 1) for every strategy, ``none`` included, with nothing
# wrong. Fixed in modelrun.py (same_start: each run starts from the factory's buffers and one RNG seed; a mismatch
# of a graph with random ops says why it may differ).
@pytest.mark.parametrize("strategy", ["none", "greedy"])
@pytest.mark.parametrize("case", ["running mean", "dropout"])
def test_optimize_command_runs_every_strategy_from_eagers_start(strategy, case):
    from optimus_eq.modelrun import ModelSpec, eager_result, run_strategy

    torch.manual_seed(0)
    if case == "running mean":
        spec = ModelSpec(case, _RunningMean().eval(), (torch.randn(8, 4),))
    else:
        spec = ModelSpec(case, _Dropouts().train(), (torch.randn(8, 24),), lambda out: out.square().sum())
    before = torch.random.get_rng_state()
    expected = eager_result(spec)
    options = {"patterns": ["normalization_pass", "split_cat_pass"]}  # the dropouts' inputs keep their layout
    run = run_strategy(spec, strategy, options=options if strategy != "none" else {}, expected=expected)
    assert run.error is None, run.error
    assert run.outputs_match, f"{spec.name}: {run.mismatch}"
    assert torch.equal(torch.random.get_rng_state(), before), "the user's RNG state was changed"


def test_optimize_command_says_why_random_ops_differ():
    from optimus_eq.modelrun import ModelSpec, run_strategy

    torch.manual_seed(0)
    spec = ModelSpec("dropout", _Dropouts().train(), (torch.randn(8, 24),), lambda out: out.square().sum())
    run = run_strategy(spec, "greedy", options={"pattern_options": {"batch_dropout": {"min_fuse_set_size": 2}}})
    assert run.graphs[0].report.patterns_fired["batch_dropout"] == 1
    assert not run.outputs_match and "random ops" in run.mismatch and "fallback_random" in run.mismatch


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
