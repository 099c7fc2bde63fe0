"""The fit of the cost model's GEMM constants to measured GEMM times, and the check that matters for extraction:
whether a model ranks each measured group's separate and batched forms as the device did (issue 15;
docs/DESIGN.md "Cost model"). ``bench/gemm_rate.py`` measures and calls :func:`fit`;
``bench/gemm_rate.py --refit FILE...`` (:func:`refit`) fits again, on CPU, from saved records:

* ``gemm_rate.json`` (``bench/gemm_rate.py``): rows ``{"form", "phase", "us", "calls", "other_kernels",
  "group"}`` timed inside CUDA graphs, each call ``[batch, rows, cols, inner, batched]``; the per-kernel
  in-graph cost is the record's ``gemm.launch_us_in_graph``;
* ``gemm_accuracy.json`` (``bench/gemm_accuracy.py``): eager forward timings of separate linears, one wide
  linear and one bmm at batch 2048 (:func:`accuracy_rows`), with a per-call eager overhead.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path

from optimus_eq.cost import GEMM_FIELDS, GPUCostModel, gemm_values

#: the grid :func:`fit` searches (``gemm_flops_per_us`` in TFLOP/s); its edges are not natural bounds except
#: 0 for the half constants (see :func:`fit`'s ``at_bound``)
GRID = {"gemm_flops_per_us": tuple(range(30, 81)),
        "gemm_half_mn": (0, 8, 16, 24, 32, 40, 48, 64, 96, 128, 192),
        "gemm_half_k": (0, 8, 16, 32, 48, 64, 96, 128, 192, 256),
        "bmm_efficiency": (0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.6),
        "bmm_tile": (32, 64, 128, 256),
        "bmm_half_tiles": (0, 4, 8, 16, 33, 66, 132, 264, 528)}
#: the members of :func:`accuracy_rows`' groups (``bench/gemm_accuracy.py``'s ``groups``)
ACCURACY_GROUPS = {"4x64": [64] * 4, "4x64+4x1": [64] * 4 + [1] * 4, "4x1": [1] * 4, "3x768": [768] * 3}


def call(batch, rows, cols, inner, batched=False) -> list:
    """One GEMM call of a row: ``batch`` products ``[rows, inner] @ [inner, cols]``."""
    return [int(batch), int(rows), int(cols), int(inner), bool(batched)]


def predict(model: GPUCostModel, row: dict, launch: float) -> float:
    """The model's time (us) of one row: per GEMM call the row's ``launch_us`` (default ``launch``) plus
    :meth:`GPUCostModel.gemm_us` with its bytes; ``launch`` per other kernel."""
    launch = row.get("launch_us", launch)
    total = launch * row.get("other_kernels", 0)
    for batch, r, c, k, batched in row["calls"]:
        moved = batch * (r * k + k * c + r * c)
        total += launch + model.gemm_us(r, c, k, batch, batched, moved)
    return total


def accuracy_rows(record: dict, eager_launch_us: float = 20.0, batch: int = 2048) -> list[dict]:
    """Rows of a ``bench/gemm_accuracy.py`` record: per (K, member widths) its forms ``separate`` (one
    ``linear`` per member), ``wide`` (one over the concatenated weights) and ``bmm_XWt`` (equal widths: one
    ``bmm`` of the input expanded over the stacked weights), forward, ``us`` = the median ms * 1000, each call
    charged ``eager_launch_us`` (the host's launch gap in an eager loop; 20 us as fitted with the first
    constants). The group key is ``("eager", K, members)``."""
    out = []
    for a in record["rows"]:
        ns, k = ACCURACY_GROUPS[a["members"]], int(a["k"])
        forms = (("separate", "sep_ms", [call(1, batch, n, k) for n in ns]),
                 ("wide", "wide_ms", [call(1, batch, sum(ns), k)]),
                 ("bmm_XWt", "bmm_ms", [call(len(ns), batch, ns[0], k, True)]))
        for form, key, calls in forms:
            ms = a.get(key)
            if isinstance(ms, (int, float)) and ms == ms and ms > 0:
                out.append({"form": form, "phase": "forward", "us": ms * 1e3, "calls": calls,
                            "launch_us": eager_launch_us, "group": ("eager", k, a["members"])})
    return out


def fit(rows: list[dict], launch: float, base: GPUCostModel, grid: dict | None = None) -> dict:
    """Grid search of :data:`GEMM_FIELDS` minimizing the mean squared log error over the rows with GEMMs (the
    formula of :meth:`GPUCostModel.gemm_us`, vectorized over the grid's rates; checked against it below).

    Returns the fit: the fields, ``launch_us_in_graph`` (``launch``), ``rms_log_error``, ``points`` and
    ``at_bound``: the fields whose optimum is an edge of ``grid`` other than 0 for a half constant (0 is the
    natural bound: that factor is off), where the true optimum may lie outside the grid.
    """
    import numpy as np

    grid = {**GRID, **(grid or {})}
    pts = [r for r in rows if r["calls"] and r["us"] > 0]
    calls = [(i, *c) for i, r in enumerate(pts) for c in r["calls"]]
    assign = np.zeros((len(calls), len(pts)))  # call -> its row: a row's time is the sum of its calls'
    assign[np.arange(len(calls)), [x[0] for x in calls]] = 1.0
    b, r, c, k = (np.array([x[j] for x in calls], dtype=float) for j in (1, 2, 3, 4))
    batched = np.array([x[5] for x in calls])
    flops = 2 * b * r * c * k
    t_bytes = b * (r * k + k * c + r * c) * base.itemsize / base.bytes_per_us
    gemv = (np.minimum(r, c) <= 1) | (k <= 0)
    fixed = np.array([p.get("launch_us", launch) * (len(p["calls"]) + p.get("other_kernels", 0)) for p in pts])
    log_meas = np.log(np.array([p["us"] for p in pts]))
    peaks = np.array(grid["gemm_flops_per_us"], dtype=float) * 1e6
    best = None
    for tile in grid["bmm_tile"]:
        tiles = b * np.ceil(r / tile) * np.ceil(c / tile)
        for h, hk, be, ht in itertools.product(grid["gemm_half_mn"], grid["gemm_half_k"], grid["bmm_efficiency"],
                                               grid["bmm_half_tiles"]):
            eff = r / (r + h) * c / (c + h) * k / (k + hk) * np.where(batched, be * tiles / (tiles + ht), 1.0)
            t_flops = flops[None, :] / (peaks[:, None] * np.maximum(eff, 1e-12)[None, :])
            t_call = np.where(gemv[None, :], t_bytes[None, :], np.maximum(t_flops, t_bytes[None, :]))
            pred = fixed[None, :] + t_call @ assign
            err = np.mean((np.log(pred) - log_meas[None, :]) ** 2, axis=1)
            j = int(np.argmin(err))
            if best is None or err[j] < best[0] - 1e-12:
                best = (float(err[j]), float(peaks[j]), h, hk, be, tile, ht)
    err, *values = best
    out = dict(zip(GEMM_FIELDS, values))
    m = dataclasses.replace(base, **out)
    check = math.sqrt(sum(math.log(predict(m, p, launch) / p["us"]) ** 2 for p in pts) / len(pts))
    assert abs(check - math.sqrt(err)) < 1e-6, (check, err)  # the vectorized formula is the model's
    edges = {k: (min(v), max(v)) for k, v in grid.items()}
    in_grid = {**out, "gemm_flops_per_us": out["gemm_flops_per_us"] / 1e6}  # the grid's unit: TFLOP/s
    at_bound = [f for f, v in in_grid.items()
                if (v == edges[f][1] or (v == edges[f][0] and v != 0)) and len(grid[f]) > 1
                and not (f == "bmm_tile" and out["bmm_half_tiles"] == 0)]
    out["gemm_flops_per_us"] = float(out["gemm_flops_per_us"])
    return {**out, "launch_us_in_graph": launch, "rms_log_error": math.sqrt(err), "points": len(pts),
            "at_bound": at_bound}


def rms_log_error(model: GPUCostModel, rows: list[dict], launch: float) -> float:
    """Root mean square of ``log(predicted / measured)`` over the rows with GEMMs."""
    pts = [r for r in rows if r["calls"] and r["us"] > 0]
    return math.sqrt(sum(math.log(predict(model, p, launch) / p["us"]) ** 2 for p in pts) / len(pts))


def decisions(rows: list[dict], models: dict, launch: float) -> list[dict]:
    """Per group and direction (``forward``, ``backward``, ``train`` = both): the measured time of the
    separate form and of the fastest batched form (a bmm form's forward includes the group's
    ``stack_inputs`` row, the stack of its members' inputs), their ratio, and per model (name ->
    :class:`GPUCostModel`) the predicted ratio of its own cheapest batched form and whether it makes the
    measured choice (batched below separate or not)."""
    forms: dict = {}
    stacks = {}
    for r in rows:
        if "group" not in r:
            continue
        g = tuple(r["group"]) if isinstance(r["group"], list) else r["group"]
        if r["form"] == "stack_inputs":
            stacks[g] = r
            continue
        for ph in (r["phase"], "train") if g[0] != "eager" else (r["phase"],):
            forms.setdefault((g, ph), {}).setdefault(r["form"], []).append(r)
    out = []
    for (g, ph), fs in forms.items():
        if "separate" not in fs or len(fs) < 2:
            continue
        for f, lst in fs.items():
            if f.startswith("bmm") and ph in ("forward", "train") and g in stacks:
                lst.append(stacks[g])
        meas = {f: sum(r["us"] for r in lst) for f, lst in fs.items()}
        batched = [f for f in fs if f != "separate"]
        fm = min(batched, key=meas.get)
        row = {"group": g, "phase": ph, "separate_us": meas["separate"], "batched_form": fm,
               "batched_us": meas[fm], "measured_ratio": meas[fm] / meas["separate"], "models": {}}
        for name, m in models.items():
            pred = {f: sum(predict(m, r, launch) for r in lst) for f, lst in fs.items()}
            fp = min(batched, key=pred.get)
            ratio = pred[fp] / pred["separate"]
            row["models"][name] = {"form": fp, "ratio": ratio, "agrees": (ratio < 1) == (row["measured_ratio"] < 1)}
        out.append(row)
    return out


def load(paths: list[str], eager_launch_us: float, min_us: float) -> tuple[list[dict], float]:
    """The rows of saved records (``gemm_rate.json``: its rows, group keys ``("rate", i)``; a
    ``gemm_accuracy.json``: :func:`accuracy_rows` of at least ``min_us``) and the in-graph launch of the first
    ``gemm_rate.json`` (2.283 us, ``GPUCostModel.cudagraph``'s, when none is given)."""
    rows, launch = [], None
    for i, path in enumerate(paths):
        rec = json.loads(Path(path).read_text())
        if "groups" in rec:
            launch = launch or rec["gemm"]["launch_us_in_graph"]
            for r in rec["rows"]:
                r = {k: v for k, v in r.items() if not k.startswith("predicted")}
                if "group" in r:
                    r["group"] = ("rate", i, r["group"])
                rows.append(r)
        else:
            rows.extend(r for r in accuracy_rows(rec, eager_launch_us) if r["us"] >= min_us)
    return rows, launch or GPUCostModel.cudagraph().launch_us


def refit(paths: list[str], out: str | None, eager_launch_us: float = 20.0, min_us: float = 100.0) -> dict:
    """Fit the GEMM constants to the rows of ``paths`` together (:func:`load`, :func:`fit`); print each
    file's rms log error and the decisions table (:func:`decisions`) for the default model and the fit; write
    ``out`` (``{"sources", "gemm": fit, "errors", "decisions"}``, loadable by
    ``GPUCostModel.with_gemm_rate``) when given. Returns that record."""
    base = GPUCostModel.cudagraph()
    rows, launch = load(paths, eager_launch_us, min_us)
    fitted = fit(rows, launch, base)
    models = {"default": base, "fit": dataclasses.replace(base, **{k: fitted[k] for k in GEMM_FIELDS})}
    for i, path in enumerate(paths):
        rec = json.loads(Path(path).read_text())
        if "gemm" in rec and "groups" in rec:  # the fit recorded with the measurement
            models[f"recorded {i}"] = dataclasses.replace(base, **gemm_values(rec["gemm"], strict=True))
    errors = {name: {p: rms_log_error(m, load([p], eager_launch_us, min_us)[0], launch) for p in paths}
              for name, m in models.items()}
    table = decisions(rows, models, launch)
    print(f"fit: {json.dumps(fitted)}")
    for name, errs in errors.items():
        print(f"rms log error, {name}: " + ", ".join(f"{Path(p).name} {e:.3f}" for p, e in errs.items()))
    print(f"{'group':>24} {'phase':>8} {'separate':>9} {'batched':>9} {'form':>9} {'meas':>5} " +
          " ".join(f"{n[:12]:>14}" for n in models))
    for d in sorted(table, key=lambda d: (str(d["group"]), d["phase"])):
        cells = " ".join(f"{d['models'][n]['ratio']:9.2f}{'' if d['models'][n]['agrees'] else ' WRONG':>5}"
                         for n in models)
        print(f"{str(d['group']):>24} {d['phase']:>8} {d['separate_us']:9.1f} {d['batched_us']:9.1f} "
              f"{d['batched_form']:>9} {d['measured_ratio']:5.2f} {cells}")
    print("disagreements: " + ", ".join(f"{n} {sum(not d['models'][n]['agrees'] for d in table)}/{len(table)}"
                                        for n in models))
    record = {"sources": paths, "eager_launch_us": eager_launch_us, "min_us": min_us, "gemm": fitted,
              "errors": errors, "decisions": [{**d, "group": list(d["group"])} for d in table]}
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(record, indent=1))
        print(f"wrote {out}")
    return record
