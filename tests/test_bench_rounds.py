"""``optimus-eq bench --rounds``: the strategies of one (model, mode) row timed side by side.

The runner test compiles through ``optimus_eq.backend(compile=False)`` (Dynamo and our optimizer, no
Inductor), so it runs in seconds on CPU; the rest drive :func:`optimus_bench.measure.run_rounds` with plain
callables and the noise rule of :mod:`optimus_bench.output` with hand-made results.
"""

from __future__ import annotations

import json

import pytest

from optimus_bench import measure, output, runner, strategies
from optimus_eq.cli import build_parser

NO_INDUCTOR = ("none-eagerbackend", "greedy-eagerbackend")


@pytest.fixture
def eager_backend_strategies(monkeypatch):
    """``none`` and ``greedy`` through ``optimus_eq.backend(compile=False)``: Dynamo and optimus_eq, no Inductor."""
    real = strategies.available

    def with_eager_backend():
        table = dict(real())
        for s in ("none", "greedy"):
            table[f"{s}-eagerbackend"] = strategies.Strategy(
                f"{s}-eagerbackend", "optimus_eq", f"optimus_eq {s}, the graph run eagerly", optimus_strategy=s,
                backend_options={"compile": False})
        return table

    monkeypatch.setattr(strategies, "available", with_eager_backend)


@pytest.mark.slow
def test_rounds_time_a_row_side_by_side_in_rotated_order(tmp_path, monkeypatch, eager_backend_strategies):
    timed = []  # (round-robin) which cell's step each block of timed iterations ran
    steps = {}
    real_rounds, real_time = measure.run_rounds, measure.time_iterations

    def spy_rounds(cells, *a, **kw):
        steps.update({id(c.step): c.name for c in cells})
        return real_rounds(cells, *a, **kw)

    def spy_time(step, device, iters):
        timed.append(steps[id(step)])
        return real_time(step, device, iters)

    monkeypatch.setattr(measure, "run_rounds", spy_rounds)
    monkeypatch.setattr(measure, "time_iterations", spy_time)
    names = ["eager", *NO_INDUCTOR]
    res = runner.run_matrix(["wukong"], names, ["train"], "cpu", tmp_path, iters=2, warmup=1, rounds=2,
                            plots=False, progress=False, warm_up=False)
    # round 0 starts at the first strategy, round 1 at the second
    assert timed == ["eager", "none-eagerbackend", "greedy-eagerbackend",
                     "none-eagerbackend", "greedy-eagerbackend", "eager"]
    assert res["config"]["rounds"] == 2
    cells = {c["strategy"]: c for c in res["cells"]}
    assert list(cells) == names
    for i, (name, c) in enumerate(cells.items()):
        assert c["status"] == "ok" and c["error"] is None and c["grads_match"], (name, c.get("error"))
        assert len(c["ms_rounds"]) == 2 and min(c["ms_rounds"]) <= c["ms"] <= max(c["ms_rounds"])
        assert c["ms_spread"] == pytest.approx(max(c["ms_rounds"]) / min(c["ms_rounds"]))
        assert c["ms_min"] <= c["ms"] and c["kernels"] > 0 and "checked" not in c
        assert c["round_positions"] == [i, (i - 1) % 3]
        # every cell stayed compiled through the row: nothing was traced again while it was timed
        assert "recompiles_while_timed" not in c
    assert cells["greedy-eagerbackend"]["graphs"] >= 1 and cells["greedy-eagerbackend"]["fallback"] is None
    saved = json.loads((tmp_path / "results.json").read_text())
    assert [c["status"] for c in saved["cells"]] == ["ok"] * 3
    md = (tmp_path / "results.md").read_text()
    assert "side-by-side rounds (`--rounds 2`)" in md and output.NOISE_RULE in md and "round medians" in md


@pytest.mark.slow
def test_rounds_1_is_one_cell_timed_alone(tmp_path):
    res = runner.run_matrix(["wukong"], ["eager"], ["inference"], "cpu", tmp_path, iters=2, warmup=1,
                            plots=False, progress=False, warm_up=False)
    (cell,) = res["cells"]
    assert res["config"]["rounds"] == 1
    assert cell["status"] == "ok" and cell["ms"] > 0 and cell["ms_min"] <= cell["ms"] and cell["kernels"] > 0
    assert not {"ms_rounds", "ms_spread", "round_positions"} & set(cell)
    assert "rounds" not in (tmp_path / "results.md").read_text().split("## Headline")[0]


@pytest.mark.parametrize("bad", [0, -1, 1.5])
def test_rounds_below_one_fail_before_any_work(tmp_path, bad):
    with pytest.raises(ValueError, match="rounds"):
        runner.run_matrix(["wukong"], ["eager"], ["inference"], "cpu", tmp_path, rounds=bad, plots=False)
    assert not (tmp_path / "results.json").exists()


def test_cli_passes_rounds():
    assert build_parser().parse_args(["bench", "--rounds", "3"]).rounds == 3
    assert build_parser().parse_args(["bench"]).rounds == 1


def _live(name, log, fail_in_round=None):
    state = {"calls": 0}

    def step():
        state["calls"] += 1
        log.append(name)
        if fail_in_round is not None and len([x for x in log if x == name]) > fail_in_round:
            raise RuntimeError(f"{name} broke")
    return measure.LiveCell(name, {"status": "ok", "error": None}, step, None, batch_size=4), state


def test_run_rounds_rotates_warms_up_once_and_survives_a_failing_cell():
    log: list[str] = []
    (a, sa), (b, sb), (c, sc) = _live("a", log), _live("b", log, fail_in_round=5), _live("c", log)
    measure.run_rounds([a, b, c], 3, iters=2, warmup=3, device="cpu")
    # round 0: 3 warm-up + 2 timed per cell; later rounds: 1 untimed + 2 timed; then one profiled call
    # round 0 (a, b, c): 3 warm-up + 2 timed each; round 1 (b, c, a): 1 untimed + 2 timed each, but b fails on
    # its 6th call and leaves; round 2 (c, a, b): b skipped; then one profiled call of each live cell
    assert log == (["a"] * 5 + ["b"] * 5 + ["c"] * 5 + ["b"] + ["c"] * 3 + ["a"] * 3 + ["c"] * 3 + ["a"] * 3
                   + ["a", "c"])
    assert b.res["status"] == "error" and "b broke" in b.res["error"] and "ms" not in b.res
    for cell, calls in ((a, sa), (c, sc)):
        assert cell.res["status"] == "ok" and len(cell.res["ms_rounds"]) == 3 and cell.res["kernels"] == 0
        assert calls["calls"] == 5 + 3 + 3 + 1
    assert a.res["round_positions"] == [0, 2, 1] and c.res["round_positions"] == [2, 1, 0]


def _cell(strategy, ms_rounds, model="m", mode="train", status="ok"):
    c = {"model": model, "mode": mode, "strategy": strategy, "status": status, "kernels": 10,
         "ms": sorted(ms_rounds)[len(ms_rounds) // 2] if ms_rounds else 1.0}
    if ms_rounds is not None:
        c["ms_rounds"] = ms_rounds
    return c


def _results(cells, strategies=("inductor", "greedy", "eqsat")):
    return {"environment": {"date": "2026-12-02"},
            "config": {"models": sorted({c["model"] for c in cells}), "strategies": list(strategies),
                       "modes": ["train"], "device": "cpu", "size": "cpu", "dtype": "float32", "iters": 5,
                       "warmup": 1, "cache": "warm", "rounds": 3},
            "strategies": {s: {"description": s} for s in strategies}, "kernel_note": "", "models": {},
            "cells": cells}


def test_noise_rule_needs_disjoint_ranges_of_round_medians():
    ind, greedy = _cell("inductor", [1.00, 1.10, 1.05]), _cell("greedy", [1.20, 1.30, 1.25])
    eqsat = _cell("eqsat", [1.08, 1.12, 1.09])  # its fastest round (1.08) is inside inductor's range
    assert output.versus(eqsat, ind) == "noise" and output.versus(ind, eqsat) == "noise"
    assert output.versus(eqsat, greedy) == "faster" and output.versus(greedy, eqsat) == "slower"
    touching = _cell("greedy", [1.10, 1.20])  # inductor's slowest round equals its fastest: not beyond noise
    assert output.versus(ind, touching) == "noise"
    assert output.versus(_cell("eqsat", None), ind) is None  # one round: no noise estimate
    assert output.versus(_cell("eqsat", [1.0]), ind) is None


def test_report_marks_ties_and_lists_eqsat_against_inductor_and_greedy():
    res = _results([_cell("inductor", [1.00, 1.10, 1.05]), _cell("greedy", [1.20, 1.30, 1.25]),
                    _cell("eqsat", [1.08, 1.12, 1.09])])
    head = output.headline(res)
    assert head[2] == "| m | train | 10 k, **1.05 ms** | 10 k, 1.25 ms | 10 k, 1.09 ms ~ |"
    verdicts = {(v["strategy"], v["against"]): v for v in output.comparisons(res)}
    assert set(verdicts) == {("eqsat", "inductor"), ("eqsat", "greedy")}
    assert verdicts["eqsat", "inductor"]["verdict"] == "noise"
    assert verdicts["eqsat", "greedy"]["verdict"] == "faster"
    assert verdicts["eqsat", "greedy"]["ratio"] == pytest.approx(1.09 / 1.25)
    md = output.markdown(res)
    assert "| m | train | eqsat | inductor | 1.038 | 1.080-1.120 | 1.000-1.100 | within noise |" in md
    assert "| m | train | eqsat | greedy | 0.872 | 1.080-1.120 | 1.200-1.300 | faster, beyond noise |" in md
    assert "1.090 (0.96x ~)" in md and "1.250 (0.84x)" in md  # speed-ups over inductor in the ms table
    # without rounds: no marks, no comparison table, the headline as before
    plain = _results([_cell("inductor", None), _cell("greedy", None), _cell("eqsat", None)])
    assert output.headline(plain)[2] == "| m | train | 10 k, 1.00 ms | 10 k, 1.00 ms | 10 k, 1.00 ms |"
    assert "verdict" not in output.markdown(plain) and "~" not in output.markdown(plain)


@pytest.mark.slow
def test_a_row_of_more_strategies_than_dynamos_recompile_limit_stays_compiled(tmp_path, monkeypatch):
    """Every strategy of a row adds a cache entry to the same forward code objects; past Dynamo's recompile
    limit (8) a strategy would silently run eagerly unless the row raises the limit."""
    import torch

    limit = torch._dynamo.config.recompile_limit
    real = strategies.available
    names = [f"none-{i}" for i in range(limit + 2)]

    def many():
        table = dict(real())
        for n in names:
            table[n] = strategies.Strategy(n, "optimus_eq", "none, run eagerly", optimus_strategy="none",
                                           backend_options={"compile": False})
        return table

    monkeypatch.setattr(strategies, "available", many)
    res = runner.run_matrix(["launch_bound"], names, ["inference"], "cpu", tmp_path, iters=1, warmup=0, rounds=2,
                            overrides={"launch_bound": {"branches": "2", "layers": "1", "batch": "2"}},
                            plots=False, progress=False, warm_up=False)
    for c in res["cells"]:  # without the raised limit, the ninth has no graph: Dynamo ran it eagerly
        assert c["status"] == "ok" and c.get("graphs") == 1, (c["strategy"], c.get("error"))
        assert len(c["ms_rounds"]) == 2 and "recompiles_while_timed" not in c
