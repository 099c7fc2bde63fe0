"""bench/kernel_prediction.py's reader of bench output (``--from-bench``): which file a measured count comes from."""

from __future__ import annotations

import json

import pytest

from kernel_prediction import rows_from_bench


def test_rows_from_bench_take_the_first_file_with_a_count(tmp_path):
    timed = tmp_path / "m.json"
    timed.write_text(json.dumps({"cells": [
        {"model": "dhen", "mode": "inference", "strategy": "greedy", "status": "ok", "kernels": 38},
        {"model": "bert", "mode": "inference", "strategy": "greedy", "status": "not_run", "kernels": None},
        {"model": "dhen", "mode": "inference", "strategy": "inductor", "status": "ok", "kernels": 166}]}))
    prewarm = tmp_path / "m.prewarm.tsv"
    prewarm.write_text("dhen\tinference\tgreedy\tok\t11.7\t0.29\t40\n"
                       "bert\tinference\tgreedy\tok\t4.6\t0.24\t46\n"
                       "bert\ttrain\tgreedy\terror\t4.6\tNone\tNone\n")
    rows = rows_from_bench([timed, prewarm], ["greedy", "eqsat"])
    got = {(r["model"], r["mode"], r["strategy"]): (r["measured"], r["source"]) for r in rows}
    assert got == {("dhen", "inference", "greedy"): (38, str(timed)),
                   ("bert", "inference", "greedy"): (46, str(prewarm))}


def test_rows_from_bench_refuses_a_tsv_line_of_another_shape(tmp_path):
    bad = tmp_path / "x.tsv"
    bad.write_text("dhen\tinference\tgreedy\tok\t38\n")
    with pytest.raises(ValueError, match="7 tab-separated"):
        rows_from_bench([bad])
