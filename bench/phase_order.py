"""Phase-ordering suite (issue 15, item 4): small and mid-size graphs on which some fixed pass order loses.

Each model is built so that applying the rewrites in one fixed order blocks a better graph: a horizontal
fusion done before a vertical fold blocks the fold, pieces of an uneven split batched before they are
merged, a vertical fold done before a horizontal fusion hides the group (issue 15's six tanhs), ... Each
states its optimum as a count on the lowered FX graph (``optimus_eq.count_ops``: calls of one op kind,
split/cat nodes, or *compute ops*: every call that is not a view), with why that count is a lower bound for
any graph that computes the same values with the same ops. The table holds that count for ``none``,
``greedy``, ``taso``, ``tensat`` and ``eqsat`` on each model, whether each reached the optimum, the cost
model's price of the plan (us) and the optimizer's wall time; every optimized graph is run against the
original on random inputs (allclose).

Usage::

    PYTHONPATH=src:bridge:bench python bench/phase_order.py --out bench/results/phase_order_cpu_<date>
    PYTHONPATH=src:bridge:bench python bench/phase_order.py --models split_tanh_group --strategies eqsat

Writes ``results.json`` and ``results.md`` into ``--out`` (nothing without it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

import optimus_eq

STRATEGIES = ("none", "greedy", "taso", "tensat", "eqsat", "eqsat-plan")
#: ``eqsat-plan``: eqsat with its horizontal round on the one plan extracted after vertical saturation (members
#: from the plan's e-nodes only: the round before issue 15's item 3), i.e. the fixed order "fold, then batch"

#: op kinds (``optimus_eq.count_ops`` names, both IR levels) that are views or graph plumbing, not kernels
VIEWS = frozenset(["placeholder", "output", "get_attr", "getitem", "narrow", "slice", "select", "reshape", "view",
                   "_unsafe_view", "permute", "unsqueeze", "squeeze", "flatten", "unflatten", "movedim",
                   "transpose", "t", "expand", "split", "chunk", "unbind", "split_with_sizes", "alias",
                   "as_strided", "view_as", "contiguous_view"])
JUNK = ("split", "chunk", "unbind", "cat", "stack", "split_with_sizes")


def compute_ops(ops) -> int:
    """Calls that are not views: an upper bound on kernels before Inductor fuses any (clones counted)."""
    return sum(n for k, n in ops.items() if k not in VIEWS)


@dataclass
class Model:
    """One graph of the suite.

    Attributes:
        name: row label.
        fn: the program (a function of tensors; dynamo traces it, or AOTAutograd for ``level="post_grad"``).
        inputs: ``() -> list of tensors``.
        metric: what is counted: ``"compute"`` (:func:`compute_ops`), ``"junk"`` (split/cat/stack/unbind
            nodes) or an op kind (``"tanh"``).
        optimum: the least value of ``metric`` any graph computing the same outputs from the same ops has.
        why: the fixed order that loses, and why the optimum is the optimum.
        level: ``"pre_grad"`` (dynamo's Torch-IR graph) or ``"post_grad"`` (AOTAutograd's forward graph).
        options: ``optimize`` keyword options for every strategy (``pattern_options``, ...).
    """

    name: str
    fn: Callable
    inputs: Callable
    metric: str
    optimum: int
    why: str
    level: str = "pre_grad"
    options: dict = field(default_factory=dict)


def _r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


#: the op kinds of ``optimus_eq.count_ops`` that are GEMMs (metric ``"gemm"``)
GEMMS = ("linear", "matmul", "mm", "addmm", "bmm", "baddbmm")


def count(ops, metric: str) -> int:
    if metric == "compute":
        return compute_ops(ops)
    if metric == "gemm":
        return sum(ops.get(k, 0) for k in GEMMS)
    if metric == "junk":
        return sum(ops.get(k, 0) for k in JUNK)
    return ops.get(metric, 0)


# -- the models -----------------------------------------------------------------------------------------

def split_tanh_group(x, a, b, c):
    p, q, r = torch.split(x, 8, dim=1)
    return [torch.tanh(t) * 2 for t in (p, q, r, a, b, c)]


def split_tanh_group_inputs():
    return [_r(16, 24, seed=0), _r(16, 8, seed=1), _r(16, 8, seed=2), _r(16, 8, seed=3)]


def uneven_split_tanh(x):
    parts = torch.split(x, [4, 4, 4, 4, 4, 8], dim=1)
    return torch.cat([torch.tanh(p) for p in parts], dim=1) + 1


def uneven_split_inputs():
    return [_r(32, 28)]


def three_wide_sigmoids(x, y, z):
    # three tensors, each split in two, a sigmoid per piece, pieces read apart: vertical folds give three
    # wide sigmoids (a group of three, below the minimum); the six pieces batch into one sigmoid
    ps = torch.split(x, 8, dim=1) + torch.split(y, 8, dim=1) + torch.split(z, 8, dim=1)
    return [torch.sigmoid(t) + i for i, t in enumerate(ps)]


def three_wide_inputs():
    return [_r(16, 16, seed=0), _r(16, 16, seed=1), _r(16, 16, seed=2)]


def mixed_pieces_and_inputs(x, a, b, c, d):
    # the mid-size version of issue 15's case: two layers, pieces of a split next to separate inputs
    p = list(torch.split(x, 8, dim=1))
    ts = [torch.tanh(t) for t in p + [a, b, c, d]]
    ss = [torch.sigmoid(t * 2) for t in ts]
    return torch.cat(ss[:3], dim=1), ss[3:]


def mixed_inputs():
    return [_r(16, 24, seed=0)] + [_r(16, 8, seed=i) for i in range(1, 5)]


def uneven_rec_of(layers: int, fields: int):
    """A DLRM-like interaction tower: ``layers`` x (split into ``fields`` - 1 fields of 8 and one of 16 ->
    tanh / sigmoid per field, alternating by layer -> cat -> residual add and scale)."""
    sizes = [8] * (fields - 1) + [16]

    def uneven_rec(x):
        h = x
        for layer in range(layers):
            ps = torch.split(h, sizes, dim=1)
            ys = [torch.tanh(p) if layer % 2 == 0 else torch.sigmoid(p) for p in ps]
            h = (torch.cat(ys, dim=1) + h) * 0.5
        return h

    return uneven_rec, lambda: [_r(64, sum(sizes))]


def uneven_dense_linear(x, w, b):
    # dense features of uneven widths, a relu per feature, concatenated into an MLP's first linear
    ps = torch.split(x, [8, 8, 8, 8, 8, 24], dim=1)
    return torch.nn.functional.linear(torch.cat([torch.relu(p) for p in ps], dim=1), w, b)


def gemms_of_one_input(x, a, b, p):
    # two bias-free linears and a matmul of one input (Wukong's FMB/LCB pair plus a second linear)
    lin = torch.nn.functional.linear
    return torch.cat([lin(x, a).relu(), lin(x, b).tanh(), (x @ p).sigmoid()], dim=-1)


MODELS = [
    Model("split_tanh_group", split_tanh_group, split_tanh_group_inputs, "tanh", 1,
          "issue 15: six [16, 8] tanhs, three on the pieces of one split. Folding first (pointwise_through_slice) "
          "leaves one wide tanh and three others, below min_fuse_set_size 5; batching first gives one tanh. "
          "One tanh is the least: the outputs need tanh of every element"),
    Model("split_tanh_group_post_grad", split_tanh_group, split_tanh_group_inputs, "tanh", 1,
          "the same at Aten-IR (AOTAutograd's inference graph): upstream's post-grad order runs "
          "pointwise_through_slice before the batch_aten passes", level="post_grad"),
    Model("uneven_split_tanh_cat", uneven_split_tanh, uneven_split_inputs, "compute", 2,
          "split [4]*5 + [8] -> tanh each -> cat -> + 1: batching the five equal pieces first (upstream's "
          "group_batch_fusion before split_cat) stacks them and the cat no longer folds; the optimum is "
          "tanh(x) + 1 (2 ops, no cat)"),
    Model("three_wide_sigmoids", three_wide_sigmoids, three_wide_inputs, "sigmoid", 1,
          "three tensors split in two, a sigmoid per piece, pieces read apart: folding first gives three "
          "wide sigmoids (a group of three, below min_fuse_set_size 5); the six pieces batch into one "
          "sigmoid (and one stack copy: 2 kernels against 3)"),
    Model("mixed_pieces_and_inputs", mixed_pieces_and_inputs, mixed_inputs, "tanh", 1,
          "seven [16, 8] tanhs (three on split pieces, four inputs), then mul and sigmoid per value, three "
          "of them concatenated back: one tanh (the plan keeps one wide tanh over the pieces if it folds first)"),
    Model("three_wide_sigmoids_post_grad", three_wide_sigmoids, three_wide_inputs, "sigmoid", 1,
          "three_wide_sigmoids at Aten-IR: upstream's post-grad order folds the pieces first (three sigmoids)",
          level="post_grad"),
    Model("mixed_pieces_post_grad", mixed_pieces_and_inputs, mixed_inputs, "tanh", 1,
          "mixed_pieces_and_inputs at Aten-IR: folded first, three of seven tanhs become one wide tanh and "
          "the other four stay below the group minimum", level="post_grad"),
    Model("uneven_rec_2layers", *uneven_rec_of(2, 6), "compute", 6,
          "two split -> per-field op -> cat -> residual layers, fields [8]*5 + [16]: batching the five "
          "equal fields first (upstream's pre-grad order: group_batch_fusion before split_cat) stacks them "
          "and the cat no longer folds; the optimum is one wide op, the add and the scale per layer (6)"),
    Model("uneven_rec_8layers_24fields", *uneven_rec_of(8, 24), "compute", 24,
          "the mid-size version (8 layers, fields [8]*23 + [16], about 500 FX nodes): optimum 3 per layer"),
    Model("uneven_dense_linear", uneven_dense_linear,
          lambda: [_r(32, 64), _r(16, 64, seed=1), _r(16, seed=2)], "compute", 2,
          "dense features [8]*5 + [24], a relu each, cat, linear: batching the five equal relus first "
          "blocks the fold of the cat; the optimum is relu(x) and the linear (2)"),
    Model("gemms_of_one_input", gemms_of_one_input,
          lambda: [_r(64, 256), _r(32, 256, seed=1), _r(32, 256, seed=2), _r(256, 32, seed=3)], "gemm", 1,
          "two bias-free linears and a matmul of one x: batching the linears first (batch_linear_lhs runs "
          "before batch_gemm_lhs) leaves two GEMMs; the optimum is one GEMM of x and [W1; W2; P^T] (every "
          "output reads x times a weight: at least one GEMM)"),
]


# -- running --------------------------------------------------------------------------------------------

def graph_of(model: Model):
    """``(gm, example_inputs)``: dynamo's graph (pre-grad) or AOTAutograd's inference forward graph."""
    inputs = model.inputs()
    graphs = []

    def capture(gm, example_inputs):
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    if model.level == "pre_grad":
        torch.compile(model.fn, backend=capture, fullgraph=True, dynamic=False)(*inputs)
    else:
        from torch._dynamo.backends.common import aot_autograd
        from torch._inductor.decomposition import select_decomp_table

        def fw(gm, example_inputs):
            graphs.append((gm, list(example_inputs)))
            return gm

        with torch.no_grad():
            torch.compile(model.fn, backend=aot_autograd(fw_compiler=fw, decompositions=select_decomp_table()),
                          fullgraph=True, dynamic=False)(*inputs)
    if len(graphs) != 1:
        raise RuntimeError(f"{model.name}: expected one graph, got {len(graphs)}")
    return graphs[0][0], graphs[0][1], inputs


def _flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flat(o)]
    return []


@contextlib.contextmanager
def _plan_only(on: bool):
    """While ``on``: horizontal rounds draw members from the plan's e-nodes only (``eqsat-plan``)."""
    if not on:
        yield
        return
    from optimus_eq.horizontal.plan import PlanGraph

    orig = PlanGraph.add_alternatives
    PlanGraph.add_alternatives = lambda self, *a, **k: 0
    try:
        yield
    finally:
        PlanGraph.add_alternatives = orig


def run_cell(model: Model, strategy: str) -> dict:
    """Optimize ``model`` with ``strategy``; its count, cost, time, and agreement with the original graph."""
    gm, example_inputs, inputs = graph_of(model)
    # AOTAutograd hands its compiler FakeTensors: run both graphs on the real inputs (the same placeholders
    # for a model without parameters)
    run_inputs = example_inputs if model.level == "pre_grad" else inputs
    with torch.no_grad():
        expected = _flat(gm(*run_inputs))
    with warnings.catch_warnings(record=True) as caught, _plan_only(strategy == "eqsat-plan"):
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        gm2, report = optimus_eq.optimize(gm, example_inputs, strategy=strategy.split("-")[0], level=model.level,
                                          **model.options)
        wall = time.perf_counter() - t0
    with torch.no_grad():
        actual = _flat(gm2(*run_inputs))
    ok = len(actual) == len(expected) and all(
        a.shape == e.shape and torch.allclose(a, e, rtol=1e-5, atol=1e-6) for a, e in zip(actual, expected))
    ops = optimus_eq.count_ops(gm2)
    value = count(ops, model.metric)
    return dict(model=model.name, strategy=strategy, level=model.level, metric=model.metric,
                optimum=model.optimum, value=value, reached=value <= model.optimum, compute=compute_ops(ops),
                junk=count(ops, "junk"), cost_us=report.cost_after, wall_s=wall, allclose=ok,
                fallback=report.fallback, warnings=[str(w.message) for w in caught if "optimus_eq" in str(w.message)],
                ops={k: v for k, v in ops.items() if k not in ("placeholder", "output")})


def markdown(records: list[dict], strategies, models, meta: dict | None = None) -> str:
    """The results as markdown: counts against the optimum (bold where reached, ``(!)`` where the graph
    differed from the original or the optimizer fell back), then plan cost and wall time, then why each
    model is there."""
    by = {(r["model"], r["strategy"]): r for r in records}
    lines = []
    if meta:
        lines += [f"# Phase-ordering suite ({meta['date']}, torch {meta['torch']}, {meta['processor']})", "",
                  "Counts on the lowered FX graph (`optimus_eq.count_ops`): an op kind, `junk` (split/cat/stack/"
                  "unbind nodes) or `compute` (every call that is not a view). `eqsat-plan` is eqsat with its "
                  "horizontal round on the one plan extracted after vertical saturation (members from the "
                  "plan's e-nodes only: eqsat before issue 15's item 3). Generated by `bench/phase_order.py`.", ""]
    lines += ["| model | level | metric | optimum | " + " | ".join(strategies) + " |",
             "|---|---|---|---|" + "---|" * len(strategies)]
    for m in models:
        cells = []
        for s in strategies:
            r = by.get((m.name, s))
            if r is None:
                cells.append("")
                continue
            mark = "**" if r["reached"] else ""
            bad = "" if r["allclose"] and not r["fallback"] else " (!)"
            cells.append(f"{mark}{r['value']}{mark}{bad}")
        lines.append(f"| {m.name} | {m.level} | {m.metric} | {m.optimum} | " + " | ".join(cells) + " |")
    reached = {s: sum(1 for m in models if by.get((m.name, s), {}).get("reached")) for s in strategies}
    lines.append(f"| **models at the optimum** | | | | " + " | ".join(f"{reached[s]}/{len(models)}" for s in strategies)
                 + " |")
    lines += ["", "Plan cost (cost model, us) and optimizer wall time (s):", "",
              "| model | " + " | ".join(strategies) + " |", "|---|" + "---|" * len(strategies)]
    for m in models:
        cells = []
        for s in strategies:
            r = by.get((m.name, s))
            cells.append("" if r is None else
                         f"{r['cost_us']:.1f} / {r['wall_s']:.2f}" if r["cost_us"] is not None else f"- / {r['wall_s']:.2f}")
        lines.append(f"| {m.name} | " + " | ".join(cells) + " |")
    lines += ["", "Why each model is there (the order that loses, and why the optimum is the least count):", ""]
    lines += [f"- `{m.name}` ({m.level}, {m.metric} >= {m.optimum}): {m.why}" for m in models]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=None, help="model names (default: all)")
    ap.add_argument("--strategies", nargs="*", default=list(STRATEGIES))
    ap.add_argument("--out", default=None, help="folder for results.json and results.md")
    args = ap.parse_args(argv)
    models = [m for m in MODELS if args.models is None or m.name in args.models]
    records = []
    for m in models:
        for s in args.strategies:
            try:
                r = run_cell(m, s)
            except Exception as exc:  # a failing cell is recorded, the run goes on
                r = dict(model=m.name, strategy=s, level=m.level, metric=m.metric, optimum=m.optimum, value=None,
                         reached=False, error=f"{type(exc).__name__}: {exc}", allclose=False, fallback=None,
                         cost_us=None, wall_s=0.0)
            records.append(r)
            print(f"{m.name:28s} {s:7s} {m.metric}={r['value']} (optimum {m.optimum}) compute={r.get('compute')} "
                  f"cost={r['cost_us']} wall={r['wall_s']:.2f}s ok={r['allclose']} {r.get('error') or r.get('fallback') or ''}",
                  flush=True)
    meta = dict(date=time.strftime("%Y-%m-%d"), torch=torch.__version__, python=sys.version.split()[0],
                machine=platform.machine(), processor=platform.processor() or platform.machine(),
                models={m.name: dict(level=m.level, metric=m.metric, optimum=m.optimum, why=m.why,
                                     options=m.options) for m in models})
    md = markdown(records, args.strategies, models, meta)
    print(md)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(dict(meta=meta, records=records), indent=1, default=str))
        (out / "results.md").write_text(md)


if __name__ == "__main__":
    main()
