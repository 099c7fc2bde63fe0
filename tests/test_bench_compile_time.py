"""bench/compile_time.py: cold first calls, one fresh process and one empty cache per run (no timing asserted)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import compile_time  # noqa: E402


def _run(strategy, compile_s, optimizer_s=0.1, model="m", mode="inference", status="ok"):
    return {"model": model, "mode": mode, "strategy": strategy, "status": status, "compile_s": compile_s,
            "optimizer_s": optimizer_s, "inductor_s": 1.0}


def test_verdicts_follow_the_bench_noise_rule():
    """Faster only when the ranges of first calls do not overlap; an errored run is not a sample; a pair with
    fewer than two samples on a side gets no verdict."""
    runs = [_run("eqsat", 4.0), _run("eqsat", 4.5), _run("inductor-optimus", 6.0), _run("inductor-optimus", 4.6),
            _run("greedy", 4.4), _run("greedy", 3.0), _run("inductor", 2.0), _run("inductor", 2.5),
            _run("none", 3.0), _run("none", None, status="error")]
    cells, verdicts = compile_time.summarize(runs)
    got = {(v["strategy"], v["baseline"]): v["verdict"] for v in verdicts}
    assert got == {("eqsat", "inductor-optimus"): "faster", ("eqsat", "inductor"): "slower",
                   ("eqsat", "greedy"): "noise", ("greedy", "inductor-optimus"): "faster",
                   ("greedy", "inductor"): "slower"}
    eq = next(c for c in cells if c["strategy"] == "eqsat")
    assert eq["compile_s"] == {"median": 4.25, "min": 4.0, "max": 4.5, "n": 2}
    assert eq["optimizer_share"] == pytest.approx((0.1 / 4.0 + 0.1 / 4.5) / 2)
    none = next(c for c in cells if c["strategy"] == "none")
    assert none["measured"] == 1 and none["runs"] == 2 and none["statuses"] == ["error", "ok"]


def test_phases_table_gives_each_cells_median_per_metric():
    """The first calls' Dynamo compile-time metrics become one row per cell: the median over its runs (a run
    without a metric counts 0 s), the kernels Inductor generated; metrics no run has get no column."""
    runs = [{**_run("eqsat", 4.0), "compile_phases": {"GraphLowering.run": 0.5, "async_compile.wait": 1.0},
             "kernels_generated": 40},
            {**_run("eqsat", 5.0), "compile_phases": {"GraphLowering.run": 0.7}, "kernels_generated": 44},
            {**_run("eqsat", 6.0), "compile_phases": {"GraphLowering.run": 0.9, "async_compile.wait": 3.0},
             "kernels_generated": 42},
            _run("inductor", 3.0)]
    cells, verdicts = compile_time.summarize(runs)
    eq = next(c for c in cells if c["strategy"] == "eqsat")
    assert eq["phases"]["async_compile.wait"]["median"] == 1.0 and eq["phases"]["GraphLowering.run"]["max"] == 0.9
    assert eq["kernels_generated"]["median"] == 42
    md = compile_time.markdown({"config": {"device": "cuda", "reps": 3, "bench_args": []}, "cells": cells,
                                "verdicts": verdicts})
    header = next(line for line in md.splitlines() if "| lowering |" in line)
    assert "scheduler" not in header and header.endswith("| compile wait | kernels |")
    assert "| m | inference | eqsat | 0.70 | 1.00 | 42 |" in md
    assert "| m | inference | inductor |  |  | |" in md


@pytest.mark.slow
def test_end_to_end_on_cpu_fresh_process_and_empty_cache_per_run(tmp_path):
    """Two strategies, R=2, a tiny launch-bound model: four bench processes, each on its own empty cache (gone
    afterwards), the order rotated in the second repetition, a verdict and the markdown written."""
    out = tmp_path / "ct"
    rc = compile_time.main(["--device", "cpu", "--models", "launch_bound", "--modes", "inference",
                            "--strategies", "none,eqsat", "--reps", "2", "--set", "launch_bound.branches=2",
                            "--set", "launch_bound.layers=1", "--set", "launch_bound.batch=4", "--out", str(out)])
    assert rc == 0
    data = json.loads((out / "compile_time.json").read_text())
    runs = data["runs"]
    assert [(r["rep"], r["strategy"]) for r in runs] == [(0, "none"), (0, "eqsat"), (1, "eqsat"), (1, "none")]
    assert all(r["cache_was_empty"] and not Path(r["cache_dir"]).exists() for r in runs)
    assert len({r["cache_dir"] for r in runs}) == 4
    assert all(r["status"] == "ok" and r["compile_s"] > 0 for r in runs), [r.get("error") for r in runs]
    cells = {c["strategy"]: c for c in data["cells"]}
    assert cells["eqsat"]["measured"] == 2 and cells["eqsat"]["optimizer_s"]["min"] > 0
    assert 0 < cells["eqsat"]["optimizer_share"] < 1 and cells["none"]["optimizer_s"]["max"] < 0.01
    (v,) = data["verdicts"]
    assert (v["strategy"], v["baseline"]) == ("eqsat", "none") and v["verdict"] in ("faster", "slower", "noise")
    assert data["environment"]["torch"]
    md = (out / "compile_time.md").read_text()
    assert "| launch_bound | inference | eqsat |" in md and "| eqsat | none |" in md
    assert all(r["compile_phases"]["compile_fx_inner"] > 0 and r["kernels_generated"] > 0
               for r in runs if r["strategy"] == "eqsat")
    assert "| lowering |" in md


@pytest.mark.slow
def test_gc_pauses_records_each_collection_with_its_generation_and_stops_after_the_block():
    import gc
    import threading

    from optimus_bench import measure

    with measure._gc_pauses() as pauses:
        gc.collect()
        gc.collect(0)
        worker = threading.Thread(target=gc.collect, args=(1,))  # a collection on another thread counts too
        worker.start()
        worker.join()
    gc.collect()
    assert sorted(g for g, _ in pauses) == [0, 1, 2] and all(s >= 0 for _, s in pauses)
