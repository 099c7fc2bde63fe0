"""The GEMM constants' fit (bench/gemm_fit.py, ``bench/gemm_rate.py --refit``) and the batched-occupancy term of
``GPUCostModel.gemm_us`` (issue 15; bench/results/gemm_fit_2026-12-02/README.md)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import gemm_fit
from optimus_eq.cost import GEMM_FIELDS, GPUCostModel

ROOT = Path(__file__).resolve().parents[1]
RATE = ROOT / "bench/results/h200_2026-12-02e/lb/gemm/gemm_rate.json"
ACCURACY = ROOT / "bench/results/h200_2026-12-02c/gemm_accuracy.json"
#: the constants before this fit (session 12: eager data only, no occupancy term)
OLD = {"gemm_flops_per_us": 52e6, "gemm_half_mn": 40.0, "gemm_half_k": 96.0, "bmm_efficiency": 0.8,
       "bmm_half_tiles": 0.0}


def _rows(model: GPUCostModel, launch: float) -> list[dict]:
    """Synthetic rows (mm and bmm, few and many output tiles, short and long inner) timed by ``model``."""
    c = gemm_fit.call
    shapes = [c(1, 4096, 64, 64), c(1, 64, 64, 4096), c(1, 2048, 415, 415), c(1, 4096, 1024, 1024),
              c(1, 4096, 4, 256), c(1, 256, 32, 16), c(4, 64, 64, 4096, True), c(4, 4096, 64, 64, True),
              c(32, 2048, 64, 64, True), c(32, 64, 64, 2048, True), c(4, 415, 64, 4096, True),
              c(4, 4096, 1024, 1024, True), c(2, 128, 128, 8192, True), c(8, 512, 32, 32, True)]
    rows = [{"calls": [s], "us": 0.0} for s in shapes] + [{"calls": shapes[:3], "us": 0.0, "other_kernels": 1}]
    for r in rows:
        r["us"] = gemm_fit.predict(model, r, launch)
    return rows


GRID = {"gemm_flops_per_us": (40, 45, 50), "gemm_half_mn": (0, 24, 48), "gemm_half_k": (0, 32, 64),
        "bmm_efficiency": (0.8, 0.9, 1.0), "bmm_tile": (32, 64, 128), "bmm_half_tiles": (0, 16, 64)}


def test_the_fit_recovers_the_constants_that_timed_the_rows():
    true = GPUCostModel.cudagraph(gemm_flops_per_us=45e6, gemm_half_mn=24, gemm_half_k=32, bmm_efficiency=0.9,
                                  bmm_tile=64, bmm_half_tiles=16)
    fitted = gemm_fit.fit(_rows(true, 3.0), 3.0, GPUCostModel.cudagraph(), GRID)
    assert {k: fitted[k] for k in GEMM_FIELDS} == {k: getattr(true, k) for k in GEMM_FIELDS}
    assert fitted["rms_log_error"] < 1e-9 and fitted["at_bound"] == []


def test_an_optimum_at_an_edge_of_the_grid_is_flagged_but_not_at_zero():
    # bmm efficiency 1.3 lies above the grid; a half constant of 0 is a natural bound (that factor is off)
    true = GPUCostModel.cudagraph(gemm_flops_per_us=45e6, gemm_half_mn=24, gemm_half_k=0, bmm_efficiency=1.3,
                                  bmm_tile=64, bmm_half_tiles=16)
    fitted = gemm_fit.fit(_rows(true, 3.0), 3.0, GPUCostModel.cudagraph(), GRID)
    assert fitted["bmm_efficiency"] == 1.0 and "bmm_efficiency" in fitted["at_bound"]
    assert "gemm_half_k" not in fitted["at_bound"]
    fast = dataclasses.replace(true, gemm_flops_per_us=60e6, bmm_efficiency=0.9)  # above the grid's 50 TFLOP/s
    fitted = gemm_fit.fit(_rows(fast, 3.0), 3.0, GPUCostModel.cudagraph(), GRID)
    assert fitted["gemm_flops_per_us"] == 50e6 and "gemm_flops_per_us" in fitted["at_bound"]


def test_accuracy_rows_are_the_eager_forms_of_each_group():
    rows = gemm_fit.accuracy_rows(json.loads(ACCURACY.read_text()), eager_launch_us=20.0)
    assert len(rows) == 24 * 2 + 18  # separate and wide for all 24 cells; bmm where the widths are equal
    sep = next(r for r in rows if r["group"] == ("eager", 4096, "4x64+4x1") and r["form"] == "separate")
    assert sep["calls"] == [[1, 2048, 64, 4096, False]] * 4 + [[1, 2048, 1, 4096, False]] * 4
    bmm = next(r for r in rows if r["group"] == ("eager", 256, "3x768") and r["form"] == "bmm_XWt")
    assert bmm["calls"] == [[3, 2048, 768, 256, True]] and bmm["launch_us"] == 20.0


def _decisions(model: GPUCostModel) -> list[dict]:
    rows, launch = gemm_fit.load([str(RATE)], 20.0, 100.0)
    return gemm_fit.decisions(rows, {"m": model}, launch)


def test_the_default_model_ranks_each_measured_group_as_the_h200_did():
    """Per group of DLRM, DHEN and launch_bound linears and direction (forward, backward, training): batched
    cheaper than separate exactly where the H200 measured it so (gemm_rate.json)."""
    table = _decisions(GPUCostModel.cudagraph())
    assert len(table) == 30
    wrong = [(d["group"], d["phase"], round(d["measured_ratio"], 2), round(d["models"]["m"]["ratio"], 2))
             for d in table if not d["models"]["m"]["agrees"]]
    assert not wrong


def test_without_the_occupancy_term_dlrm_expert_bmm_looks_cheap_in_training():
    """The old constants batch DLRM's cross-net experts (4 x [4096, 64] @ [64, 64]) in training, measured 1.31x
    slower than separate: the bmm of their weight gradients (4 x [64, 4096] @ [4096, 64]) has 4 output tiles."""
    table = _decisions(dataclasses.replace(GPUCostModel.cudagraph(), **OLD))
    train = [d for d in table if d["phase"] == "train" and d["group"][2] in (2, 4)]
    assert train and all(d["measured_ratio"] > 1.2 and d["models"]["m"]["ratio"] < 1 for d in train)


def test_a_batched_product_of_few_tiles_costs_more_than_separate_ones():
    m = GPUCostModel.cudagraph()
    # DLRM's expert weight gradient: 4 products of [64, 4096] @ [4096, 64]; cuBLAS splits K of each mm only
    sep = 4 * (m.launch_us + m.gemm_us(64, 64, 4096))
    bmm = m.launch_us + m.gemm_us(64, 64, 4096, batch=4, batched=True)
    assert bmm > sep
    # DHEN's 32 linears [2048, 64] @ [64, 64]: 32 batches fill the device
    sep = 32 * (m.launch_us + m.gemm_us(2048, 64, 64))
    bmm = m.launch_us + m.gemm_us(2048, 64, 64, batch=32, batched=True)
    assert bmm < sep / 2


def test_a_gemm_record_may_have_zero_halves_and_no_occupancy_term():
    old = {"gemm_flops_per_us": 54e6, "gemm_half_mn": 96, "gemm_half_k": 0, "bmm_efficiency": 1.0}
    m = GPUCostModel.cudagraph().with_gemm_rate({"gemm": old})  # bench/results/h200_2026-12-02e's fit
    assert (m.gemm_half_k, m.bmm_half_tiles) == (0.0, 0.0)
    m = GPUCostModel().with_gemm_rate({"gemm": {**old, "bmm_tile": 128, "bmm_half_tiles": 33}})
    assert (m.bmm_tile, m.bmm_half_tiles) == (128.0, 33.0)
    with pytest.raises(ValueError, match="bmm_tile"):
        GPUCostModel().with_gemm_rate({"gemm": {**old, "bmm_tile": 0, "bmm_half_tiles": 33}})
    with pytest.raises(ValueError, match="gemm_half_mn"):
        GPUCostModel().with_gemm_rate({"gemm": {**old, "gemm_half_mn": -1}})
    cal = GPUCostModel.from_calibration({"launch_us": 20.0, "bytes_per_us": 3e6, "gemm": old})
    assert (cal.gemm_half_k, cal.bmm_half_tiles, cal.gemm_flops_per_us) == (0.0, 0.0, 54e6)
