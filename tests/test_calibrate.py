"""Cost-model calibration (bench/optimus_bench/calibrate.py, GPUCostModel.from_calibration).

The GPU run is the real calibration (bench/results/); here: the fit recovers known constants from
synthetic timings, a quick CPU run writes a record the cost model loads, and bad records are refused.
"""

from __future__ import annotations

import json
import random

import pytest

from optimus_bench import calibrate
from optimus_eq.cli import main as cli_main
from optimus_eq.cost import GPUCostModel


@pytest.mark.slow
def test_fit_recovers_launch_floor_and_bandwidth():
    rng = random.Random(0)
    floor, bw = 3.5, 2.9e6  # us, bytes per us
    xs = [2.0 ** p for p in range(16, 30)]
    ys = [(floor + x / bw) * (1 + rng.uniform(-0.01, 0.01)) for x in xs]
    fit = calibrate.fit_line(xs, ys)
    assert 1 / fit["slope"] == pytest.approx(bw, rel=0.03)
    assert fit["r2"] > 0.99


@pytest.mark.slow
def test_quick_cpu_run_writes_a_record_the_cost_model_loads(tmp_path):
    out = tmp_path / "cal.json"
    assert cli_main(["calibrate", "--device", "cpu", "--quick", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    ops = {s["op"] for s in record["samples"]}
    assert set(calibrate.BANDWIDTH_OPS) <= ops
    assert all(s["us"] > 0 and s["bytes"] > 0 for s in record["samples"])
    model = GPUCostModel.from_calibration(out)
    assert model.launch_us == record["launch_us"] and model.bytes_per_us == record["bytes_per_us"]
    # the loaded constants change prices: one launch plus bytes at the measured bandwidth
    assert model.node_cost("Unary", 1000, [1000], False) == pytest.approx(
        record["launch_us"] + 8000 / record["bytes_per_us"])


@pytest.mark.parametrize("record", [{}, {"launch_us": 4.0}, {"launch_us": -1, "bytes_per_us": 3e6},
                                    {"launch_us": 4.0, "bytes_per_us": None}])
def test_from_calibration_refuses_incomplete_records(record):
    with pytest.raises(ValueError, match="calibration record"):
        GPUCostModel.from_calibration(record)


def test_bench_strategies_price_with_the_given_cost_model():
    """``--cost-model`` reaches optimize: the same graph is priced with the calibrated constants."""
    import torch

    import optimus_eq
    from optimus_bench.strategies import resolve

    class M(torch.nn.Module):
        def forward(self, x):
            a, b = torch.split(x, 4, dim=1)
            return torch.relu(torch.cat([b, a], 1)) + 1

    x = torch.randn(8, 8)
    costs = []
    for launch in (4.0, 400.0):
        torch._dynamo.reset()
        optimus_eq.last_reports.clear()
        model = GPUCostModel(launch_us=launch, bytes_per_us=3e6)
        fn = resolve(["eqsat"])[0].compile(M(), {"cost_model": model, "compile": False})
        torch.testing.assert_close(fn(x), M()(x))
        (report,) = optimus_eq.last_reports
        costs.append(report.cost_after)
    # every kernel of the optimized plan costs 100x more launch time; bytes are unchanged
    assert costs[1] > 50 * costs[0]


def test_bench_cli_refuses_a_missing_cost_model_file(tmp_path, capsys):
    code = cli_main(["bench", "--models", "wukong", "--strategies", "eager", "--modes", "inference",
                     "--out", str(tmp_path), "--cost-model", str(tmp_path / "missing.json"), "--no-progress"])
    assert code == 2
    assert "--cost-model" in capsys.readouterr().err


def test_bench_cudagraph_strategies_get_the_calibration_s_cudagraph_model():
    """``cost_model_cudagraph`` (the runner's second model of one calibration) replaces ``cost_model`` for
    the ``-cudagraphs`` strategies only."""
    import torch

    import optimus_eq
    from optimus_bench.strategies import resolve

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) + 1

    options = {"cost_model": GPUCostModel(launch_us=11.0), "compile": False,
               "cost_model_cudagraph": GPUCostModel.cudagraph(launch_us=1.5)}
    seen = {}
    for name in ("eqsat", "eqsat-cudagraphs"):
        torch._dynamo.reset()
        optimus_eq.last_reports.clear()
        strategy = resolve([name])[0]
        fn = strategy.compile(M(), options)
        with torch.no_grad():
            fn(torch.randn(4, 4))
        seen[name] = optimus_eq.last_reports[-1].cost_model
    assert seen["eqsat"].startswith("launch (launch 11 us")
    assert seen["eqsat-cudagraphs"].startswith("cudagraph (launch 1.5 us")
    assert "cost_model_cudagraph" in options  # the caller's dict is left alone
