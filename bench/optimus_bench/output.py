"""The benchmark's outputs: ``results.json``, ``results.md`` (tables) and PNG plots.

Every function here reads the results dict that :func:`optimus_bench.runner.run_matrix` builds:
``{"environment": {...}, "config": {...}, "strategies": {...}, "kernel_note": str, "models": {...},
"cells": [{"model", "mode", "strategy", "status", ...metrics}]}``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

PLOTS = ("kernels.png", "throughput.png", "compile_time.png")
_CACHE_TEXT = {
    "cold": "cold (an empty cache per cell: compile times are cold and comparable)",
    "row": "row (one empty cache per model and mode, shared by its strategies: a strategy reuses the kernels an "
           "earlier one compiled, so compile times after the first compiling strategy of a row are too low)",
    "warm": "warm (the user's cache: compile times are not cold)",
}
_MARK = {"mismatch": " !", "error": "error", "skipped": "skip", "not_run": "-"}
AS_INDUCTOR_MARK = " ≈"
AS_INDUCTOR_FACTOR = 2.0  # a mismatch within this factor of plain Inductor's own error is Inductor's
OURS = ("greedy", "eqsat")  # the two strategies users pick between; the ablations are not "ours" here


def as_inductor(results: dict, c: dict) -> bool:
    """Whether a mismatching cell differs from eager no more than plain Inductor does on the same row.

    True when ``c`` is a mismatch, the ``inductor`` cell of its (model, mode) is a mismatch too, and c's
    largest relative L2 errors (outputs and gradients) are at most ``AS_INDUCTOR_FACTOR`` times the
    Inductor cell's. Inductor reorders fp32 reductions; a gradient that is a sum of many terms of both
    signs (a BatchNorm bias over batch x H x W positions) then differs by more than any fixed tolerance,
    for Inductor as for every strategy built on it. The status in results.json stays ``mismatch``.
    """
    if c["status"] != "mismatch" or c["strategy"] == "inductor":
        return False
    ref = _cell(results["cells"], c["model"], c["mode"], "inductor")
    if not ref or ref["status"] != "mismatch":
        return False
    for key in ("max_rel_l2", "max_grad_rel_l2"):
        mine, theirs = c.get(key), ref.get(key)
        if mine is None and theirs is None:
            continue
        if mine is None or theirs is None or not mine <= AS_INDUCTOR_FACTOR * max(theirs, 1e-12):
            return False
    return True


#: The noise rule of side-by-side rounds (``--rounds`` > 1), as results.md states it.
NOISE_RULE = ("a strategy is faster than another of the same row only when its slowest round median is below the "
              "other's fastest round median (their ranges of round medians do not overlap); otherwise the "
              "difference is within noise")
NOISE_MARK = " ~"
#: Per-row comparisons results.md lists with rounds: (strategy, against), where both ran.
VERSUS = (("eqsat", "inductor"), ("eqsat", "greedy"), ("eqsat-cudagraphs", "inductor-cudagraphs"),
          ("eqsat-cudagraphs", "greedy-cudagraphs"))


def round_range(c: dict | None) -> tuple[float, float] | None:
    """``(fastest, slowest)`` of a cell's round medians (ms), or ``None`` without two rounds."""
    r = (c or {}).get("ms_rounds")
    if not r or len(r) < 2:
        return None
    return min(r), max(r)


def versus(a: dict | None, b: dict | None) -> str | None:
    """``"faster"``, ``"slower"`` or ``"noise"``: cell ``a`` against cell ``b`` of the same row by
    :data:`NOISE_RULE`; ``None`` when either has fewer than two round medians (no noise estimate)."""
    ra, rb = round_range(a), round_range(b)
    if ra is None or rb is None:
        return None
    if ra[1] < rb[0]:
        return "faster"
    if rb[1] < ra[0]:
        return "slower"
    return "noise"


def rounds_used(results: dict) -> int:
    """The most round medians any cell has (0 or 1: every cell was timed alone)."""
    return max((len(c.get("ms_rounds") or []) for c in results["cells"]), default=0)


def _fastest(results: dict, model: str, mode: str) -> dict | None:
    ok = [c for c in (_cell(results["cells"], model, mode, s) for s in results["config"]["strategies"])
          if c and c["status"] == "ok" and c.get("ms") is not None]
    return min(ok, key=lambda c: c["ms"]) if ok else None


def _ms_text(results: dict, c: dict) -> str:
    """The headline's ms of ``c``; with rounds, bold for the row's fastest and ``~`` when within noise of it."""
    text = f"{_f(c.get('ms'), '.2f')} ms"
    if round_range(c) is None:
        return text
    best = _fastest(results, c["model"], c["mode"])
    if best is c:
        return f"**{text}**"
    return text + (NOISE_MARK if versus(c, best) == "noise" else "")


def comparisons(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each pair of :data:`VERSUS` on each (model, mode) where both cells have a median ms.

    Returns ``[{"model", "mode", "strategy", "against", "ms", "against_ms", "ratio", "verdict", "range",
    "against_range"}]`` with ``ratio`` = strategy's ms / against's (< 1: faster), ``verdict`` from
    :func:`versus` and the ranges of round medians (``None`` without rounds).
    """
    out = []
    for mode in results["config"]["modes"]:
        for m in results["config"]["models"]:
            for s, o in VERSUS:
                a, b = _cell(results["cells"], m, mode, s), _cell(results["cells"], m, mode, o)
                if not a or not b or a.get("ms") is None or b.get("ms") is None or b["ms"] <= 0:
                    continue
                out.append({"model": m, "mode": mode, "strategy": s, "against": o, "ms": a["ms"],
                            "against_ms": b["ms"], "ratio": a["ms"] / b["ms"], "verdict": versus(a, b),
                            "range": round_range(a), "against_range": round_range(b),
                            "marks": _mark(results, a) + _mark(results, b)})
    return out


_VERDICT = {"faster": "faster, beyond noise", "slower": "SLOWER, beyond noise", "noise": "within noise",
            None: "n/a (one round: no noise estimate)"}


def _range_text(r: tuple[float, float] | None) -> str:
    return "" if r is None else f"{r[0]:.3f}-{r[1]:.3f}"


def _mark(results: dict, c: dict) -> str:
    if c["status"] != "mismatch":
        return ""
    return AS_INDUCTOR_MARK if as_inductor(results, c) else _MARK["mismatch"]


def headline(results: dict[str, Any]) -> list[str]:
    """Markdown lines: kernels per iteration and median ms, one row per (model, mode), every strategy that ran
    as a column, in the run's order (``none`` too: Inductor through our backend with the graph unchanged, the
    baseline of ours). With rounds the row's fastest ms is bold and ms within noise of it (:data:`NOISE_RULE`)
    is marked ``~``."""
    cfg = results["config"]
    strategies = list(cfg["strategies"])
    lines = ["| model | mode | " + " | ".join(strategies) + " |", "|---|---|" + "---:|" * len(strategies)]
    for mode in cfg["modes"]:
        for m in cfg["models"]:
            row = []
            for s in strategies:
                c = _cell(results["cells"], m, mode, s)
                if c is None or c["status"] in ("error", "skipped", "not_run"):
                    row.append(_MARK.get(c["status"], "") if c else "")
                else:
                    row.append(f"{c.get('kernels', 'n/a')} k, {_ms_text(results, c)}{_mark(results, c)}")
            if any(row):
                lines.append(f"| {m} | {'train' if mode == 'train' else 'inference'} | " + " | ".join(row) + " |")
    return lines


def gaps(results: dict[str, Any], builtin: str = "inductor-optimus") -> list[dict[str, Any]]:
    """Kernels of the best of ``OURS`` against the built-in passes, per (model, mode), largest gap first.

    Returns ``[{"model", "mode", "builtin", "ours", "ours_strategy", "ratio"}]`` with ``ratio`` =
    builtin kernels / ours (> 1: ours launches fewer), for rows where both ran and matched eager (or
    differed only as much as Inductor does; see :func:`as_inductor`).
    """
    def usable(c):
        return c and c.get("kernels") is not None and (c["status"] == "ok" or as_inductor(results, c))

    out = []
    for mode in results["config"]["modes"]:
        for m in results["config"]["models"]:
            b = _cell(results["cells"], m, mode, builtin)
            ours = [c for c in (_cell(results["cells"], m, mode, s) for s in OURS) if usable(c)]
            if not usable(b) or not ours:
                continue
            best = min(ours, key=lambda c: c["kernels"])
            out.append({"model": m, "mode": mode, "builtin": b["kernels"], "ours": best["kernels"],
                        "ours_strategy": best["strategy"], "ratio": b["kernels"] / max(1, best["kernels"])})
    return sorted(out, key=lambda g: -abs(math.log(g["ratio"])) if g["ratio"] > 0 else 0)


def write_json(results: dict[str, Any], path: Path) -> None:
    """Write ``results`` as indented JSON atomically (a reader never sees a half-written file)."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str, allow_nan=True))
    os.replace(tmp, path)


def _f(v: Any, spec: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return format(v, spec)


def one_line(c: dict[str, Any]) -> str:
    """A progress line for one finished cell."""
    head = f"{c['model']}/{c['mode']}/{c['strategy']}: {c['status']}"
    if c["status"] in ("error", "skipped", "not_run"):
        return f"{head}: {c.get('error')}"
    parts = [f"{_f(c.get('ms'), '.3f')} ms", f"{c.get('kernels', 'n/a')} kernels"]
    if c.get("ms_rounds"):
        parts[0] += " (rounds " + "/".join(f"{v:.3f}" for v in c["ms_rounds"]) + ")"
    if c.get("recompiles_while_timed"):
        parts.append(f"RECOMPILED {c['recompiles_while_timed']}x while timed")
    if c.get("compile_s") is not None:
        parts.append(f"compile {_f(c['compile_s'], '.1f')} s (ours {_f(c.get('optimizer_s'), '.2f')})")
    if c.get("fallback"):
        parts.append("FELL BACK")
    if c.get("mismatch"):
        parts.append(f"mismatch: {c['mismatch'][:120]}")
    return f"{head}: " + ", ".join(parts)


def _cell(cells: list[dict], model: str, mode: str, strategy: str) -> dict | None:
    for c in cells:
        if c["model"] == model and c["mode"] == mode and c["strategy"] == strategy:
            return c
    return None


def _baseline(strategies: list[str]) -> str | None:
    for name in ("inductor", "eager"):
        if name in strategies:
            return name
    return None


def _pivot(results: dict, mode: str, value, best=None) -> list[str]:
    """A models x strategies markdown table of ``value(cell) -> str``; ``best`` picks a cell to bold."""
    strategies = results["config"]["strategies"]
    models = results["config"]["models"]
    lines = ["| model | " + " | ".join(strategies) + " |", "|---|" + "---:|" * len(strategies)]
    for m in models:
        row = []
        cells = [_cell(results["cells"], m, mode, s) for s in strategies]
        pick = best(cells) if best else None
        for c in cells:
            if c is None:
                row.append("")
            elif c["status"] in ("error", "skipped", "not_run"):
                row.append(_MARK[c["status"]])
            else:
                text = value(c) + _mark(results, c)
                row.append(f"**{text}**" if c is pick else text)
        lines.append(f"| {m} | " + " | ".join(row) + " |")
    return lines


def _best_by(key: str, lowest: bool):
    def pick(cells):
        ok = [c for c in cells if c and c["status"] == "ok" and c.get(key) is not None]
        if not ok:
            return None
        return (min if lowest else max)(ok, key=lambda c: c[key])
    return pick


def markdown(results: dict[str, Any]) -> str:
    """The report: environment, legend, per-mode pivot tables, the full table, failures."""
    env, cfg = results["environment"], results["config"]
    strategies = cfg["strategies"]
    base = _baseline(strategies)
    out = ["# optimus-eq benchmark", ""]
    out.append(f"- date: {env.get('date')}; device: {env.get('device_name')} ({cfg['device']}); "
               f"torch {env.get('torch')}, Triton {env.get('triton') or 'n/a'}, egglog {env.get('egglog') or 'n/a'}, "
               f"Python {env.get('python')}; optimus-eq commit {env.get('optimus_eq_commit') or 'n/a'}")
    out.append(f"- sizes: `{cfg['size']}` presets, dtype {cfg['dtype']}, {cfg['iters']} timed iterations after "
               f"{cfg['warmup']} warm-up; Inductor cache: {_CACHE_TEXT.get(cfg.get('cache'), cfg.get('cache'))}"
               + (f"; overrides {cfg['overrides']}" if cfg.get("overrides") else ""))
    n_rounds = rounds_used(results)
    if n_rounds >= 2:
        out.append(f"- timing in side-by-side rounds (`--rounds {cfg.get('rounds', n_rounds)}`): the strategies of each "
                   "(model, mode) row were compiled and checked first and kept alive, then timed one after another "
                   f"in {n_rounds} rounds of {cfg['iters']} iterations (round 1 after {cfg['warmup']} warm-up "
                   "iterations, later rounds after one untimed iteration), the order rotated by one strategy per "
                   "round so that drift falls on all alike; ms = median of all rounds' iterations. Noise rule: "
                   f"{NOISE_RULE}.")
    if env.get("prewarm"):
        pw = env["prewarm"]
        out.append(f"- cache prefilled by `--prewarm {pw['jobs']}` ({pw['seconds']:.0f} s, every cell compiled once in "
                   f"parallel; failed: {', '.join(pw['failed']) or 'none'}): compile times below are warm-cache times")
    if env.get("elapsed_s") is not None:
        out.append(f"- whole run: {env['elapsed_s']:.0f} s")
    out += ["", "Strategies:", ""]
    out += [f"- `{name}`: {results['strategies'][name]['description']}" for name in strategies]
    out += ["", "Models:", ""]
    for name, info in results.get("models", {}).items():
        out.append(f"- `{name}`: {info['doc']}; batch {info['batch_size']}, {info['parameters'] / 1e6:.2f} M "
                   f"parameters; {info['config']}")
    legend = ["", "Legend: **bold** = best of the row; `!` = outputs or gradients differ from eager (see Failures); "
              f"`≈` = they differ, but no more than {AS_INDUCTOR_FACTOR:g}x plain Inductor's own error on the same "
              "row (Inductor's reordered reductions; see Failures); "
              "`error` = the cell raised; `skip` = the model's dependency is missing here; `-` = not run.", ""]
    out += ["## Headline: kernels per iteration (k) and median ms per iteration", ""] + headline(results)
    gap = gaps(results)
    if gap:
        out += ["", f"Ours (best of {', '.join(OURS)}) against the built-in passes (`inductor-optimus`), kernels, "
                "largest gaps first:", ""]
        out += [f"- {g['model']} {g['mode']}: built-in {g['builtin']}, ours {g['ours']} ({g['ours_strategy']}): "
                + (f"ours {g['ratio']:.2f}x fewer" if g["ratio"] > 1 else
                   "tie" if g["ratio"] == 1 else f"built-in {1 / g['ratio']:.2f}x fewer") for g in gap]
    if n_rounds >= 2:
        legend[1] += (f" With rounds: **ms** = the row's fastest; `~` after an ms or a speed-up = within noise (of the "
                      "row's fastest in the headline, of the baseline in the ms tables).")
    pairs = comparisons(results) if n_rounds >= 2 else []
    if pairs:
        out += ["", "eqsat against Inductor alone and against greedy, row by row (ratio of median ms, < 1 = eqsat "
                f"faster; range of round medians in ms; verdict by the noise rule):", "",
                "| model | mode | strategy | against | ms ratio | its round medians | against's round medians | "
                "verdict |", "|---|---|---|---|---:|---:|---:|---|"]
        for v in pairs:
            out.append(f"| {v['model']} | {v['mode']} | {v['strategy']} | {v['against']} | {v['ratio']:.3f}{v['marks']} | "
                       f"{_range_text(v['range'])} | {_range_text(v['against_range'])} | {_VERDICT[v['verdict']]} |")
    out += legend
    for mode in cfg["modes"]:
        title = "inference" if mode == "inference" else "training step (forward + loss + backward)"
        out += [f"## {title}", ""]
        speed = (lambda c, m=mode: _f(c.get("ms"), ".3f") + _speedup(results, c, m, base))
        out += [f"### ms per iteration (median; in parentheses: speed-up over `{base}`"
                + (", `~` = within noise" if n_rounds >= 2 else "") + ")", ""]
        out += _pivot(results, mode, speed, _best_by("ms", True)) + [""]
        out += ["### kernels per iteration", ""]
        out += _pivot(results, mode, lambda c: str(c.get("kernels", "n/a"))
                      + (f" ({c['launches']})" if c.get("launches") is not None else ""),
                      _best_by("kernels", True)) + [""]
        if cfg["device"] == "cuda":
            out += ["(in parentheses: CPU-side launch calls; a CUDA graph replay is one)", ""]
        out += ["### compile seconds, first call (optimus_eq's share / Inductor's compile_fx_inner)", ""]
        out += _pivot(results, mode, lambda c: "" if c.get("compile_s") is None else
                      f"{c['compile_s']:.1f} ({_f(c.get('optimizer_s'), '.1f') if c.get('optimizer_s') is not None else '-'}"
                      f" / {_f(c.get('inductor_s'), '.1f')})") + [""]
        if cfg["device"] == "cuda":
            out += ["### peak GPU memory, MiB", ""]
            out += _pivot(results, mode, lambda c: _f(c.get("peak_mem_mib"), ".0f"), _best_by("peak_mem_mib", True))
            out += [""]
    rounds_col = ["round medians"] if n_rounds >= 2 else []
    out += ["## All cells", "",
            "| model | mode | strategy | status | ms | " + "".join(f"{h} | " for h in rounds_col)
            + "examples/s | kernels | peak MiB | compile s | ours s | Inductor s | e-nodes | FX nodes | max diff |",
            "|---|---|---|---|---:|" + "---:|" * len(rounds_col) + "---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in results["cells"]:
        fx = (f"{c['fx_nodes_before']}->{c['fx_nodes_after']}" if c.get("fx_nodes_before") is not None else "")
        rounds_text = ["/".join(f"{v:.3f}" for v in c.get("ms_rounds") or [])] if rounds_col else []
        out.append("| " + " | ".join([
            c["model"], c["mode"], c["strategy"], c["status"] + (" (fell back)" if c.get("fallback") else "")
            + (f" ({c['cudagraph_skips']} graphs without CUDA graphs)" if c.get("cudagraph_skips") else "")
            + (f" (recompiled {c['recompiles_while_timed']}x while timed)" if c.get("recompiles_while_timed") else ""),
            _f(c.get("ms"), ".3f"), *rounds_text, _f(c.get("examples_per_s"), ".0f"), str(c.get("kernels", "")),
            _f(c.get("peak_mem_mib"), ".0f") if c.get("peak_mem_mib") is not None else "",
            _f(c.get("compile_s"), ".1f") if c.get("compile_s") is not None else "",
            _f(c.get("optimizer_s"), ".2f") if c.get("optimizer_s") is not None else "",
            _f(c.get("inductor_s"), ".1f") if c.get("inductor_s") is not None else "",
            str(c.get("egraph_nodes", "")), fx,
            _f(max(c.get("max_abs_diff") or 0.0, c.get("max_grad_diff") or 0.0), ".1e")
            if c.get("max_abs_diff") is not None else "",
        ]) + " |")
    problems = [c for c in results["cells"] if c["status"] in ("error", "mismatch") or c.get("fallback")]
    skipped = sorted({(c["model"], c["error"]) for c in results["cells"] if c["status"] == "skipped"})
    if problems or skipped:
        out += ["", "## Failures, fallbacks and skips", ""]
        for c in problems:
            what = c.get("error") or c.get("mismatch") or ""
            if c.get("fallback"):
                what = (what + "; " if what else "") + f"optimizer fell back: {c['fallback']}"
            status = c["status"] + (", as plain Inductor" if as_inductor(results, c) else "")
            out.append(f"- {c['model']}/{c['mode']}/{c['strategy']} ({status}): {what}")
        for model, why in skipped:
            out.append(f"- {model}: skipped: {why}")
    out += ["", "Notes:", "", f"- {results['kernel_note']}",
            "- compile s: wall time of the first call (Dynamo, optimus_eq, AOTAutograd, Inductor, one run); "
            "ours: optimus_eq's `Report.times['total']` summed over graphs; Inductor: "
            "`compile_fx_inner` from Dynamo's compile-time metrics (forward and backward graphs).",
            "- e-nodes: e-graph size after the search, summed over the graphs Dynamo produced."]
    if n_rounds >= 2 and cfg["device"] == "cuda":
        out.append("- peak MiB with rounds: `max_memory_allocated` during the cell's timed iterations less what the "
                   "row's other live cells hold between their iterations (measured after each one's compile and "
                   "warm-up), in round 1.")
    out.append("")
    return "\n".join(out)


def _speedup(results: dict, c: dict, mode: str, base: str | None) -> str:
    if base is None or c["strategy"] == base:
        return ""
    b = _cell(results["cells"], c["model"], mode, base)
    if not b or b.get("ms") is None or c.get("ms") is None or c["ms"] <= 0:
        return ""
    return f" ({b['ms'] / c['ms']:.2f}x{NOISE_MARK if versus(c, b) == 'noise' else ''})"


def log_floor(smallest: float) -> float:
    """The bottom of a log axis for bars whose smallest value is ``smallest`` (> 0): the power of ten below it,
    strictly, so that every bar has a height."""
    bottom = 10.0 ** math.floor(math.log10(smallest))
    return bottom / 10 if bottom >= smallest else bottom


def plot(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """Grouped bar charts (models on x, one bar per strategy, one panel per mode): kernels.png,
    throughput.png (examples/s) and compile_time.png (optimus_eq's share hatched). Log axes start at the power
    of ten below the smallest bar (:func:`log_floor`); the baseline strategy (``inductor``, else ``eager``) is
    also a dashed line across each model's bars. Returns the paths.

    Raises:
        ImportError: matplotlib is missing.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = results["config"]
    models, modes, strategies = cfg["models"], cfg["modes"], cfg["strategies"]
    base = _baseline(strategies)
    colors = plt.get_cmap("tab10")
    env = results["environment"]
    subtitle = f"{env.get('device_name')} | torch {env.get('torch')} | {env.get('date', '')[:10]}"
    paths = []
    specs = [("kernels.png", "kernels", "kernels per iteration", True),
             ("throughput.png", "examples_per_s", "examples / s", True),
             ("compile_time.png", "compile_s", "first-call compile s", False)]
    width = 0.8 / max(1, len(strategies))
    for fname, key, label, log in specs:
        fig, axes = plt.subplots(len(modes), 1, figsize=(max(6, 1.6 * len(models) * max(1, len(strategies)) / 4),
                                                         3.6 * len(modes)), squeeze=False)
        for ax, mode in zip(axes[:, 0], modes):
            lows: list[float] = []
            for j, s in enumerate(strategies):
                xs, ys, ours = [], [], []
                for i, m in enumerate(models):
                    c = _cell(results["cells"], m, mode, s)
                    if c and c["status"] in ("ok", "mismatch") and c.get(key) is not None:
                        xs.append(i + (j - (len(strategies) - 1) / 2) * width)
                        ys.append(c[key])
                        ours.append(c.get("optimizer_s") or 0.0)
                if not xs:
                    continue
                ax.bar(xs, ys, width, label=s, color=colors(j % 10))
                lows.extend(y for y in ys if y > 0)
                if s == base:  # the baseline across each model's group of bars
                    for x, y in zip(xs, ys):
                        i = round(x - (j - (len(strategies) - 1) / 2) * width)
                        ax.hlines(y, i - 0.4, i + 0.4, colors="black", linestyles="--", linewidth=0.8)
                if key == "compile_s" and any(ours):
                    ax.bar(xs, ours, width, color="none", edgecolor="black", hatch="//", linewidth=0.5)
            ax.set_xticks(range(len(models)), models, rotation=20)
            ax.set_ylabel(label)
            ax.set_title(f"{mode}: {label}" + (" (hatched: optimus_eq's share)" if key == "compile_s" else ""),
                         fontsize=10)
            if log and lows:
                # a log axis must start below the smallest bar, or that bar (the best kernel count) has no height
                ax.set_yscale("log")
                ax.set_ylim(bottom=log_floor(min(lows)))
            if base and base in strategies:
                ax.plot([], [], color="black", linestyle="--", linewidth=0.8, label=f"{base} (baseline)")
            ax.grid(axis="y", alpha=0.3)
        axes[0, 0].legend(fontsize=7, ncol=min(4, len(strategies)))
        fig.suptitle(subtitle, fontsize=9)
        fig.tight_layout()
        path = out_dir / fname
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def write_all(results: dict[str, Any], out_dir: Path, plots: bool = True) -> None:
    """results.json, results.md and (with matplotlib) the plots, under ``out_dir``."""
    out_dir = Path(out_dir)
    if plots:
        try:
            results["environment"]["plots"] = [p.name for p in plot(results, out_dir)]
        except ImportError as exc:
            results["environment"]["plots"] = f"not drawn: {exc}"
    write_json(results, out_dir / "results.json")
    (out_dir / "results.md").write_text(markdown(results))
