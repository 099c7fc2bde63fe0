"""The benchmark matrix: every (model, mode, strategy) cell, with progress, written as it goes.

:func:`run_matrix` builds each model once per mode, computes the eager reference, runs every strategy's
cell (:func:`optimus_bench.measure.run_cell`) and rewrites ``results.json`` after every cell, so a run
cut short (a device time limit) still leaves every finished cell on disk. A cell that raises is recorded
with its error and the run goes on; a model whose optional dependency is missing is recorded as skipped.
With ``rounds`` > 1 the cells of one (model, mode) row are compiled and checked first, then timed side by
side in rounds (:func:`optimus_bench.measure.run_rounds`), so that the strategies of a row are compared at
the same moments.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import gc
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch._inductor.utils as inductor_utils

from optimus_bench import measure, output
from optimus_bench.models import MODELS, ModelUnavailable, build
from optimus_bench.strategies import Strategy, resolve
from optimus_eq.cost import GPUCostModel
from optimus_eq.demo import warm_up_compiler
from optimus_eq.kernels import KERNEL_NOTES

DEFAULT_MODELS = tuple(MODELS)
DEFAULT_STRATEGIES = ("eager", "inductor", "inductor-cudagraphs", "inductor-optimus", "greedy", "eqsat",
                      "eqsat-cudagraphs")
CPU_DEFAULT_STRATEGIES = ("eager", "inductor", "inductor-optimus", "none", "greedy", "eqsat")
CACHE_MODES = ("cold", "row", "warm")
_PENDING = "compiled and checked, but its row's rounds were not timed (the run was cut short)"


def environment(device: str) -> dict[str, Any]:
    """Date, versions and device name recorded with the results."""
    env: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "device": device,
    }
    from importlib import metadata

    for dist in ("triton", "egglog", "transformers", "torchvision", "timm"):
        try:
            env[dist] = metadata.version(dist)
        except Exception:  # not installed
            env[dist] = None
    if device == "cuda" and torch.cuda.is_available():
        env["device_name"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
    else:
        env["device_name"] = platform.processor() or platform.machine()
    try:
        here = Path(__file__).resolve().parent
        env["optimus_eq_commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, text=True,
                                                  capture_output=True, timeout=5).stdout.strip() or None
    except Exception:
        env["optimus_eq_commit"] = None
    return env


def parse_overrides(items: list[str] | None) -> dict[str, dict[str, str]]:
    """``["launch_bound.branches=256", "bert.layers=12"]`` -> ``{"launch_bound": {"branches": "256"}, ...}``.

    Raises:
        ValueError: an item not of the form ``MODEL.KEY=VALUE`` or naming an unknown model.
    """
    out: dict[str, dict[str, str]] = {}
    for item in items or []:
        lhs, eq, value = item.partition("=")
        model, dot, key = lhs.partition(".")
        if not (eq and dot and model and key):
            raise ValueError(f"--set {item!r}: expected MODEL.KEY=VALUE, e.g. launch_bound.branches=256")
        if model not in MODELS:
            raise ValueError(f"--set {item!r}: unknown model {model!r}; valid: {', '.join(MODELS)}")
        out.setdefault(model, {})[key] = value
    return out


def _progress(total: int, enabled: bool, stream=None):
    """A tqdm bar on a terminal; plain ``[i/total] cell`` lines otherwise (a log file, a pipe, CI), where
    tqdm's carriage returns garble the output."""
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is a dependency; stay usable without it
        tqdm = None
    stream = sys.stderr if stream is None else stream
    if tqdm is None or not enabled or not getattr(stream, "isatty", lambda: False)():
        class _Plain:
            def __init__(self):
                self.n = 0

            def update(self, k=1):
                self.n += k

            def set_description_str(self, s):
                print(f"[{self.n + 1}/{total}] {s}", flush=True)

            def write(self, s):
                print(s, flush=True)

            def close(self):
                pass
        return _Plain()
    return tqdm(total=total, unit="cell", dynamic_ncols=True, file=stream)


def run_matrix(models: list[str], strategies: list[str], modes: list[str], device: str, out_dir: str | Path, *,
               size: str | None = None, dtype: torch.dtype = torch.float32, iters: int = 20, warmup: int = 3,
               cache: str = "cold", overrides: dict[str, dict] | None = None, seed: int = 0,
               time_budget_s: float | None = None, plots: bool = True, progress: bool = True,
               warm_up: bool = True, argv: list[str] | None = None,
               cost_model: str | None = None, prewarmed: dict | None = None, rounds: int = 1) -> dict[str, Any]:
    """Run the matrix and write ``results.json``, ``results.md`` and the plots under ``out_dir``.

    Args:
        models, strategies, modes: names (see ``MODELS``, :func:`optimus_bench.strategies.available`,
            ``measure.MODES``); validated before anything runs.
        device: ``"cpu"`` or ``"cuda"``.
        size: model size preset (default: ``"gpu"`` on cuda, ``"cpu"`` on cpu).
        cache: Inductor's on-disk cache: ``"cold"`` (an empty cache per cell: compile times are cold and
            comparable), ``"row"`` (one empty cache per model and mode, shared by its strategies: kernels
            an earlier strategy compiled are reused, so later strategies' compile times are too low; much
            faster) or ``"warm"`` (the user's cache as it is).
        time_budget_s: start no new cell after this many seconds (the rest is recorded as not run).
        warm_up: compile a tiny function first, so that no cell pays Dynamo's and Inductor's one-time
            start-up costs (10-20 s on two CPU cores).
        cost_model: a calibration JSON (``optimus-eq calibrate``) whose constants our strategies use
            (``GPUCostModel.from_calibration``; the ``-cudagraphs`` strategies get its CUDA-graph model when
            the record has ``launch_us_cudagraph``); default: the built-in constants, and for the
            ``-cudagraphs`` strategies the backend's CUDA-graph model.
        prewarmed: what :func:`prewarm` returned, when the cache was filled by it (recorded in the
            environment; compile times are then warm-cache times).
        rounds: 1 (default): each cell is timed alone, right after its compile (:func:`measure.run_cell`).
            More: per (model, mode) row, every strategy's cell is compiled and checked first and kept alive
            (:func:`measure.prepare_cell`), then the row's cells are timed side by side in ``rounds``
            rounds of ``iters`` iterations each, in an order rotated by one strategy per round
            (:func:`measure.run_rounds`), so that drift between moments falls on every strategy alike;
            ``ms`` is then the median over all rounds and the cells also get ``ms_rounds`` (each round's
            median), ``ms_spread`` and ``round_positions``. The row's cells are freed after the row. The
            rounds of the cells compiled before a time budget ran out are always run (they cost ``rounds``
            times a cell's timing, which the budget never cut short either).

    Returns the results dict (``environment``, ``config``, ``cells``; see ``bench/README.md``).

    Raises:
        ValueError: unknown model, strategy or mode names, or ``rounds`` < 1 (before any work).
        RuntimeError: ``device="cuda"`` without a CUDA device.
    """
    if not (isinstance(rounds, int) and rounds >= 1):
        raise ValueError(f"rounds must be a whole number >= 1, got {rounds!r}")
    for m in models:
        if m not in MODELS:
            raise ValueError(f"unknown model {m!r}; valid: {', '.join(MODELS)}")
    if cache not in CACHE_MODES:
        raise ValueError(f"unknown cache mode {cache!r}; valid: {', '.join(CACHE_MODES)}")
    for m in modes:
        if m not in measure.MODES:
            raise ValueError(f"unknown mode {m!r}; valid: {', '.join(measure.MODES)}")
    chosen: list[Strategy] = resolve(strategies)
    optimus_options: dict[str, Any] = {}
    cost_constants = None
    if cost_model is not None:
        try:
            optimus_options["cost_model"] = GPUCostModel.from_calibration(cost_model)
            record = json.loads(Path(cost_model).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"--cost-model {cost_model}: {exc}") from exc
        cost_constants = {k: getattr(optimus_options["cost_model"], k) for k in ("launch_us", "bytes_per_us")}
        if record.get("launch_us_cudagraph"):  # the -cudagraphs strategies price kernels inside a replay
            optimus_options["cost_model_cudagraph"] = GPUCostModel.from_calibration(record, execution="cudagraph")
            cost_constants["launch_us_cudagraph"] = optimus_options["cost_model_cudagraph"].launch_us
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda, but torch.cuda.is_available() is False")
    size = size or ("gpu" if device == "cuda" else "cpu")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    results: dict[str, Any] = {
        "environment": environment(device),
        "config": {"models": list(models), "strategies": [s.name for s in chosen], "modes": list(modes),
                   "device": device, "size": size, "dtype": str(dtype).removeprefix("torch."), "iters": iters,
                   "warmup": warmup, "cache": cache, "overrides": overrides or {}, "seed": seed,
                   "argv": argv, "cost_model": cost_constants, "rounds": rounds},
        "strategies": {s.name: {"kind": s.kind, "description": s.description, "mode": s.mode,
                                "inductor_options": s.inductor_options} for s in chosen},
        "kernel_note": KERNEL_NOTES[device],
        "models": {},
        "cells": [],
    }
    if prewarmed is not None:
        results["environment"]["prewarm"] = prewarmed
    bar = _progress(len(models) * len(modes) * len(chosen), progress)
    say: Callable[[str], None] = bar.write

    if warm_up and any(s.compiles for s in chosen):
        say("warming up Dynamo and Inductor (one tiny compile, kept out of every cell's compile time) ...")
        results["environment"]["warmup_s"] = warm_up_compiler(device)

    def save() -> None:
        results["environment"]["elapsed_s"] = time.perf_counter() - started
        output.write_json(results, out_dir / "results.json")

    def record(cell: dict[str, Any]) -> dict[str, Any]:
        results["cells"].append(cell)
        save()
        return cell

    def budget_spent() -> bool:
        return time_budget_s is not None and time.perf_counter() - started > time_budget_s

    def run_row(model_name: str, case, build_error, mode: str) -> None:
        ref = ref_error = None
        if case is not None:
            try:
                ref = measure.reference(case, mode)
            except Exception as exc:
                ref_error = f"eager reference failed: {type(exc).__name__}: {exc}"
        if rounds > 1 and not (build_error or ref_error):
            run_row_in_rounds(model_name, case, ref, mode)
            return
        for strat in chosen:
            key = {"model": model_name, "mode": mode, "strategy": strat.name}
            bar.set_description_str(f"{model_name}/{mode}/{strat.name}")
            if build_error or ref_error:
                status, error = build_error or ("error", ref_error)
                record({**key, "status": status, "error": error})
            elif budget_spent():
                record({**key, "status": "not_run", "error": f"time budget of {time_budget_s:.0f} s spent"})
            else:
                cell = measure.run_cell(case, mode, strat, device, ref, iters=iters, warmup=warmup,
                                        fresh_cache=(cache == "cold"), optimus_options=optimus_options)
                record({**key, **cell})
                say(output.one_line(results["cells"][-1]))
            bar.update(1)

    def run_row_in_rounds(model_name: str, case, ref, mode: str) -> None:
        """Compile and check every strategy of the row (recorded at once, without timing), then time the live
        cells side by side in rounds and fill in their timing fields."""
        live: list[measure.LiveCell] = []
        measure.reset_compiler(device)
        try:
            with measure.row_of_compiled(len(chosen)):
                for strat in chosen:
                    key = {"model": model_name, "mode": mode, "strategy": strat.name}
                    bar.set_description_str(f"{model_name}/{mode}/{strat.name} (compile)")
                    if budget_spent():
                        record({**key, "status": "not_run", "error": f"time budget of {time_budget_s:.0f} s spent"})
                    else:
                        res, cell = measure.prepare_cell(case, mode, strat, device, ref, fresh_cache=(cache == "cold"),
                                                         optimus_options=optimus_options)
                        if cell is None:
                            say(output.one_line(record({**key, **res})))
                        else:
                            # on disk as not run until its rounds are timed: a run cut short in the rounds leaves
                            # no untimed cell that --merge would prefer to a timed one
                            cell.res = record({**key, **res, "status": "not_run", "checked": res["status"],
                                               "error": _PENDING})
                            live.append(cell)
                    bar.update(1)
                if live:
                    say(f"{model_name}/{mode}: timing {len(live)} cells side by side, {rounds} rounds x {iters} "
                        f"iterations ...")
                    measure.run_rounds(live, rounds, iters=iters, warmup=warmup, device=device)
                    for cell in live:
                        checked = cell.res.pop("checked")
                        if cell.res["status"] == "not_run":  # not failed in the rounds
                            cell.res["status"], cell.res["error"] = checked, None
                        say(output.one_line(cell.res))
                    save()
        finally:
            measure.release(live, device)

    for model_name in models:
        case = build_error = None
        try:
            case = build(model_name, size, device=device, dtype=dtype, seed=seed,
                         overrides=(overrides or {}).get(model_name))
            results["models"][model_name] = {"config": case.config, "batch_size": case.batch_size,
                                             "parameters": sum(p.numel() for p in case.model.parameters()),
                                             "doc": MODELS[model_name].blurb}
        except ModelUnavailable as exc:
            build_error = ("skipped", str(exc))
        except Exception as exc:
            build_error = ("error", f"building the model failed: {type(exc).__name__}: {exc}")
        for mode in modes:
            row_cache = inductor_utils.fresh_cache() if cache == "row" else contextlib.nullcontext()
            with row_cache:
                run_row(model_name, case, build_error, mode)
        del case
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
    bar.close()
    output.write_all(results, out_dir, plots=plots)
    return results


def prewarm(models: list[str], strategies: list[str], modes: list[str], device: str, jobs: int, cache_dir: str | Path,
            cell_args: list[str], log_dir: str | Path) -> dict[str, Any]:
    """Compile every (model, mode, strategy) cell once, ``jobs`` at a time, into one Inductor/Triton cache.

    Each cell runs in its own process (``optimus-eq bench`` for that one cell, one iteration, no timing
    kept) with an empty cache of its own (``TORCHINDUCTOR_CACHE_DIR=cache_dir/cells/<cell>``, Triton's under
    it), so the cell's recorded first-call seconds are a cold compile (under ``jobs``-way load: compare
    cells of one prewarm, not with a serial run). When all are done, the cells' caches are copied into
    ``cache_dir`` (content-addressed files: a file two cells both wrote is the same file). A timed run
    afterwards with ``TORCHINDUCTOR_CACHE_DIR=cache_dir``, ``TRITON_CACHE_DIR=cache_dir/triton`` and
    ``cache="warm"`` then finds every kernel compiled (the FX graph cache and the autotuning results keyed
    by the graph our strategies hand to Inductor), so a matrix whose cells are compile-bound runs in a
    fraction of its serial time on a host with many cores: the compiles run in parallel, the timed
    iterations stay serial. Compile times of the timed run are then warm-cache times (the report says so).

    Args:
        jobs: processes at once (the H200 host has 16 cores; each Inductor compile also starts its own
            compile workers).
        cell_args: the size, dtype, ``--set`` and ``--cost-model`` arguments every cell takes.
        log_dir: one log per cell (``<model>-<mode>-<strategy>.log``) and its results folder.

    Returns ``{"jobs", "cache_dir", "seconds", "failed": [cell names]}``; a failed cell is recorded, not
    raised (the timed run records its error again).
    """
    from concurrent.futures import ThreadPoolExecutor

    cache_dir, log_dir = Path(cache_dir).resolve(), Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    cells = [(m, mode, s) for m in models for mode in modes for s in strategies]

    def one(cell: tuple[str, str, str]) -> tuple[str, int]:
        name = "-".join(cell)
        own = cache_dir / "cells" / name
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(own), "TRITON_CACHE_DIR": str(own / "triton")}
        cmd = [sys.executable, "-m", "optimus_eq.cli", "bench", "--models", cell[0], "--modes", cell[1],
               "--strategies", cell[2], "--device", device, "--iters", "1", "--warmup", "0", "--cache", "warm",
               "--no-plots", "--no-progress", "--out", str(log_dir / name), *cell_args]
        with open(log_dir / f"{name}.log", "w") as log:
            rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
        return name, rc

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        done = list(pool.map(one, cells))
    for own in sorted((cache_dir / "cells").glob("*")):
        shutil.copytree(own, cache_dir, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.lock"))
        shutil.rmtree(own, ignore_errors=True)
    return {"jobs": jobs, "cache_dir": str(cache_dir), "seconds": round(time.perf_counter() - started, 1),
            "failed": [name for name, rc in done if rc not in (0, 1)]}


def merge(paths: list[str | Path], out_dir: str | Path, plots: bool = True) -> dict[str, Any]:
    """Combine the ``results.json`` of several runs (e.g. one per device call) into one report.

    Cells are keyed by (model, mode, strategy); a later file's cell replaces an earlier one unless it
    was not run. The environment and config of the first file are kept, with the model, mode and
    strategy lists extended and every source recorded under ``environment["merged_from"]``.

    Raises:
        FileNotFoundError: a path that holds no results.json.
    """
    merged: dict[str, Any] | None = None
    cells: dict[tuple, dict] = {}
    sources = []
    for p in paths:
        p = Path(p)
        f = p / "results.json" if p.is_dir() else p
        data = json.loads(f.read_text())
        sources.append({"path": str(f), "date": data["environment"].get("date"),
                        "device_name": data["environment"].get("device_name")})
        if merged is None:
            merged = data
        else:
            for key in ("models", "strategies", "modes"):
                merged["config"][key] += [x for x in data["config"][key] if x not in merged["config"][key]]
            merged["models"].update(data.get("models", {}))
            merged["strategies"].update(data.get("strategies", {}))
            merged["environment"]["elapsed_s"] = (merged["environment"].get("elapsed_s") or 0) + (
                data["environment"].get("elapsed_s") or 0)
        for c in data["cells"]:
            k = (c["model"], c["mode"], c["strategy"])
            if c["status"] != "not_run" or k not in cells:
                cells[k] = c
    if merged is None:
        raise FileNotFoundError("no results to merge")
    merged["cells"] = list(cells.values())
    merged["environment"]["merged_from"] = sources
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    output.write_all(merged, out_dir, plots=plots)
    return merged
