"""Optimizer speed at scale on synthetic recommendation graphs.

Usage::

    python bench/scale.py [--sizes 1000 5000 20000 50000] [--strategies greedy eqsat]
                          [--pattern-sets default split_cat]
                          [--out bench/results/scale_cpu.json] [--timeout 1800] [--repeats 3] [--cold]

Graph families (``--families``, each at every ``--sizes``): ``rec`` (the synthetic recommendation graph of
``synthetic.make_graph_of_size``, the default), ``tangle`` (the split/cat tangle, ``synthetic.tangle_of_size``:
64-512 fields, rounds to fill the size) and ``branches`` (hundreds of parallel per-field LayerNorm -> Linear ->
activation arches between split and stack/unbind/cat, as dynamo captures the launch-bound model:
``synthetic.branches_of_size``, 128-512 branches, layers to fill the size). ``--one`` takes ``family:size``.

Named graphs (``--graphs``), the shapes of issue 9's table, optimized like the sizes: ``tangle`` (the split/cat
tangle of ``synthetic.build_tangle_fx_graph``, 64 fields x 6 rounds, about 1.8k FX nodes; ``tangle20k``: 512
fields x 8 rounds, 18.5k FX nodes), ``dhen`` (the DHEN-style
model, 32 fields x 3 layers, dynamo graph) and ``launch`` (the launch-bound model, 128 parallel branches x 2
layers, dynamo graph); ``--sizes`` may then be left empty (``--sizes``).

Pattern sets (``--pattern-sets``, one column of the table each): ``default`` is every pre-grad pattern
(what ``optimize`` uses when ``patterns`` is left out: the split/cat family plus horizontal fusion);
``split_cat`` is the pre-grad patterns that are not horizontal (the split/cat family and its view and
pointwise algebra), so the cost of horizontal fusion is the difference of the two rows.

For each target size (FX nodes), strategy and pattern set this runs, in a fresh child
process (so a blow-up can be timed out and peak memory is per case):

1. build the graph with ``synthetic.make_graph_of_size`` (timed apart:
   ``build_s`` = fx.Graph + GraphModule codegen, ``fake_prop_s`` =
   FakeTensorProp filling node.meta['val'/'example_value']);
2. warm up: optimize a small synthetic graph (about 200 nodes) once with the same strategy
   (``warmup_s``: the one-time cost of a process's first optimization: importing scipy's sparse
   graph routines and HiGHS, compiling the egglog rule program; skipped with ``--cold``);
3. ``optimus_eq.optimize(gm, example_inputs, strategy=s, patterns=...)`` ``--repeats`` times (timed: ``wall_s`` is the
   fastest repeat, ``walls_s`` all of them, plus the repeat of least CPU time's per-phase ``times`` in seconds
   and ``cpu_times`` in CPU seconds (the table shows CPU seconds)
   (``horizontal``: the horizontal rounds' share of ``search``), its extraction's ``extraction`` stats
   (``choice_classes``: reachable e-classes with more than one possible e-node; components solved exactly,
   their sizes, gaps) and ``limits`` (which limit stopped what);
   ``cpu_s``: the least CPU time of this process over the repeats, steadier than wall time when other
   jobs share the cores);
4. run the optimized module eagerly on the example batch (B=8) and compare to
   the original graph's eager output with ``torch.allclose``.

Prints a markdown table and writes all records as JSON (plus the table as .md next to it).  All times are
seconds, memory is peak RSS of the child in MiB.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for p in (HERE, ROOT / "src", ROOT / "bridge"):  # run from a checkout without pip install
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

MARK = "@@SCALE_RESULT@@"
PHASES = ("translate", "search", "horizontal", "extract", "lower", "total")
GRAPHS = ("tangle", "tangle20k", "dhen", "launch")
FAMILIES = ("rec", "tangle", "branches")
PATTERN_SETS = ("default", "split_cat")


def pattern_names(pattern_set: str) -> list[str] | None:
    """The ``patterns`` argument of ``optimize`` for a pattern set: None (every pre-grad pattern) for
    ``default``; the pre-grad patterns whose kind is not ``horizontal`` for ``split_cat``.

    Raises:
        ValueError: for an unknown pattern set name.
    """
    import optimus_eq

    if pattern_set == "default":
        return None
    if pattern_set == "split_cat":
        return [name for name, levels, kind in optimus_eq.list_patterns()
                if "pre_grad" in levels and kind != "horizontal"]
    raise ValueError(f"unknown pattern set {pattern_set!r}; valid: {PATTERN_SETS}")


def named_graph(name: str):
    """``(gm, example_inputs, meta)`` of a named graph (see the module docstring)."""
    import torch

    if name in ("tangle", "tangle20k"):
        from synthetic import make_tangle_graph

        fields, rounds = (64, 6) if name == "tangle" else (512, 8)
        gm, inputs = make_tangle_graph(fields, rounds)
        return gm, inputs, dict(num_fields=fields, layers=rounds, nodes=len(gm.graph.nodes))
    if name not in ("dhen", "launch"):
        raise ValueError(f"unknown graph {name!r}; valid: {GRAPHS}")
    from optimus_bench.models import dhen, launch_bound

    if name == "dhen":
        case = dhen.build({"batch": 8, "fields": 32, "dim": 16, "layers": 3, "heads": 2, "rank": 8})
        fields, layers = 32, 3
    else:
        case = launch_bound.build({"batch": 16, "branches": 128, "dim": 8, "layers": 2, "optimizer": "none"})
        fields, layers = 128, 2
    got = []

    def capture(gm, example_inputs):
        got.append((gm, example_inputs))
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(case.model, backend=capture, dynamic=False)(*case.inputs)
    gm, inputs = got[0]
    return gm, list(inputs), dict(num_fields=fields, layers=layers, nodes=len(gm.graph.nodes))


def family_graph(family: str, size: int):
    """``(gm, example_inputs, meta)`` of a graph family at about ``size`` FX nodes (see the module docstring).

    Raises:
        ValueError: for an unknown family.
    """
    import synthetic

    if family == "rec":
        return synthetic.make_graph_of_size(size)
    t0 = time.perf_counter()
    if family == "tangle":
        n, layers = synthetic.tangle_of_size(size)
        gm, inputs = synthetic.make_tangle_graph(n, layers)
    elif family == "branches":
        n, layers = synthetic.branches_of_size(size)
        gm, inputs = synthetic.make_branches_graph(n, layers)
    else:
        raise ValueError(f"unknown graph family {family!r}; valid: {FAMILIES}")
    return gm, inputs, dict(target_nodes=size, num_fields=n, layers=layers, nodes=len(gm.graph.nodes),
                            build_s=time.perf_counter() - t0)


def _first_tensor(out):
    """Optimized modules may return a tensor, a 1-tuple or a list."""
    return out[0] if isinstance(out, (tuple, list)) else out


def run_case(size: int | str, strategy: str, repeats: int = 1, warmup: bool = True,
             pattern_set: str = "default", seconds: float | None = None) -> dict:
    """Build one graph (``size`` FX nodes of the synthetic graph, or a named graph), optimize it with one
    strategy and pattern set (fastest of ``repeats``) and return a flat record."""
    import torch
    import optimus_eq
    from synthetic import make_graph_of_size, make_rec_graph

    torch.manual_seed(0)
    patterns = pattern_names(pattern_set)
    from optimus_eq.egraph import Limits

    limits = Limits(seconds=seconds) if seconds is not None else None
    if isinstance(size, str) and ":" in size:
        family, n = size.split(":")
        gm, inputs, meta = family_graph(family, int(n))
        meta["family"] = family
    elif isinstance(size, str):
        gm, inputs, meta = named_graph(size)
    else:
        gm, inputs, meta = make_graph_of_size(size)
        meta["family"] = "rec"
    rec = dict(size=size, strategy=strategy, pattern_set=pattern_set, **meta)
    with torch.no_grad():
        ref = _first_tensor(gm(*inputs)).clone()
    if warmup:
        small, small_inputs = make_rec_graph(num_fields=8, layers=8)
        t0 = time.perf_counter()
        optimus_eq.optimize(small, small_inputs, strategy=strategy, patterns=patterns)
        if strategy == "eqsat":  # HiGHS, imported by the first exact solve (the small graph may need none)
            from optimus_eq.extract.ilp import load_solver

            load_solver()
        rec["warmup_s"] = time.perf_counter() - t0

    walls, cpus, best = [], [], None
    for _ in range(max(1, repeats)):
        c0 = time.process_time()
        t0 = time.perf_counter()
        try:
            gm2, rep = optimus_eq.optimize(gm, inputs, strategy=strategy, patterns=patterns, limits=limits)
        except Exception as e:  # record and keep the sweep going
            rec.update(wall_s=time.perf_counter() - t0, error=f"{type(e).__name__}: {e}"[:500])
            return rec
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        if best is None or cpus[-1] < best[0]:
            best = (cpus[-1], gm2, rep)
    _, gm2, rep = best
    rec["wall_s"], rec["walls_s"] = min(walls), walls
    rec["cpu_s"], rec["cpus_s"] = min(cpus), cpus  # CPU seconds of this process: steadier on a shared machine

    rec.update(
        nodes_in=rep.nodes_before, nodes_out=rep.nodes_after,
        fx_nodes_out=len(gm2.graph.nodes) if hasattr(gm2, "graph") else None,
        times={k: float(v) for k, v in (rep.times or {}).items()},
        cpu_times={k: float(v) for k, v in (getattr(rep, "cpu_times", None) or {}).items()},
        egraph_nodes=rep.egraph_nodes, egraph_classes=rep.egraph_classes,
        iterations=rep.iterations, stop_reason=rep.stop_reason, fallback=rep.fallback,
        ops_before=dict(rep.ops_before), ops_after=dict(rep.ops_after),
        patterns_fired=dict(rep.patterns_fired), rule_matches=dict(getattr(rep, "rule_matches", {})),
        # optional Report fields (present in the current Report, not in the minimal contract)
        **{k: getattr(rep, k) for k in ("extractor", "extract_note", "cost_before", "cost_after", "left_opaque",
                                        "extraction", "limits")
           if hasattr(rep, k)},
    )
    try:
        with torch.no_grad():
            out = _first_tensor(gm2(*inputs))
        rec["allclose"] = bool(out.shape == ref.shape and torch.allclose(out, ref, rtol=1e-5, atol=1e-6))
        rec["max_abs_err"] = float((out - ref).abs().max()) if out.shape == ref.shape else None
    except Exception as e:
        rec.update(allclose=False, run_error=f"{type(e).__name__}: {e}"[:500])
    return rec


def _child(size: int | str, strategy: str, repeats: int, warmup: bool, pattern_set: str,
           seconds: float | None = None) -> None:
    rec = run_case(size, strategy, repeats, warmup, pattern_set, seconds)
    rec["limits_seconds"] = seconds
    rec["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(MARK + json.dumps(rec), flush=True)


def spawn(size: int | str, strategy: str, timeout: float, repeats: int = 1, warmup: bool = True,
          pattern_set: str = "default", seconds: float | None = None) -> dict:
    """Run one case in a child python; returns its record or an error record."""
    cmd = [sys.executable, __file__, "--one", str(size), strategy, "--repeats", str(repeats),
           "--pattern-sets", pattern_set]
    if seconds is not None:
        cmd += ["--seconds", str(seconds)]
    if not warmup:
        cmd.append("--cold")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), str(ROOT / "bridge"), str(HERE), os.environ.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    try:
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return dict(size=size, strategy=strategy, pattern_set=pattern_set, error=f"timeout after {timeout:.0f}s")
    for line in cp.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    tail = (cp.stderr or cp.stdout).strip().splitlines()[-5:]
    return dict(size=size, strategy=strategy, pattern_set=pattern_set,
                error=f"child rc={cp.returncode}: " + " | ".join(tail),
                wall_s=time.perf_counter() - t0)


def _fmt(v, nd=2):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def _cost(r: dict) -> str:
    """Cost-model estimate (microseconds), 'before->after' when the report has both."""
    before, after = r.get("cost_before"), r.get("cost_after")
    return f"{before:.0f}->{after:.0f}" if before is not None and after is not None else _fmt(after, 0)


def markdown(records: list[dict]) -> str:
    """One row per (size, strategy, pattern set): FX nodes, phase seconds, e-graph size, checks."""
    hdr = ["size", "strategy", "patterns", "N x L", "build s", "fakeprop s", "nodes in", "nodes out", "warm-up s",
           *[f"{p} cpu s" for p in PHASES], "wall s", "cpu s", "e-nodes", "e-classes", "choice classes", "iters", "stop",
           "components (largest)", "exact (optimal)", "gap", "tree / fast / final cost us",
           "extractor", "cost us", "allclose", "RSS MiB", "note"]
    rows = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    for r in records:
        t = r.get("cpu_times") or r.get("times", {})
        note = r.get("error") or r.get("fallback") or r.get("run_error") or "; ".join(r.get("limits") or []) or ""
        cells = [r["size"], r["strategy"], r.get("pattern_set", "default"),
                 f"{r.get('num_fields', '?')}x{r.get('layers', '?')}",
                 _fmt(r.get("build_s")), _fmt(r.get("fake_prop_s")), _fmt(r.get("nodes_in")),
                 _fmt(r.get("nodes_out")), _fmt(r.get("warmup_s"), 3), *[_fmt(t.get(p), 3) for p in PHASES],
                 _fmt(r.get("wall_s"), 3), _fmt(r.get("cpu_s"), 3),
                 _fmt(r.get("egraph_nodes")), _fmt(r.get("egraph_classes")),
                 _fmt((r.get("extraction") or {}).get("choice_classes")), _fmt(r.get("iterations")),
                 _fmt(r.get("stop_reason")), *_extraction_cells(r.get("extraction") or {}), _fmt(r.get("extractor")),
                 _cost(r), _fmt(r.get("allclose")), _fmt(r.get("peak_rss_mib"), 0),
                 str(note).replace("|", "/")[:120]]
        rows.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(rows) + "\n\n" + ratios(records)


def _extraction_cells(x: dict) -> list[str]:
    """Extraction stats as table cells: components of the choice core (largest), components solved exactly
    (proven optimal; skipped because the fast plan is provably optimal there), the largest gap of a solve
    stopped at its budget (``-`` when none was: every exact solve closed), tree / fast / final plan cost."""
    if not x:
        return ["-"] * 4
    comps = f"{x.get('components', 0)} ({x.get('largest_component', 0)})" if "components" in x else "-"
    exact = f"{x.get('exact_components', 0)} ({x.get('exact_optimal', 0)})" if "components" in x else "-"
    if x.get("exact_skipped"):
        exact += f", {x['exact_skipped']} bound-closed"
    over = x.get("over_limit") or []
    gap = _fmt(x.get("exact_max_gap"), 3) if x.get("exact_max_gap") else "-"
    if over:
        gap += f"; {len(over)} over limit"
    costs = " / ".join(_fmt(x.get(k)) for k in ("tree_cost", "fast_cost", "cost"))
    return [comps, exact, gap, costs]


def ratios(records: list[dict]) -> str:
    """eqsat against greedy per graph and pattern set: fastest wall and CPU seconds, their ratios, plan
    costs."""
    by = {(r["size"], r.get("pattern_set", "default"), r["strategy"]): r for r in records}
    rows = ["| graph | FX nodes | patterns | greedy wall s | eqsat wall s | eqsat / greedy (wall) | greedy cpu s | "
            "eqsat cpu s | eqsat / greedy (cpu) | cost greedy / eqsat (us) |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for (size, ps, strat), g in by.items():
        e = by.get((size, ps, "eqsat"))
        if strat != "greedy" or e is None or not g.get("wall_s") or not e.get("wall_s"):
            continue
        cost = f"{_fmt(g.get('cost_after'))} / {_fmt(e.get('cost_after'))}"
        gc, ec = g.get("cpu_s"), e.get("cpu_s")
        cpu = f"{gc:.2f} | {ec:.2f} | {ec / gc:.2f}" if gc and ec else "- | - | -"
        rows.append(f"| {size} | {_fmt(g.get('nodes_in'))} | {ps} | {g['wall_s']:.2f} | {e['wall_s']:.2f} | "
                    f"{e['wall_s'] / g['wall_s']:.2f} | {cpu} | {cost} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description="optimus-eq optimizer speed at scale")
    ap.add_argument("--sizes", type=int, nargs="*", default=[1000, 5000, 20000, 50000])
    ap.add_argument("--families", nargs="*", default=["rec"], choices=FAMILIES,
                    help="graph families measured at every --sizes (rec: synthetic rec graph; tangle: split/cat "
                         "tangle; branches: hundreds of parallel LayerNorm/Linear arches)")
    ap.add_argument("--graphs", nargs="*", default=[], choices=GRAPHS,
                    help="named graphs (issue 9's first table), optimized after the sized families")
    ap.add_argument("--strategies", nargs="+", default=["greedy", "eqsat"])
    ap.add_argument("--pattern-sets", nargs="+", default=["default"], choices=PATTERN_SETS,
                    help="default: every pre-grad pattern (split/cat family + horizontal fusion); split_cat: "
                         "the pre-grad patterns that are not horizontal. Give both to measure them side by side "
                         "in one run: --pattern-sets default split_cat")
    ap.add_argument("--out", default=str(HERE / "out" / "scale_cpu.json"),
                    help="JSON records (and the table as .md beside it); a run worth keeping goes to a dated "
                         "folder of bench/results with a README naming the command and the commit")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per (size, strategy) child")
    ap.add_argument("--repeats", type=int, default=3, help="optimizations per case; the fastest is reported")
    ap.add_argument("--cold", action="store_true",
                    help="no warm-up: the timed optimization is the process's first (imports, rule program)")
    ap.add_argument("--seconds", type=float, default=None,
                    help="Limits.seconds of every optimize call (default: optimize's, 30 s of wall time: on a "
                         "loaded machine that limit, not the work, can decide the plan; give more to measure "
                         "the work)")
    ap.add_argument("--one", nargs=2, metavar=("SIZE", "STRATEGY"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        size = int(args.one[0]) if args.one[0].isdigit() else args.one[0]
        return _child(size, args.one[1], args.repeats, not args.cold, args.pattern_sets[0], args.seconds)

    from tqdm import tqdm

    sized = [n if f == "rec" else f"{f}:{n}" for f in args.families for n in args.sizes]
    cases = [(n, s, ps) for n in [*sized, *args.graphs] for s in args.strategies for ps in args.pattern_sets]
    records = []
    bar = tqdm(cases, unit="case")
    for size, strat, ps in bar:
        bar.set_description(f"{size} nodes / {strat} / {ps}")
        records.append(spawn(size, strat, args.timeout, args.repeats, not args.cold, ps, args.seconds))
        r = records[-1]
        bar.write(f"{size!s:>6} {strat:<7} {ps:<9} wall={_fmt(r.get('wall_s'), 2)}s out={_fmt(r.get('nodes_out'))} "
                  f"allclose={_fmt(r.get('allclose'))} {r.get('error') or r.get('fallback') or ''}")

    import importlib.metadata as md

    import torch
    try:
        egglog_v = md.version("egglog")
    except md.PackageNotFoundError:
        egglog_v = None
    env = dict(python=platform.python_version(), torch=torch.__version__, egglog=egglog_v,
               machine=platform.machine(), cpus=os.cpu_count(), processor=platform.processor(),
               affinity=len(os.sched_getaffinity(0)), repeats=args.repeats, warmup=not args.cold)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(env=env, records=records), indent=1))
    table = markdown(records)
    out.with_suffix(".md").write_text(table + "\n")
    print(table)
    print(f"\nwrote {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
