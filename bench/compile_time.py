"""Cold first-call seconds per (model, mode, strategy), each measured in a fresh process on an empty cache.

The bench's ``compile_s`` of one cell is one sample: on the H200 single cold compiles of one cell vary by
1-2 s (bench/results/h200_2026-12-02e), so two strategies' first calls cannot be compared from one run each.
Here every measurement is one ``optimus-eq bench`` process for one cell (the bench's own model building,
warm-up compile, first call and check: :mod:`optimus_bench.measure`), with an empty Inductor and Triton cache of
its own (``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``: a fresh folder, deleted afterwards), one process at a
time, ``--reps`` repetitions, the cell order rotated by one cell per repetition (repetition k starts at cell k
mod n) and walked backwards on odd repetitions (so no strategy always runs right after another), so that drift
falls on every cell alike. The first call therefore pays our optimizer's one-time costs
of a process (imports, egglog rule programs), as a user's first compile does; Dynamo's and Inductor's own
one-time costs are taken by the bench's warm-up compile (:func:`optimus_eq.demo.warm_up_compiler`), as in the
matrix, unless ``--no-warm-up``: then the first call is a user's first call in a fresh process, with Dynamo's and
Inductor's imports and the start of Inductor's compile-worker pool (a backend that does not start that pool
early compiles its first kernels in the calling process, one at a time).

Reported per cell: the median and range of ``compile_s`` (first call: Dynamo, optimus_eq, AOTAutograd,
Inductor, one run), of ``optimizer_s`` (optimus_eq's share, ``Report.times["total"]``), the optimizer's share
of the first call (median of the per-run ratios) and ``inductor_s``; per row (model, mode) the verdict of
strategy against baseline by the bench's noise rule (:func:`optimus_bench.output.versus`, as for ms with
``--rounds``): faster only when the slowest first call of one is below the fastest of the other.

    PYTHONPATH=src:bridge:bench python bench/compile_time.py --device cuda --size gpu \\
        --models wukong dhen --modes inference train --strategies inductor,inductor-optimus,greedy,eqsat \\
        --reps 5 --out bench/out/compile_time

Writes ``OUT/compile_time.json`` (every run and the summary) and ``OUT/compile_time.md``; each run's bench
output and log stay under ``OUT/runs/``; both files are rewritten after every run, so a run cut short keeps what
finished (``--time-budget`` stops starting runs). Exit code 0, or 1 when a run failed (its error is in the JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from optimus_bench import output

#: (strategy, baseline) pairs judged per row, where both ran.
VERSUS = (("eqsat", "inductor-optimus"), ("eqsat", "inductor"), ("eqsat", "greedy"),
          ("greedy", "inductor-optimus"), ("greedy", "inductor"), ("eqsat", "none"), ("greedy", "none"))

#: Dynamo compile-time metrics shown per cell (``measure.run_cell``'s ``compile_phases``), name -> column:
#: Dynamo's bytecode tracing, AOTAutograd (whole: it holds Inductor's compiles), the joint-graph passes,
#: Inductor's lowering, scheduling (fusion decisions), code generation (holds the waits below), the wait
#: for the Triton/C++ compile workers, the load of generated modules (holds compiles done in-process), and the
#: cyclic garbage collector's pauses (all generations, and full collections) anywhere in the first call.
PHASES = {"bytecode_tracing": "Dynamo trace", "create_aot_dispatcher_function": "AOTAutograd",
          "_recursive_joint_graph_passes": "joint passes", "GraphLowering.run": "lowering",
          "Scheduler.__init__": "scheduler", "GraphLowering.codegen": "codegen",
          "async_compile.wait": "compile wait", "PyCodeCache.load_by_key_path": "module load",
          "gc (all)": "GC pauses", "gc (full)": "full GC"}


def run_once(model: str, mode: str, strategy: str, device: str, out: Path, bench_args: list[str],
             timeout_s: float, keep_cache: bool = False) -> dict:
    """One fresh ``optimus-eq bench`` process for one cell, on an empty cache of its own (module doc).

    Returns the cell's fields read from its ``results.json`` (``compile_s``, ``optimizer_s``, ``inductor_s``,
    ``status``, ``error``) plus ``wall_s`` (the whole process) and ``cache_was_empty``; a process that
    failed or timed out gives ``status`` ``"error"`` and the tail of its log."""
    cache = Path(tempfile.mkdtemp(prefix="optimus_compile_time_"))
    empty = not any(cache.iterdir())
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "TRITON_CACHE_DIR": str(cache / "triton")}
    cmd = [sys.executable, "-m", "optimus_eq.cli", "bench", "--models", model, "--modes", mode,
           "--strategies", strategy, "--device", device, "--iters", "1", "--warmup", "0", "--cache", "warm",
           "--no-plots", "--no-progress", "--out", str(out), *bench_args]
    out.mkdir(parents=True, exist_ok=True)
    row = {"model": model, "mode": mode, "strategy": strategy, "cache_was_empty": empty, "cache_dir": str(cache)}
    t0 = time.perf_counter()
    try:
        with open(out / "run.log", "w") as log:
            rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    finally:
        if not keep_cache:
            shutil.rmtree(cache, ignore_errors=True)
    row["wall_s"] = time.perf_counter() - t0
    row["returncode"] = rc
    results = out / "results.json"
    cells = json.loads(results.read_text())["cells"] if results.exists() else []
    if not cells:
        tail = (out / "run.log").read_text()[-1500:] if (out / "run.log").exists() else ""
        return {**row, "status": "error", "error": f"exit {rc}, no result: {tail}"}
    c = cells[0]
    for key in ("status", "error", "compile_s", "optimizer_s", "inductor_s", "other_compile_s", "fallback",
                "compile_phases", "kernels_generated"):
        row[key] = c.get(key)
    return row


def _stats(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def summarize(runs: list[dict], versus=VERSUS) -> tuple[list[dict], list[dict]]:
    """``(cells, verdicts)``: per cell the statistics of its runs with a first call (module doc); per row and
    pair of :data:`VERSUS` that both ran twice or more, the ratio of median first calls and the verdict
    (``"faster"``, ``"slower"`` or ``"noise"``, strategy against baseline)."""
    by_cell: dict[tuple, list[dict]] = {}
    for r in runs:
        by_cell.setdefault((r["model"], r["mode"], r["strategy"]), []).append(r)
    cells = []
    for (model, mode, strategy), rs in by_cell.items():
        ok = [r for r in rs if r.get("compile_s") is not None and r.get("status") in ("ok", "mismatch")]
        shares = [r["optimizer_s"] / r["compile_s"] for r in ok if r.get("optimizer_s") is not None and r["compile_s"]]
        cells.append({"model": model, "mode": mode, "strategy": strategy, "runs": len(rs), "measured": len(ok),
                      "statuses": sorted({str(r.get("status")) for r in rs}),
                      "compile_s": _stats([r["compile_s"] for r in ok]),
                      "optimizer_s": _stats([r["optimizer_s"] for r in ok if r.get("optimizer_s") is not None]),
                      "optimizer_share": statistics.median(shares) if shares else None,
                      "inductor_s": _stats([r["inductor_s"] for r in ok if r.get("inductor_s") is not None]),
                      "kernels_generated": _stats([r["kernels_generated"] for r in ok
                                                   if r.get("kernels_generated") is not None]),
                      "phases": {k: _stats([(r.get("compile_phases") or {}).get(k, 0.0) for r in ok])
                                 for k in PHASES if any(k in (r.get("compile_phases") or {}) for r in ok)},
                      "samples": [r["compile_s"] for r in ok]})
    index = {(c["model"], c["mode"], c["strategy"]): c for c in cells}
    verdicts = []
    for model, mode in dict.fromkeys((c["model"], c["mode"]) for c in cells):
        for a, b in versus:
            ca, cb = index.get((model, mode, a)), index.get((model, mode, b))
            if not ca or not cb or ca["measured"] < 2 or cb["measured"] < 2:
                continue
            # the bench's rule for ms rounds, applied to the first-call seconds of the repetitions
            verdict = output.versus({"ms_rounds": ca["samples"]}, {"ms_rounds": cb["samples"]})
            verdicts.append({"model": model, "mode": mode, "strategy": a, "baseline": b,
                             "ratio": ca["compile_s"]["median"] / cb["compile_s"]["median"], "verdict": verdict})
    return cells, verdicts


def _s(st: dict | None, fmt: str = ".2f") -> str:
    if not st:
        return "n/a"
    return f"{st['median']:{fmt}} [{st['min']:{fmt}}-{st['max']:{fmt}}]"


def markdown(data: dict) -> str:
    """``compile_time.md``: the cells' table and the verdicts."""
    cfg = data["config"]
    env = data.get("environment") or {}
    lines = [f"# Cold first-call seconds ({cfg['device']}, {cfg['reps']} fresh processes per cell)", "",
             f"{env.get('date', '')}; torch {env.get('torch', '?')}; device {env.get('device_name', cfg['device'])}; "
             f"bench arguments `{' '.join(cfg['bench_args']) or '(none)'}`. Each run: one `optimus-eq bench` process "
             "for one cell on an empty Inductor/Triton cache, serially, cell order rotated per repetition "
             "(backwards on odd repetitions). "
             "Median [min-max] over the runs." + (f" Stopped early: {data['stopped']}." if data.get("stopped") else ""), "",
             "| model | mode | strategy | first call s | ours s | ours share | Inductor s | runs | status |",
             "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for c in data["cells"]:
        share = "n/a" if c["optimizer_share"] is None else f"{100 * c['optimizer_share']:.0f}%"
        lines.append(f"| {c['model']} | {c['mode']} | {c['strategy']} | {_s(c['compile_s'])} | "
                     f"{_s(c['optimizer_s'])} | {share} | {_s(c['inductor_s'])} | {c['measured']}/{c['runs']} | "
                     f"{', '.join(c['statuses'])} |")
    lines += ["", "Verdicts: " + output.NOISE_RULE.replace("round median", "first call")
              .replace("ranges of round medians", "ranges of first calls") + ".", "",
              "| model | mode | strategy | against | median ratio | verdict |", "|---|---|---|---|---:|---|"]
    for v in data["verdicts"]:
        word = {"faster": "faster", "slower": "SLOWER", "noise": "within noise"}.get(v["verdict"], str(v["verdict"]))
        lines.append(f"| {v['model']} | {v['mode']} | {v['strategy']} | {v['baseline']} | {v['ratio']:.2f} | {word} |")
    shown = [k for k in PHASES if any(k in (c.get("phases") or {}) for c in data["cells"])]
    if shown:
        lines += ["", "Where the first call's compile went (median seconds per Dynamo compile-time metric; nested "
                  "metrics overlap: AOTAutograd holds Inductor's compiles, codegen holds the compile wait), and the "
                  "kernels Inductor generated:", "",
                  "| model | mode | strategy | " + " | ".join(PHASES[k] for k in shown) + " | kernels |",
                  "|---|---|---|" + "---:|" * (len(shown) + 1)]
        for c in data["cells"]:
            ph = c.get("phases") or {}
            kern = c.get("kernels_generated")
            lines.append(f"| {c['model']} | {c['mode']} | {c['strategy']} | "
                         + " | ".join(f"{ph[k]['median']:.2f}" if k in ph else "" for k in shown)
                         + (f" | {kern['median']:.0f} |" if kern else " | |"))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["wukong", "dhen"])
    ap.add_argument("--modes", nargs="+", default=["inference", "train"])
    ap.add_argument("--strategies", nargs="+", default=["inductor,inductor-optimus,greedy,eqsat"],
                    help="names as in optimus-eq bench --strategies (comma- or space-separated)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--size", choices=("cpu", "gpu"), default=None, help="size preset (bench default: the device's)")
    ap.add_argument("--set", action="append", default=[], metavar="MODEL.KEY=VALUE", help="passed to the bench")
    ap.add_argument("--reps", type=int, default=5, help="fresh processes per cell (default 5)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds one process may run (default 1800)")
    ap.add_argument("--keep-caches", action="store_true", help="keep each run's cache folder")
    ap.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                    help="start no run after this many seconds (the runs done so far are reported)")
    ap.add_argument("--no-warm-up", action="store_true",
                    help="no warm-up compile before the timed first call (bench --no-warm-up): the first call of a "
                    "user's fresh process, Dynamo's and Inductor's one-time costs included")
    ap.add_argument("--out", default="bench/out/compile_time")
    a = ap.parse_args(argv)
    if a.reps < 1:
        ap.error("--reps must be at least 1")
    strategies = [s for part in a.strategies for s in part.split(",") if s]
    bench_args = ((["--size", a.size] if a.size else []) + [x for s in a.set for x in ("--set", s)]
                  + (["--no-warm-up"] if a.no_warm_up else []))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cells = [(m, md, s) for m in a.models for md in a.modes for s in strategies]
    data = {"config": {"models": a.models, "modes": a.modes, "strategies": strategies, "device": a.device,
                       "reps": a.reps, "bench_args": bench_args, "python": sys.executable},
            "environment": None, "runs": [], "cells": [], "verdicts": []}
    started = time.perf_counter()
    for k in range(a.reps):
        for pos in range(len(cells)):
            if a.time_budget is not None and time.perf_counter() - started > a.time_budget:
                data["stopped"] = f"time budget of {a.time_budget:g} s spent after {len(data['runs'])} runs"
                break
            # rotated by one cell per repetition and, on odd repetitions, walked backwards: no cell always
            # runs right after the same other cell
            m, md, s = cells[(k + pos if k % 2 == 0 else k - pos) % len(cells)]
            run_dir = out / "runs" / f"{k}-{m}-{md}-{s}"
            row = run_once(m, md, s, a.device, run_dir, bench_args, a.timeout, a.keep_caches)
            row.update(rep=k, position=pos)
            if data["environment"] is None and (run_dir / "results.json").exists():
                data["environment"] = json.loads((run_dir / "results.json").read_text()).get("environment")
            data["runs"].append(row)
            print(f"[{len(data['runs'])}/{a.reps * len(cells)}] {m}/{md}/{s} rep {k}: {row.get('status')} "
                  f"first call {row.get('compile_s') or float('nan'):.2f} s, ours {row.get('optimizer_s') or 0:.2f} s",
                  flush=True)
            data["cells"], data["verdicts"] = summarize(data["runs"])
            (out / "compile_time.json").write_text(json.dumps(data, indent=1))
            (out / "compile_time.md").write_text(markdown(data))
        if data.get("stopped"):
            break
    (out / "compile_time.json").write_text(json.dumps(data, indent=1))
    print(markdown(data))
    return 1 if any(r.get("status") == "error" for r in data["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
