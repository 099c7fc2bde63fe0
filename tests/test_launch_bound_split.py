"""Issue 12's bench scripts for the launch-bound model: the training step's kernels split into forward,
backward and optimizer (bench/lb_train_kernels.py) and our optimizer's seconds (bench/lb_optimize_time.py).

The split must add up to what bench/kernel_prediction.py predicts for the whole step (a graph or a piece
lost in the split would make the fwd+bwd figure look better than it is), and the measured pieces must run
one real training step whose outputs and gradients equal eager's.
"""

from __future__ import annotations

import torch

import lb_optimize_time
import lb_train_kernels
from kernel_prediction import multi_tensor_launches, outside_kernels
from optimus_bench.models import build
import pytest


@pytest.mark.slow
def test_predicted_split_adds_up_to_the_whole_step_prediction():
    ov = {"branches": 8, "batch": 16}
    (row,) = lb_train_kernels.predict_phase(["greedy"], "cuda", "cpu", ov, groups=False)
    assert row["graphs"] == 1 and row["forward"] > 0 and row["backward"] > 0
    case = build("launch_bound", "cpu", overrides=ov)
    params = [p.numel() for p in case.model.parameters()]
    # the whole step as kernel_prediction.py predicts it: compiled graphs plus the ATen ops outside them
    assert row["step"] == row["forward"] + row["backward"] + outside_kernels("train", case.optimizer, "cuda", params)
    assert row["fwd_bwd"] == row["forward"] + row["backward"] + lb_train_kernels.BACKWARD_FILLS
    # fused Adam over 8 x 2 x 4 + 2 = 66 parameters: one Optimizer.step record, two launches at depth 4
    # (36 tensors each), one at depth 1
    assert len(params) == 66
    assert row["optimizer"] == 1 + multi_tensor_launches(params, 4) + multi_tensor_launches([1] * 66, 1) == 4


@pytest.mark.slow
def test_predicted_forward_and_backward_are_the_batched_graphs():
    """At 8 branches x 2 layers the batched step (two bmm forward, four backward) is predicted at 22
    kernels for forward + backward with the fills, the unbatched one (a GEMM per branch linear and per
    gradient) at 131: the split is of the optimized graphs, not of the captured ones."""
    rows = lb_train_kernels.predict_phase(["greedy", "none"], "cuda", "cpu", {"branches": 8, "batch": 16}, False)
    batched, plain = rows
    assert 4 * batched["fwd_bwd"] < plain["fwd_bwd"]
    assert batched["fwd_bwd"] <= 30


def test_measured_pieces_run_one_training_step_equal_to_eager():
    """The measure phase's forward / backward / optimizer pieces (run here eagerly on CPU: strategy
    ``eager``) make one real step: the first call's loss, output and every gradient are eager's."""
    (row,) = lb_train_kernels.measure_phase(["eager"], "cpu", {"branches": 4}, names=False, warmup=1,
                                            device="cpu")
    assert row["outputs_match"] and row["grads_match"], row["mismatch"]
    assert row["forward"] > 0 and row["backward"] > 0 and row["optimizer"] > 0
    assert row["step"] == row["forward"] + row["backward"] + row["optimizer"]


@pytest.mark.slow
def test_optimize_time_rows_per_mode_and_strategy():
    rows = lb_optimize_time.run(["inference", "train"], ["greedy"], "cpu", {"branches": 6})
    assert [(r["mode"], r["strategy"]) for r in rows] == [("inference", "greedy"), ("train", "greedy")]
    for r in rows:
        assert "fallback" not in r
        assert r["nodes_after"] < r["nodes_before"]  # six branches per layer batched
        assert r["optimize_s"] >= r["times"]["total"] > 0
    assert torch.is_grad_enabled()
