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

STRATEGIES = ("none", "greedy", "taso", "tensat", "eqsat")

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


def count(ops, metric: str) -> int:
    if metric == "compute":
        return compute_ops(ops)
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


def split_relu_cat_small_groups(x):
    ps = torch.split(x, 8, dim=1)
    return torch.cat([torch.relu(p) for p in ps], dim=1) * 3


def fields_inputs():
    return [_r(32, 48)]


def three_wide_sigmoids(x, y, z):
    # three tensors, each split in two, a sigmoid per piece, pieces read apart: vertical folds give three
    # wide sigmoids (a group of three, below the minimum); the six pieces batch into one sigmoid
    ps = torch.split(x, 8, dim=1) + torch.split(y, 8, dim=1) + torch.split(z, 8, dim=1)
    return [torch.sigmoid(t) + i for i, t in enumerate(ps)]


def three_wide_inputs():
    return [_r(16, 16, seed=0), _r(16, 16, seed=1), _r(16, 16, seed=2)]


def unbind_stack_split_cat(x):
    y = torch.stack(torch.unbind(x, 1), 1) + 1
    a, b, c = torch.split(y.flatten(1), [4, 6, 10], 1)
    return torch.cat([a, b, c], 1).relu()


def views_and_chains(x):
    h = torch.stack(torch.unbind(x.view(-1, 2, 4), 1), 1).view(-1, 8)
    a, b = torch.split(torch.tanh(h) + x, 4, 1)
    a1, a2 = torch.split(a, 2, 1)
    return torch.cat([a1, a2, b], 1)


def rec_block(x):
    # a DLRM-like interaction tower, two layers: per-field pointwise ops between split and cat, a residual
    h = x
    for layer in range(2):
        ps = torch.split(h, 8, dim=1)
        ys = [torch.tanh(p) if layer == 0 else torch.sigmoid(p) for p in ps]
        h = (torch.cat(ys, dim=1) + h) * 0.5
    return h


def rec_inputs():
    return [_r(64, 8 * 12)]


def mixed_pieces_and_inputs(x, a, b, c, d):
    # the mid-size version of issue 15's case: two layers, pieces of a split next to separate inputs
    p = list(torch.split(x, 8, dim=1))
    ts = [torch.tanh(t) for t in p + [a, b, c, d]]
    ss = [torch.sigmoid(t * 2) for t in ts]
    return torch.cat(ss[:3], dim=1), ss[3:]


def mixed_inputs():
    return [_r(16, 24, seed=0)] + [_r(16, 8, seed=i) for i in range(1, 5)]


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
    Model("split_relu_cat_min2", split_relu_cat_small_groups, fields_inputs, "compute", 2,
          "six field slices -> relu -> cat -> * 3 with min_fuse_set_size 2: a batch fusion before the "
          "split/cat passes; optimum relu(x) * 3",
          options={"pattern_options": {"batch_relu": {"min_fuse_set_size": 2}}}),
    Model("three_wide_sigmoids", three_wide_sigmoids, three_wide_inputs, "sigmoid", 1,
          "three tensors split in two, a sigmoid per piece, pieces read apart: folding first gives three "
          "wide sigmoids (a group of three, below min_fuse_set_size 5); the six pieces batch into one "
          "sigmoid (and one stack copy: 2 kernels against 3)"),
    Model("unbind_stack_split_cat", unbind_stack_split_cat, lambda: [_r(3, 4, 5)], "junk", 0,
          "unbind/stack then split/cat (tests/test_taso.py): in greedy's order a stack is merged before "
          "the split it feeds is folded; no split or cat is needed"),
    Model("views_and_chains", views_and_chains, lambda: [_r(6, 8)], "junk", 0,
          "unbind/stack of a view, then a split of a split folded into a cat (tests/test_taso.py): no "
          "split or cat is needed"),
    Model("rec_block_2layers", rec_block, rec_inputs, "compute", 6,
          "control: two split -> per-field op -> cat layers with residuals (12 fields); every order folds "
          "them: per layer one wide op, the residual add and the scale (6 calls)"),
    Model("mixed_pieces_and_inputs", mixed_pieces_and_inputs, mixed_inputs, "tanh", 1,
          "seven [16, 8] tanhs (three on split pieces, four inputs), then mul and sigmoid per value, three "
          "of them concatenated back: one tanh"),
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


def run_cell(model: Model, strategy: str) -> dict:
    """Optimize ``model`` with ``strategy``; its count, cost, time, and agreement with the original graph."""
    gm, example_inputs, inputs = graph_of(model)
    # AOTAutograd hands its compiler FakeTensors: run both graphs on the real inputs (the same placeholders
    # for a model without parameters)
    run_inputs = example_inputs if model.level == "pre_grad" else inputs
    with torch.no_grad():
        expected = _flat(gm(*run_inputs))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        gm2, report = optimus_eq.optimize(gm, example_inputs, strategy=strategy, level=model.level,
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


def markdown(records: list[dict], strategies, models) -> str:
    by = {(r["model"], r["strategy"]): r for r in records}
    lines = ["| model | level | metric | optimum | " + " | ".join(strategies) + " |",
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
    md = markdown(records, args.strategies, models)
    print(md)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        meta = dict(date=time.strftime("%Y-%m-%d"), torch=torch.__version__, python=sys.version.split()[0],
                    machine=platform.machine(), processor=platform.processor() or platform.machine(),
                    models={m.name: dict(level=m.level, metric=m.metric, optimum=m.optimum, why=m.why,
                                         options=m.options) for m in models})
        (out / "results.json").write_text(json.dumps(dict(meta=meta, records=records), indent=1, default=str))
        (out / "results.md").write_text(md)


if __name__ == "__main__":
    main()
