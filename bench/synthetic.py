"""Synthetic recommendation-style torch.fx graphs of a requested size.

The graphs imitate what dynamo captures from a DLRM-like "interaction tower":
a dense activation x of shape [B, N*D] (N fields of width D) goes through
`layers` blocks; each block splits x into its N field slices, applies a
pointwise op per field, concatenates the slices back (in one of several
junk-rich ways) and adds a residual.  Variants, chosen by layer index i:

* i % 4 == 0  plain ``cat(ys, 1)`` in field order;
* i % 4 == 1  ``cat`` with the first few fields permuted (pairwise swaps);
* i % 4 == 2  ``cat`` -> ``view(-1, N, D)`` -> ``unbind(1)`` -> ``stack(1)``
  -> ``view(-1, N*D)`` (stack-of-unbind junk);
* i % 4 == 3  sub-range cats: ``cat([cat(ys[:k]), cat(ys[k:])])`` (nested cat)
  where fields ``[k1, k2)`` are passed through untouched, so
  ``cat(split(x)[k1:k2])`` is a plain slice of x.

An embedding lookup ``F.embedding(ids, W)`` added to the input (a pure op since
batch_embedding; one lookup, nothing to batch) and, opaque (out of the
vocabulary), a per-field ``torch.cumsum`` on field 0 every fifth layer.  The residual is ``(h + x) * 0.5`` which keeps magnitudes bounded over
hundreds of layers.  Like a dynamo graph, ``gm(*inputs)`` returns a 1-tuple.

The graph is built directly with :class:`torch.fx.Graph` (no tracing), so a
50k-node graph takes about a second.  Inputs (like a dynamo graph with inlined
nn modules, the embedding weight is a placeholder):

* ``x``   float32 [B, N*D]
* ``ids`` int64   [B]          values in [0, V)
* ``W``   float32 [V, N*D]     embedding table, V = 32
"""

from __future__ import annotations

import math
import operator
import time

import torch
import torch.fx as fx
import torch.nn.functional as F

VOCAB = 32  # embedding table rows

# per-field pointwise ops: (field j, layer i) -> _FIELD_OPS[(i + j) % 4]
_FIELD_OPS = ("tanh", "relu", "sigmoid", "mul")


def _field_op(g: fx.Graph, kind: str, y: fx.Node) -> fx.Node:
    """Emit one per-field pointwise op on y ([B, D]) the way dynamo would."""
    if kind == "tanh":
        return g.call_function(torch.tanh, (y,))
    if kind == "relu":
        return g.call_function(torch.relu, (y,))
    if kind == "sigmoid":
        return g.call_function(torch.sigmoid, (y,))
    return g.call_function(operator.mul, (y, 0.5))


def build_rec_fx_graph(num_fields: int, layers: int, dim: int = 4) -> fx.Graph:
    """Build the bare fx.Graph (no GraphModule, no meta). See module docstring."""
    n, d = num_fields, dim
    g = fx.Graph()
    x = g.placeholder("x")
    ids = g.placeholder("ids")
    w = g.placeholder("emb_weight")
    e = g.call_function(F.embedding, (ids, w))  # [B, N*D]
    x = g.call_function(operator.add, (x, e))

    for i in range(layers):
        v = i % 4
        sp = g.call_function(torch.split, (x, d), {"dim": 1})
        parts = [g.call_function(operator.getitem, (sp, j)) for j in range(n)]

        # sub-range variant: fields [k1, k2) pass through untouched
        k1, k2 = n // 4, n // 2
        ys = []
        for j, p in enumerate(parts):
            if v == 3 and k1 <= j < k2:
                ys.append(p)
            elif j == 0 and i % 5 == 4:  # opaque per-field op, mean-scaled
                c = g.call_function(torch.cumsum, (p,), {"dim": 1})
                ys.append(g.call_function(operator.mul, (c, 1.0 / d)))
            else:
                ys.append(_field_op(g, _FIELD_OPS[(i + j) % 4], p))

        if v == 0:
            h = g.call_function(torch.cat, (ys,), {"dim": 1})
        elif v == 1:
            perm = list(range(n))
            for a in range(0, min(n, 8) - 1, 2):  # swap pairs among first 8
                perm[a], perm[a + 1] = perm[a + 1], perm[a]
            h = g.call_function(torch.cat, ([ys[j] for j in perm],), {"dim": 1})
        elif v == 2:
            c = g.call_function(torch.cat, (ys,), {"dim": 1})
            c3 = g.call_method("view", (c, -1, n, d))  # [B, N, D]
            ub = g.call_function(torch.unbind, (c3,), {"dim": 1})
            pieces = [g.call_function(operator.getitem, (ub, j)) for j in range(n)]
            st = g.call_function(torch.stack, (pieces,), {"dim": 1})
            h = g.call_method("view", (st, -1, n * d))
        else:
            k = n // 2
            a = g.call_function(torch.cat, (ys[:k],), {"dim": 1})
            b = g.call_function(torch.cat, (ys[k:],), {"dim": 1})
            h = g.call_function(torch.cat, ([a, b],), {"dim": 1})

        r = g.call_function(operator.add, (h, x))
        x = g.call_function(operator.mul, (r, 0.5))

    g.output((x,))  # dynamo graphs return a tuple
    return g


def build_tangle_fx_graph(num_fields: int, rounds: int, dim: int = 4) -> fx.Graph:
    """A split/cat tangle: per round, x [B, N*D] is split into N fields, a pointwise op runs per field, the
    fields are concatenated in a shuffled order, viewed to [B, N, D], unbound, a second pointwise op runs per
    field, the pieces are stacked in reverse order and viewed back, split into N/2 double-width pieces that
    are concatenated in yet another order, and a residual closes the round (about 5 FX nodes per field and
    round: 64 fields x 6 rounds is about 2k nodes). Every junk op has several equivalent spellings in the
    e-graph, so extraction has thousands of real choices. Inputs as :func:`make_inputs`."""
    n, d = num_fields, dim
    g = fx.Graph()
    x = g.placeholder("x")
    ids = g.placeholder("ids")
    w = g.placeholder("emb_weight")
    x = g.call_function(operator.add, (x, g.call_function(F.embedding, (ids, w))))
    for i in range(rounds):
        sp = g.call_function(torch.split, (x, d), {"dim": 1})
        ys = [_field_op(g, _FIELD_OPS[(i + j) % 4], g.call_function(operator.getitem, (sp, j))) for j in range(n)]
        perm = [(j * 5 + i) % n for j in range(n)] if n % 5 else list(range(n))
        c = g.call_function(torch.cat, ([ys[j] for j in perm],), {"dim": 1})
        ub = g.call_function(torch.unbind, (g.call_method("view", (c, -1, n, d)),), {"dim": 1})
        zs = [_field_op(g, _FIELD_OPS[(i + j + 1) % 4], g.call_function(operator.getitem, (ub, j))) for j in range(n)]
        st = g.call_method("view", (g.call_function(torch.stack, (zs[::-1],), {"dim": 1}), -1, n * d))
        sp2 = g.call_function(torch.split, (st, 2 * d), {"dim": 1})
        halves = [g.call_function(operator.getitem, (sp2, j)) for j in range(max(1, n // 2))]
        h = g.call_function(torch.cat, (halves[1::2] + halves[0::2],), {"dim": 1})
        x = g.call_function(operator.mul, (g.call_function(operator.add, (h, x)), 0.5))
    g.output((x,))
    return g


def make_tangle_graph(num_fields: int, rounds: int, dim: int = 4, batch: int = 8
                      ) -> tuple[fx.GraphModule, list[torch.Tensor]]:
    """(gm, example_inputs) of :func:`build_tangle_fx_graph`, with FakeTensor meta."""
    gm = fx.GraphModule(torch.nn.Module(), build_tangle_fx_graph(num_fields, rounds, dim))
    inputs = make_inputs(num_fields, dim, batch)
    add_fake_meta(gm, inputs)
    return gm, inputs


def tangle_of_size(target_nodes: int) -> tuple[int, int]:
    """``(fields, rounds)`` of a split/cat tangle with about ``target_nodes`` FX nodes: 64 fields up to 2k
    nodes, 128 up to 8k, then 512 (the 20k tangle of issue 9 is 512 x 8), rounds to fill the size."""
    n = 64 if target_nodes <= 2_000 else 128 if target_nodes <= 8_000 else 512
    base = len(build_tangle_fx_graph(n, 0).nodes)
    per = len(build_tangle_fx_graph(n, 1).nodes) - base
    return n, max(1, round((target_nodes - base) / per))


def build_branches_fx_graph(branches: int, layers: int, dim: int = 8) -> fx.Graph:
    """Hundreds of parallel per-field arches, as dynamo captures the launch-bound bench model
    (``optimus_bench.models.launch_bound``, its parameters inlined as placeholders): per layer, x [B, N*D]
    is split into N fields, each runs ``layer_norm -> linear -> activation`` with its own parameters (four
    placeholders per field), the results are stacked to [B, N, D], unbound and concatenated back, and a
    residual closes the layer; a linear head ends the graph. About 9 FX nodes per field and layer. Inputs:
    x, then per layer and field the LayerNorm weight and bias and the Linear weight and bias, then the
    head's weight and bias (:func:`make_branches_inputs`)."""
    n, d = branches, dim
    acts = (torch.relu, torch.tanh, torch.sigmoid)
    g = fx.Graph()
    x = g.placeholder("x")
    params = [[[g.placeholder(f"p{i}_{j}_{k}") for k in range(4)] for j in range(n)] for i in range(layers)]
    hw, hb = g.placeholder("head_w"), g.placeholder("head_b")
    for i in range(layers):
        sp = g.call_function(torch.split, (x, d), {"dim": 1})
        ys = []
        for j in range(n):
            lw, lb, w, b = params[i][j]
            p = g.call_function(operator.getitem, (sp, j))
            ln = g.call_function(F.layer_norm, (p, (d,), lw, lb, 1e-5))
            ys.append(g.call_function(acts[i % 3], (g.call_function(F.linear, (ln, w, b)),)))
        st = g.call_function(torch.stack, (ys,), {"dim": 1})
        ub = g.call_function(torch.unbind, (st,), {"dim": 1})
        parts = [g.call_function(operator.getitem, (ub, j)) for j in range(n)]
        x = g.call_function(operator.add, (g.call_function(torch.cat, (parts,), {"dim": 1}), x))
    g.output((g.call_function(F.linear, (x, hw, hb)),))
    return g


def branches_of_size(target_nodes: int) -> tuple[int, int]:
    """``(branches, layers)`` of :func:`build_branches_fx_graph` with about ``target_nodes`` FX nodes:
    128 branches up to 2k nodes, 256 up to 8k, then 512; layers to fill the size."""
    n = 128 if target_nodes <= 2_000 else 256 if target_nodes <= 8_000 else 512
    base = len(build_branches_fx_graph(n, 0).nodes)
    per = len(build_branches_fx_graph(n, 1).nodes) - base
    return n, max(1, round((target_nodes - base) / per))


def make_branches_graph(branches: int, layers: int, dim: int = 8, batch: int = 16, seed: int = 0
                        ) -> tuple[fx.GraphModule, list[torch.Tensor]]:
    """(gm, example_inputs) of :func:`build_branches_fx_graph` with FakeTensor meta; parameters are drawn
    like nn.LayerNorm's (ones, zeros) and nn.Linear's (uniform in +-1/sqrt(dim))."""
    gm = fx.GraphModule(torch.nn.Module(), build_branches_fx_graph(branches, layers, dim))
    gen = torch.Generator().manual_seed(seed)
    bound = dim ** -0.5
    inputs = [torch.randn(batch, branches * dim, generator=gen)]
    for _ in range(layers * branches):
        inputs += [torch.ones(dim), torch.zeros(dim), (torch.rand(dim, dim, generator=gen) * 2 - 1) * bound,
                   (torch.rand(dim, generator=gen) * 2 - 1) * bound]
    inputs += [(torch.rand(1, branches * dim, generator=gen) * 2 - 1) * (branches * dim) ** -0.5, torch.zeros(1)]
    add_fake_meta(gm, inputs)
    return gm, inputs


def make_inputs(num_fields: int, dim: int = 4, batch: int = 8, seed: int = 0) -> list[torch.Tensor]:
    """Example inputs [x [B,N*D] f32, ids [B] i64, W [VOCAB,N*D] f32]."""
    gen = torch.Generator().manual_seed(seed)
    nd = num_fields * dim
    return [
        torch.randn(batch, nd, generator=gen),
        torch.randint(0, VOCAB, (batch,), generator=gen),
        torch.randn(VOCAB, nd, generator=gen) * 0.1,
    ]


def add_fake_meta(gm: fx.GraphModule, example_inputs: list[torch.Tensor]) -> None:
    """Fill node.meta['val'] and ['example_value'] with FakeTensors (as dynamo does)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = FakeTensorMode()
    fakes = [mode.from_tensor(t) for t in example_inputs]
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fakes)
    for node in gm.graph.nodes:
        if "val" in node.meta:
            node.meta["example_value"] = node.meta["val"]


def make_rec_graph(
    num_fields: int, layers: int, dim: int = 4, batch: int = 8, fake: bool = True
) -> tuple[fx.GraphModule, list[torch.Tensor]]:
    """Return (gm, example_inputs) for the synthetic rec graph.

    ``fake=True`` also fills FakeTensor meta (slow at 50k nodes: see
    ``make_graph_of_size`` which times it separately).
    """
    gm = fx.GraphModule(torch.nn.Module(), build_rec_fx_graph(num_fields, layers, dim))
    inputs = make_inputs(num_fields, dim, batch)
    if fake:
        add_fake_meta(gm, inputs)
    return gm, inputs


def fields_for_size(target_nodes: int) -> int:
    """Field count N grows with sqrt(size): 1k->16, 5k->32, 20k->64, 50k->128."""
    return min(128, max(8, 2 ** round(math.log2(math.sqrt(target_nodes) / 2))))


def nodes_per_layer(num_fields: int, dim: int = 4) -> tuple[int, float]:
    """(fixed overhead, average nodes per layer) measured on a 20-layer probe (the variant period)."""
    base = len(build_rec_fx_graph(num_fields, 0, dim).nodes)
    probe = len(build_rec_fx_graph(num_fields, 20, dim).nodes)
    return base, (probe - base) / 20


def make_graph_of_size(
    target_nodes: int, dim: int = 4, batch: int = 8, fake: bool = True
) -> tuple[fx.GraphModule, list[torch.Tensor], dict]:
    """Pick num_fields/layers so the graph has about target_nodes FX nodes.

    Returns (gm, example_inputs, meta) where meta has num_fields, layers, dim,
    batch, nodes, build_s (fx.Graph + GraphModule codegen, seconds) and
    fake_prop_s (FakeTensorProp, seconds; None if fake=False).
    """
    n = fields_for_size(target_nodes)
    base, per = nodes_per_layer(n, dim)
    layers = max(1, round((target_nodes - base) / per))
    t0 = time.perf_counter()
    gm, inputs = make_rec_graph(n, layers, dim, batch, fake=False)
    build_s = time.perf_counter() - t0
    fake_s = None
    if fake:
        t0 = time.perf_counter()
        add_fake_meta(gm, inputs)
        fake_s = time.perf_counter() - t0
    meta = dict(
        target_nodes=target_nodes, num_fields=n, layers=layers, dim=dim, batch=batch,
        nodes=len(gm.graph.nodes), build_s=build_s, fake_prop_s=fake_s,
    )
    return gm, inputs, meta


def reference_forward(num_fields: int, layers: int, dim: int, inputs: list[torch.Tensor]) -> torch.Tensor:
    """Plain-PyTorch loop computing the same function, to check the FX graph."""
    x, ids, w = inputs
    n, d = num_fields, dim
    x = x + F.embedding(ids, w)
    ops = {"tanh": torch.tanh, "relu": torch.relu, "sigmoid": torch.sigmoid, "mul": lambda t: t * 0.5}
    for i in range(layers):
        parts = torch.split(x, d, dim=1)
        ys = []
        for j, p in enumerate(parts):
            if i % 4 == 3 and n // 4 <= j < n // 2:
                ys.append(p)
            elif j == 0 and i % 5 == 4:
                ys.append(torch.cumsum(p, dim=1) * (1.0 / d))
            else:
                ys.append(ops[_FIELD_OPS[(i + j) % 4]](p))
        if i % 4 == 1:
            perm = list(range(n))
            for a in range(0, min(n, 8) - 1, 2):
                perm[a], perm[a + 1] = perm[a + 1], perm[a]
            ys = [ys[j] for j in perm]
        h = torch.cat(ys, dim=1)
        x = (h + x) * 0.5
    return x


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 20000, 50000])
    args = ap.parse_args()
    for size in args.sizes:
        gm, inputs, meta = make_graph_of_size(size)
        t0 = time.perf_counter()
        (out,) = gm(*inputs)
        run_s = time.perf_counter() - t0
        ref = reference_forward(meta["num_fields"], meta["layers"], meta["dim"], inputs)
        ok = torch.equal(out, ref) and bool(torch.isfinite(out).all())
        print(f"{meta} eager_s={run_s:.3f} matches_reference={ok} absmax={out.abs().max():.3g}")
