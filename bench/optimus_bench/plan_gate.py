"""The plan-regression gate: a committed table of what each strategy's plan is, per model and graph, and the
comparison that fails CI when a plan gets costlier or loses a rewrite.

For every model of the gate (the bench models at their ``cpu`` size and the user-style corpus,
:mod:`optimus_bench.corpus`), Dynamo captures the training graph(s) (parameters require grad); each graph is
optimized as a pre-grad (Torch-IR) graph, and its Aten-IR forward and backward graphs (AOTAutograd with
Inductor's decompositions and partitioner, ``optimus_bridge.inductor_kernels.aten_graphs``) as post-grad
graphs, by each strategy of :data:`STRATEGIES`. One row per (model, graph, strategy):

* ``price``: the optimized graph's cost by the project's GPU cost model, priced as an input graph is
  (``optimus_bridge.plan_check.plan_price``, microseconds): equal graphs get equal prices whatever made them,
  so strategies compare on it;
* ``cost``: extraction's price of the plan in its own e-graph (``Report.cost_after``), what the search
  minimized;
* ``kernels``: the CUDA kernels Inductor would emit for the plan, predicted without Inductor
  (``optimus_bridge.inductor_kernels``; a pre-grad graph's forward and backward together);
* ``patterns``: rewrites the plan uses per pattern (``Report.patterns_fired``, read off the plan the same way
  for every strategy);
* ``ops``: the optimized graph's FX nodes by op kind (placeholders, outputs and getitems left out).

:func:`compare` reads a table against a fresh run. A row is a **regression** when its price or cost rises (beyond a
relative 1e-6: float summation order), its predicted kernels rise, or a pattern's count falls (a lost rewrite);
any other difference (a cheaper plan, other ops, a row added or gone) is a **change**. The gate fails on both:
the table must say what the plans are, or a later regression back to the old plan would pass. Optimizer time
is gated as a ratio: eqsat's CPU seconds over greedy's on the same model, measured in one run, may not exceed
:data:`TIME_SLACK` times the table's ratio (once eqsat takes more than :data:`TIME_FLOOR_S`).

Update the table after an intended change (say why in the commit message)::

    .venv/bin/python -m optimus_bench.plan_gate --update          # all models, writes bench/plan_table.json
    .venv/bin/python -m optimus_bench.plan_gate --models tower_relu3 dhen   # check some, print the diff
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import torch

import optimus_eq
from optimus_bench.corpus import CORPUS
from optimus_bench.models import build
from optimus_bridge.aten import translate_aten
from optimus_bridge.inductor_kernels import aten_graphs, predict, predict_module
from optimus_bridge.plan_check import plan_price
from optimus_bridge.translate import translate
from optimus_eq.cost import GPUCostModel

#: the committed table
TABLE = Path(__file__).resolve().parents[1] / "plan_table.json"
STRATEGIES = ("greedy", "eqsat")
#: bench models (``optimus_bench.models``) in the gate, at their ``cpu`` size
BENCH_MODELS = ("dhen", "wukong", "interformer", "dlrm", "launch_bound", "bert")
#: eqsat's optimizer time over greedy's may grow this much against the table's ratio ...
TIME_SLACK = 3.0
#: ... once eqsat's CPU seconds on the model exceed this (shorter runs are too noisy to gate)
TIME_FLOOR_S = 0.25
_REL = 1e-6
#: the cost model of every row (``optimize``'s default)
COST_MODEL = GPUCostModel()
_SKIP_OPS = frozenset(["placeholder", "output", "getitem"])


@dataclass(frozen=True)
class Finding:
    """One difference between the table and a run: ``kind`` is ``"regression"`` or ``"change"``."""

    kind: str
    key: str
    text: str

    def __str__(self) -> str:
        return f"{self.kind.upper():10} {self.key}: {self.text}"


def model_names() -> list[str]:
    """Every model of the gate: the bench models, then the corpus."""
    return list(BENCH_MODELS) + list(CORPUS)


def build_model(name: str) -> tuple[torch.nn.Module, tuple]:
    """``(model in train mode, example inputs)`` of a gate model.

    Raises:
        ValueError: for a name that is neither a bench model nor in the corpus.
    """
    if name in CORPUS:
        return CORPUS[name].build()
    if name in BENCH_MODELS:
        case = build(name, "cpu")
        return case.model.train(), tuple(case.inputs)
    raise ValueError(f"unknown gate model {name!r}; valid: {model_names()}")


def dynamo_graphs(model: torch.nn.Module, inputs: tuple) -> list[tuple[torch.fx.GraphModule, list]]:
    """The Torch-IR graphs Dynamo hands a backend for ``model(*inputs)`` (one per graph break)."""
    graphs = []

    def capture(gm, example_inputs):
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(model, backend=capture, dynamic=False)(*inputs)
    torch._dynamo.reset()
    return graphs


def _summary(gm, report, kernels: int, price: float) -> dict:
    ops = {k: v for k, v in sorted(Counter(report.ops_after).items()) if k not in _SKIP_OPS and v}
    return {"cost": round(report.cost_after, 3) if report.cost_after is not None else None,
            "price": round(price, 3),
            "kernels": kernels,
            "patterns": dict(sorted(report.patterns_fired.items())),
            "ops": ops,
            "fallback": report.fallback}


def summarize_model(name: str, strategies: Iterable[str] = STRATEGIES, registry=None) -> tuple[dict, dict]:
    """Optimize every graph of model ``name`` with each strategy.

    Returns ``(rows, seconds)``: rows ``"<model>|<graph>|<strategy>" -> summary`` (module docstring; graph is
    ``pre_grad``, ``post_grad.forward`` or ``post_grad.backward``, with ``#i`` for the i-th Dynamo graph
    when there are several) and optimizer CPU seconds per strategy, summed over the model's graphs.
    ``registry``: the pattern registry (default ``optimus_eq.DEFAULT_REGISTRY``).
    """
    registry = registry or optimus_eq.DEFAULT_REGISTRY
    model, inputs = build_model(name)
    graphs = dynamo_graphs(model, inputs)
    rows: dict = {}
    seconds: Counter = Counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, (gm, ex) in enumerate(graphs):
            tag = f"#{i}" if len(graphs) > 1 else ""
            aten = aten_graphs(gm, ex, training=True)
            for strategy in strategies:
                out, rep = optimus_eq.optimize(gm, ex, strategy=strategy, registry=registry)
                seconds[strategy] += rep.cpu_times.get("total", 0.0)
                kernels = predict_module(out, ex, device="cuda", training=True).kernels
                price = plan_price(out, COST_MODEL, "pre_grad", ex, translate)
                rows[f"{name}|pre_grad{tag}|{strategy}"] = _summary(out, rep, kernels, price)
                for part, g in zip(("forward", "backward"), aten):
                    out, rep = optimus_eq.optimize(g, None, strategy=strategy, level="post_grad", registry=registry)
                    seconds[strategy] += rep.cpu_times.get("total", 0.0)
                    price = plan_price(out, COST_MODEL, "post_grad", None, translate_aten)
                    rows[f"{name}|post_grad.{part}{tag}|{strategy}"] = _summary(out, rep, predict(out, "cuda").kernels,
                                                                                price)
    return rows, dict(seconds)


def time_ratio(seconds: dict) -> float | None:
    """eqsat's optimizer seconds over greedy's, or None without both."""
    if seconds.get("greedy") and "eqsat" in seconds:
        return seconds["eqsat"] / seconds["greedy"]
    return None


def _differs(a, b) -> bool:
    return abs(a - b) > _REL * max(abs(a), abs(b)) + 1e-6


def compare_row(key: str, old: dict | None, new: dict | None) -> list[Finding]:
    """The findings of one row (module docstring)."""
    if old is None:
        return [Finding("change", key, "not in the table")]
    if new is None:
        return [Finding("change", key, "in the table, not in this run")]
    out = []
    if new.get("fallback") and not old.get("fallback"):
        out.append(Finding("regression", key, f"falls back: {new['fallback']}"))
    for field, what in (("price", "price"), ("cost", "extraction's cost")):
        oc, nc = old.get(field), new.get(field)
        if oc is not None and nc is not None and _differs(oc, nc):
            out.append(Finding("regression" if nc > oc else "change", key, f"{what} {oc} -> {nc} us"))
    if old.get("kernels") != new.get("kernels"):
        worse = (new.get("kernels") or 0) > (old.get("kernels") or 0)
        out.append(Finding("regression" if worse else "change", key,
                           f"predicted kernels {old.get('kernels')} -> {new.get('kernels')}"))
    op, np_ = old.get("patterns", {}), new.get("patterns", {})
    for p in sorted(set(op) | set(np_)):
        a, b = op.get(p, 0), np_.get(p, 0)
        if a != b:
            out.append(Finding("regression" if b < a else "change", key,
                               f"{p} {a} -> {b}" + (" (a lost rewrite)" if b < a else "")))
    oo, no = old.get("ops", {}), new.get("ops", {})
    diff = [f"{k} {oo.get(k, 0)}->{no.get(k, 0)}" for k in sorted(set(oo) | set(no)) if oo.get(k, 0) != no.get(k, 0)]
    if diff:
        out.append(Finding("change", key, "ops " + ", ".join(diff)))
    return out


def compare(table: dict, rows: dict, seconds: dict | None = None, models: Iterable[str] | None = None) -> list[Finding]:
    """Findings of a run (``rows`` and ``seconds`` of the ``models`` run, from :func:`summarize_model`) against
    ``table`` (the committed JSON: ``{"plans": rows, "time_ratio": model -> ratio}``). Rows of models not in
    ``models`` (default: the models of ``rows``) are not compared."""
    plans = table.get("plans", {})
    models = set(models) if models is not None else {k.split("|")[0] for k in rows}
    keys = sorted({k for k in plans if k.split("|")[0] in models} | set(rows))
    found = [f for k in keys for f in compare_row(k, plans.get(k), rows.get(k))]
    for model, secs in (seconds or {}).items():
        found.extend(compare_time(model, table.get("time_ratio", {}).get(model), secs))
    return found


def compare_time(model: str, old_ratio: float | None, seconds: dict) -> list[Finding]:
    """A regression when eqsat's time over greedy's exceeds :data:`TIME_SLACK` times ``old_ratio`` (and eqsat took
    over :data:`TIME_FLOOR_S`)."""
    ratio = time_ratio(seconds)
    if old_ratio is None or ratio is None or seconds.get("eqsat", 0.0) <= TIME_FLOOR_S:
        return []
    if ratio > TIME_SLACK * old_ratio:
        return [Finding("regression", f"{model}|optimizer time", f"eqsat/greedy {old_ratio:.2f} -> {ratio:.2f} "
                        f"(eqsat {seconds['eqsat']:.2f} s, greedy {seconds['greedy']:.2f} s; allowed "
                        f"{TIME_SLACK:g}x the table's ratio)")]
    return []


def load_table(path: Path = TABLE) -> dict:
    """The committed table (empty when there is none)."""
    return json.loads(path.read_text()) if path.exists() else {"plans": {}, "time_ratio": {}}


def write_table(path: Path, plans: dict, ratios: dict) -> None:
    """Write the table, one row per line (sorted), so that a change to a plan is a one-line diff."""
    lines = ['{"plans": {']
    rows = sorted(plans.items())
    for i, (k, v) in enumerate(rows):
        lines.append(f" {json.dumps(k)}: {json.dumps(v)}" + ("," if i < len(rows) - 1 else ""))
    lines.append('},')
    lines.append(f'"time_ratio": {json.dumps(dict(sorted(ratios.items())))}}}')
    path.write_text("\n".join(lines) + "\n")


def format_findings(found: list[Finding], update_args: str = "--update") -> str:
    """The findings as lines, regressions first, with the command that would write them into the table."""
    lines = [str(f) for f in sorted(found, key=lambda f: (f.kind != "regression", f.key))]
    return "\n".join(lines + ["", "An intended change: update the table with "
                              f"`.venv/bin/python -m optimus_bench.plan_gate {update_args}` and say why in the commit."])


def run(models: Iterable[str], progress: Callable[[str], None] = lambda s: None) -> tuple[dict, dict]:
    """:func:`summarize_model` over ``models``: ``(rows, model -> seconds per strategy)``."""
    rows, seconds = {}, {}
    for m in models:
        progress(m)
        r, s = summarize_model(m)
        rows.update(r)
        seconds[m] = s
    return rows, seconds


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring). Exit codes: 0 as in the table (or ``--update`` written), 1 a
    difference (a better plan too), 2 bad arguments or an unreadable table."""
    ap = argparse.ArgumentParser(prog="python -m optimus_bench.plan_gate", description=__doc__.split("\n\n")[0],
                                 epilog="models: " + " ".join(model_names()) + ". Exit codes: 0 as in the table "
                                 "(--update: written), 1 a difference (a better plan too), 2 bad arguments.")
    ap.add_argument("--models", nargs="*", help="models to run (default: all)")
    ap.add_argument("--update", action="store_true",
                    help="write the run's plans into the table (the models run only); their optimizer-time ratios "
                         "are kept unless missing or --times")
    ap.add_argument("--times", action="store_true", help="with --update: write the measured time ratios too")
    ap.add_argument("--table", type=Path, default=TABLE)
    args = ap.parse_args(argv)
    models = list(dict.fromkeys(args.models or model_names()))
    for m in models:
        if m not in model_names():
            ap.error(f"unknown model {m!r}; valid: {model_names()}")
    if args.times and not args.update:
        ap.error("--times needs --update")
    if not args.table.exists() and not args.update:
        ap.error(f"no table at {args.table} (give --update to write one)")
    if not args.table.parent.is_dir():
        ap.error(f"no folder {args.table.parent} for the table")
    try:
        table = load_table(args.table)
    except (OSError, ValueError) as exc:
        ap.error(f"cannot read the table {args.table}: {exc}")
    rows, seconds = run(models, progress=lambda m: print(f"... {m}", file=sys.stderr, flush=True))
    found = compare(table, rows, seconds, models)
    if args.update:
        plans = {k: v for k, v in table.get("plans", {}).items() if k.split("|")[0] not in set(models)}
        plans.update(rows)
        ratios = dict(table.get("time_ratio", {}))
        for m, secs in seconds.items():
            r = time_ratio(secs)
            if r is not None and (args.times or m not in ratios):
                ratios[m] = round(r, 3)
        write_table(args.table, plans, ratios)
        print(f"wrote {args.table} ({len(rows)} rows of {len(models)} models; {len(found)} differences)")
        for f in found:
            print(f)
        return 0
    if found:
        again = ["--update"] + (["--models", *models] if args.models else []) \
            + (["--table", str(args.table)] if args.table != TABLE else [])
        print(format_findings(found, " ".join(again)))
        return 1
    print(f"{len(rows)} rows of {len(models)} models: as in the table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
