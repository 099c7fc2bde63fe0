"""Horizontal fusion of embedding lookups: ``batch_embedding_bag`` and ``batch_embedding`` (pre-grad).

Independent lookups into tables of one embedding dim (and one mode, dtype and device) become one lookup
into the row-wise concatenation of the tables, each table's ids offset by the row where its table starts
(the technique of TorchRec's fused embedding bag collection, written here for plain ``nn.EmbeddingBag`` /
``F.embedding_bag`` and ``nn.Embedding`` / ``F.embedding`` graphs as dynamo records them: a
``call_function`` whose weight is a placeholder)::

    y_i = F.embedding_bag(ids_i, W_i, offsets_i, mode=m)                 (W_i: [R_i, D])
        =>  Y = F.embedding_bag(shifted_cat(ids_i, +S_i), cat(W_i), shifted_cat(offsets_i, +N_i), mode=m)
            y_i = Y[b_i : b_i + B_i]

with ``S_i`` the row start of table i in ``cat(W_i)``, ``N_i`` the number of ids before table i's and
``b_i`` the first bag of table i in ``Y``. One forward kernel and one backward (one sort) instead of one
per table; each table's gradient is a row slice of the one gradient of ``cat(W_i)``, in the parameter's
own layout. The cat of the weights is an op of the graph: it reads the parameters on every call, so the
fused graph sees the weights an optimizer step wrote (training re-does the copy every step; the cost
model charges it).

Forms (all exact: each bag sums, averages or takes the max over the same rows in the same order):

* 2-D ids ``[B_i, L]`` (bags of L ids, no offsets): ``cat`` along dim 0 (L in the group key);
* 1-D ids with offsets (``include_last_offset`` in the group key): the offsets of table i are shifted by
  ``N_i``. Eager requires ``offsets[0] == 0`` (ATen checks it), so table i's last bag ends where table
  i + 1's first bag starts, exactly as in eager. With ``include_last_offset=True`` the fused call keeps
  every table's final offset as the start of one extra bag (``include_last_offset=False``), whose result
  is dropped: ids past a table's final offset stay out of its bags, as in eager;
* ``per_sample_weights`` (sum only) are concatenated like the ids;
* ``mode`` sum, mean and max (max is exact too: the same elements in the same order, so the same
  maximum and the same arg-max row for the backward).

``padding_idx`` (bags only): a bag leaves out its ids equal to the padding row and the padding row gets no
gradient. The fused call has one padding row, ``G = S_0 + p_0`` (table 0's); each member's ids equal to
its own ``p_i`` are mapped to ``G`` instead of shifted (``torch.where``), so the same entries are left out
of the same bags, and no table's padding row is read or gets a gradient, as in eager. (``F.embedding``
reads the padding row's values, so plain lookups with a padding_idx are left alone.) Members with and
without a padding_idx are not grouped together.

``scale_grad_by_freq`` of ``F.embedding`` (in the group key, passed on): the backward divides a row's
gradient by how often the row occurs in the call's ids; the tables' rows are disjoint in the fused table,
so each row's count is the count in its own table's ids. Not for bags: eager CPU's embedding bag backward
does not divide by the row's count (ids [[0, 0], [2, 0]]: row 0 gets 3 x 1/3, row 2 gets 1/3), so its
result depends on more than the counts, and bags with it are left alone.

Left alone (no group key): lookups with an empty result (no ids, no bags: two of them would be one empty row
block of the fused output, one e-class, and a table's gradient would be lost), ``max_norm``
(it renormalizes the weight in place; the translator keeps such calls opaque,
:func:`optimus_bridge.vocab.is_mutation`), ``sparse=True`` (sparse gradients), weights
other than 2-D or of symbolic size, and bags of 1-D ids with offsets under a symbolic batch (the offsets'
shifts would be symbolic id counts).

Symbolic sizes (a symbolic batch ``B``, :mod:`optimus_eq.symbolic`): 2-D bags and plain lookups whose
tables are static are grouped with members of the same symbolic ids shape (the group key holds it), so
the fused ids are ``n * B`` rows and member i is ``Y.view(n, B, D).select(0, i)``: no symbolic narrow
start, no sum of symbolic sizes. Static members of one shape get the same form, so a graph optimized
under a symbolic batch ends as the static one.

The shifted concatenation of ids and offsets is one op (:func:`shifted_cat`, one kernel in Inductor),
so the cost model sees one launch where Inductor emits one, not an add per table.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from optimus_eq.horizontal.recipes import bound_call, prod_sizes, slot, union_row_blocks
from optimus_eq.horizontal.recipes import recipe as _recipe
from optimus_eq.horizontal.recipes import slots as _slots
from optimus_eq.registry import HorizontalPattern
from optimus_eq.symbolic import is_static

EMBEDDING_BAG_PARAMS = ("input", "weight", "offsets", "max_norm", "norm_type", "scale_grad_by_freq", "mode",
                        "sparse", "per_sample_weights", "include_last_offset", "padding_idx")
EMBEDDING_PARAMS = ("input", "weight", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse")
MODES = ("sum", "mean", "max")


def _shift(t: torch.Tensor, s, pad, pad_to: int | None, limit=None, bad: int | None = None) -> torch.Tensor:
    """``t + s``, with the ids equal to ``pad`` mapped to ``pad_to`` instead (``pad`` None: none are), and,
    with ``limit``, every id outside ``[0, limit)`` (and not ``pad``) mapped to ``bad``: the fused table's
    row count, which the fused lookup rejects as eager rejects the id in its own table (never a neighbouring
    table's row)."""
    if pad is None or pad_to is None:
        y = t + s if not isinstance(s, int) or s else t
    else:
        y = torch.where(t == pad, pad_to, t + s)
    if limit is None:
        return y
    ok = (t >= 0) & (t < limit)
    if pad is not None:
        ok = ok | (t == pad)
    return torch.where(ok, y, bad)


def shifted_cat(tensors: list, shifts: tuple, pads: tuple | None = None, pad_to: int | None = None,
                limits: tuple | None = None, bad: int | None = None) -> torch.Tensor:
    """``torch.cat([t + s for t, s in zip(tensors, shifts)], 0)``: 1-D ids or offsets, or the 2-D ids of
    bags of one size (``[B_i, L]`` -> ``[sum B_i, L]``).

    Args:
        tensors: integer tensors of one dtype and device (ids or offsets), equal sizes past dim 0.
        shifts: one Python int per tensor, added to each of its elements (0: copied as it is).
        pads, pad_to: one padding id per tensor (or None): its elements equal to it become ``pad_to``
            instead of being shifted (the fused embedding bag's one padding row).
        limits, bad: ids only: one row count per tensor; an element outside ``[0, limit)`` becomes ``bad``
            (the fused table's row count: the fused lookup raises where eager raises, :func:`_shift`).

    Returns:
        The concatenation along dim 0 (a new tensor, never an alias), in the inputs' dtype.
    """
    pads = pads if pads is not None else (None,) * len(tensors)
    limits = limits if limits is not None else (None,) * len(tensors)
    return torch.cat([_shift(t, s, p, pad_to, lim, bad) for t, s, p, lim in zip(tensors, shifts, pads, limits)], 0)


def select_shifted_cat(x: torch.Tensor, dim: int, shifts: tuple, pads: tuple | None = None,
                       pad_to: int | None = None, start: int = 0, limits: tuple | None = None,
                       bad: int | None = None) -> torch.Tensor:
    """:func:`shifted_cat` of the consecutive selects ``x.select(dim, start + i) + shifts[i]`` for
    ``i < len(shifts)``, as one pointwise op over that slice of ``x`` (DLRM's ids ``sparse[:, f]``: one
    kernel, where a cat of many inputs is one copy kernel per input in Inductor).

    Args:
        x: integer tensor with ``x.shape[dim] >= start + len(shifts)`` (its size there may be symbolic: the
            slice is a ``narrow``, never a comparison that would guard it).
        dim: the dim the selects index.
        shifts: one Python int per select.
        pads, pad_to: as :func:`shifted_cat`.
        start: the index of the first select.
        limits, bad: as :func:`shifted_cat`.

    Returns:
        ``[len(shifts) * s0, *rest]`` where ``x.select(dim, i)`` is ``[s0, *rest]``.
    """
    y = x.movedim(dim, 0).narrow(0, start, len(shifts))
    view = (-1,) + (1,) * (y.dim() - 1)
    s = torch.tensor(shifts, dtype=x.dtype, device=x.device).view(view)
    p = None if pads is None else torch.tensor(pads, dtype=x.dtype, device=x.device).view(view)
    lim = None if limits is None else torch.tensor(limits, dtype=x.dtype, device=x.device).view(view)
    return _shift(y, s, p, pad_to, lim, bad).reshape((-1,) + tuple(y.shape[2:]))


def flat_shifted_cat(tensors: list, shifts: tuple, limits: tuple | None = None, bad: int | None = None) -> torch.Tensor:
    """:func:`shifted_cat` of every tensor flattened to 1-D (``F.embedding``'s ids of any shape); ``limits``
    and ``bad`` as there."""
    limits = limits if limits is not None else (None,) * len(tensors)
    return torch.cat([_shift(t.reshape(-1), s, None, None, lim, bad) for t, s, lim in zip(tensors, shifts, limits)], 0)


def _symbolic_rows(m, x: int, wt: int, bags: bool) -> tuple | None:
    """``(ids rows, output rows)``, the member's symbolic first dims (tokens, :mod:`optimus_eq.symbolic`),
    or None when every size is static.

    Under a symbolic batch (``torch.compile(dynamic=True)``, Dynamo's recompile) only the ids' first dim and
    the output's may be symbolic, with the ids' other dims static or symbolic (one token for every member:
    only compared) and the table static. A bag's output rows are the ids' rows, but the meta kernel spells
    them ``ceil(B * L / L)``, another expression (another token) when L is symbolic too; so both are kept.
    ValueError otherwise (such lookups are left alone)."""
    xs, ws = m.in_shapes[x], m.in_shapes[wt]
    if xs is None or ws is None or m.shape is None:
        raise ValueError("shapes")
    if all(s is None or is_static(s) for s in (m.shape, *m.in_shapes)):
        return None
    if not xs or is_static(xs[:1]) or is_static(m.shape[:1]) or not is_static(ws) \
            or not is_static(m.shape[1:]) or (not bags and m.shape[0] != xs[0]):
        raise ValueError("symbolic sizes other than the batch")
    return xs[0], m.shape[0]


def _bag_parts(m) -> dict:
    """The facts of an ``F.embedding_bag`` member that its group key and the builder need, or raise
    ValueError for a call left alone (module docstring)."""
    bound = bound_call(m, "embedding_bag", EMBEDDING_BAG_PARAMS)
    freq = bound.get("scale_grad_by_freq", False)
    if bound.get("max_norm") is not None or bound.get("sparse", False) is not False or freq is not False:
        raise ValueError("max_norm, sparse or scale_grad_by_freq")
    mode = bound.get("mode", "mean")
    last = bound.get("include_last_offset", False)
    if mode not in MODES or not isinstance(last, bool):
        raise ValueError("mode")
    x, wt = slot(bound, "input"), slot(bound, "weight")
    off, psw = slot(bound, "offsets"), slot(bound, "per_sample_weights")
    if x is None or wt is None:
        raise ValueError("no input or weight")
    xs, ws = m.in_shapes[x], m.in_shapes[wt]
    if xs is None or ws is None or len(ws) != 2 or m.shape is None or len(m.shape) != 2:
        raise ValueError("shapes")
    if 0 in m.shape:  # two empty results would be one empty row block of the fused output (one e-class), and
        raise ValueError("empty")  # one table's gradient would be lost (None where eager's is zeros)
    sym = _symbolic_rows(m, x, wt, True)
    if sym is not None and (off is not None or len(xs) != 2):
        raise ValueError("symbolic sizes: 2-D ids only")  # 1-D: offsets shifted by symbolic id counts
    if len(xs) == 2 and off is None:
        form = ("2d", xs[1])
    elif len(xs) == 1 and off is not None and m.in_shapes[off] is not None and len(m.in_shapes[off]) == 1:
        form = ("1d", last)
    else:
        raise ValueError("input form")
    if psw is not None and (mode != "sum" or m.in_shapes[psw] != xs):
        raise ValueError("per_sample_weights")
    bags = m.shape[0]
    expect = xs[0] if form[0] == "2d" else m.in_shapes[off][0] - (1 if last else 0)
    if (bags != expect and sym is None) or m.shape[1] != ws[1]:
        raise ValueError("output shape")
    pad = bound.get("padding_idx")
    if pad is not None:
        if not isinstance(pad, int) or isinstance(pad, bool) or not -ws[0] <= pad < ws[0]:
            raise ValueError("padding_idx")
        pad %= ws[0]  # F.embedding_bag's normalization of a negative index
    return {"x": x, "w": wt, "off": off, "psw": psw, "mode": mode, "form": form, "dim": ws[1], "pad": pad,
            "freq": freq, "sym": sym}


def embedding_bag_key(m):
    """batch_embedding_bag: same embedding dim, mode, input form (2-D with its bag size, or 1-D with
    offsets and its ``include_last_offset``), per_sample_weights or not, and the dtypes and devices of
    every input and of the output. Tables may have any number of rows, batches any size."""
    if m.is_output and not m.eager_contiguous:
        return None
    try:
        p = _bag_parts(m)
    except ValueError:
        return None
    return ("batch_embedding_bag", p["dim"], p["mode"], p["form"], p["off"] is not None, p["psw"] is not None,
            p["pad"] is not None, p["freq"], p["x"], p["w"], p["off"], p["psw"], p["sym"], m.types)


def _shifted(w, handles: list, shifts: list, shape, types, flat: bool = False, pads=None, pad_to=None,
             rows=None) -> int:
    """:func:`shifted_cat` (``flat``: :func:`flat_shifted_cat`) of ``handles``; ``rows`` (ids only): each
    table's row count, so that an id outside its own table is rejected by the fused lookup (:func:`_shift`)."""
    fn = flat_shifted_cat if flat else shifted_cat
    extra = () if pads is None else (tuple(pads), pad_to)
    if rows is not None:
        extra = ((tuple(rows), sum(rows)) if flat else
                 (None if pads is None else tuple(pads), pad_to, tuple(rows), sum(rows)))
    recipe = _recipe(fn.__name__, fn, (list(_slots(len(handles))), tuple(shifts)) + extra)
    t = types  # (dtype, device) of the ids (or offsets)
    key = w.key(f"{fn.__name__}{tuple(shifts)}{extra}", recipe, ((t,) * len(handles), t))
    return w.apply(key, handles, shape)


def _selects_of_one(w, members, x: int):
    """``(base class, dim, first index)`` when the members' ids (slot ``x``) are, in the plan, the selects of
    one tensor along one dim at consecutive indices ``j, j + 1, ..., j + n - 1``; else None."""
    base = None
    for i, m in enumerate(members):
        en = w.view.nodes.get(w.choice.get(m.inputs[x]))
        if en is None or en.op != "Select":
            return None
        d, j = en.literals[:2]
        if base is None:
            base = (en.children[0], d, j)
        if j != base[2] + i or base[:2] != (en.children[0], d):
            return None
    return base


def _shifted_ids(w, members, x: int, starts: list, shape, types, pads=None, pad_to=None, rows=None) -> int:
    """The members' ids, each shifted by its table's row start (and checked against its ``rows``),
    concatenated along dim 0: one :func:`select_shifted_cat` over their base when they are consecutive
    selects of one tensor, else :func:`shifted_cat`."""
    one = _selects_of_one(w, members, x)
    if one is None or len(shape) > 2:
        return _shifted(w, [w.handle(m.inputs[x]) for m in members], starts, shape, types, pads=pads, pad_to=pad_to,
                        rows=rows)
    base, d, j = one
    extra = (None if pads is None else tuple(pads), pad_to, j) + ((tuple(rows), sum(rows)) if rows is not None else ())
    recipe = _recipe("select_shifted_cat", select_shifted_cat, (_slots(1)[0], d, tuple(starts)) + extra)
    key = w.key(f"select_shifted_cat{d}{tuple(starts)}{extra}", recipe, ((types,), types))
    return w.apply(key, [w.handle(base)], shape)


def build_embedding_bag(w, members) -> None:
    """One ``F.embedding_bag`` over ``cat(W_i)`` (module docstring); member i is a narrow of its output, or,
    when every member has 2-D ids of ``B`` bags (static or symbolic), ``Y.view(n, B, D).select(0, i)``."""
    m0 = members[0]
    p = _bag_parts(m0)
    x, wt, off, psw, dim, sym = p["x"], p["w"], p["off"], p["psw"], p["dim"], p["sym"]
    last = p["form"] == ("1d", True)
    types_in, types_out = m0.types
    rows = [m.in_shapes[wt][0] for m in members]
    starts = [sum(rows[:i]) for i in range(len(rows))]
    W = w.cat([w.handle(m.inputs[wt]) for m in members], 0, (sum(rows), dim))
    xs = [tuple(m.in_shapes[x]) for m in members]
    n_ids = prod_sizes(w, (len(members), sym[0])) if sym is not None else sum(s[0] for s in xs)
    ids_shape = (n_ids,) + xs[0][1:]
    pads = [_bag_parts(m)["pad"] for m in members] if p["pad"] is not None else None
    pad_to = starts[0] + pads[0] if pads is not None else None
    args = [_shifted_ids(w, members, x, starts, ids_shape, types_in[x], pads, pad_to, rows), W]
    slots = {"input": 0, "weight": 1}
    if off is not None:
        lens = [m.in_shapes[off][0] for m in members]
        before = [sum(s[0] for s in xs[:i]) for i in range(len(xs))]
        args.append(_shifted(w, [w.handle(m.inputs[off]) for m in members], before, (sum(lens),), types_in[off]))
        slots["offsets"] = len(args) - 1
        bags = lens  # with include_last_offset, one extra bag per table (dropped below)
    else:
        bags = [s[0] for s in xs]
    if psw is not None:
        args.append(w.cat([w.handle(m.inputs[psw]) for m in members], 0, ids_shape))
        slots["per_sample_weights"] = len(args) - 1
    marker = _slots(len(args))
    kwargs = {"offsets": marker[slots["offsets"]] if "offsets" in slots else None, "mode": p["mode"],
              "per_sample_weights": marker[slots["per_sample_weights"]] if "per_sample_weights" in slots else None,
              "include_last_offset": False, "padding_idx": pad_to}
    recipe = _recipe("embedding_bag", F.embedding_bag, marker[:2], kwargs)
    arg_types = tuple(types_in[i] for i in [x, wt] + ([off] if off is not None else []) + ([psw] if psw is not None else []))
    key = w.key(f"batch_embedding_bag:{p['mode']}:{sorted(slots)}:{pad_to}", recipe, (arg_types, types_out))
    total = n_ids if sym is not None else sum(bags)
    Y = w.apply(key, args, (total, dim))
    outs = {m.shape[0] for m in members}
    if p["form"][0] == "2d" and len(outs) == 1:  # one batch: static and symbolic graphs get one form
        _select_rows(w, members, Y, outs.pop(), dim)
        return
    start = 0
    for m, b in zip(members, bags):
        own = b - 1 if last else b
        w.union(m, w.narrow(Y, 0, start, own, total, (own, dim)))
        start += b


def _select_rows(w, members, Y: int, rows: int, dim: int) -> None:
    """Member i is ``Y.view(n, rows, dim).select(0, i)``: the row slices of the fused output when every member
    has ``rows`` bags. Under a symbolic batch ``rows`` is a token, and a narrow's start ``i * rows`` would be
    symbolic (the algebra keeps starts static); the static graph gets the same form, so both are rewritten
    by the same rules."""
    n = len(members)
    R = w.reshape(Y, (n, rows, dim))
    for i, m in enumerate(members):
        w.union(m, w.select(R, 0, i, n, (rows, dim)))


# -- F.embedding ---------------------------------------------------------------------------------------

def _embedding_parts(m) -> tuple[int, int, int, bool, bool]:
    """``(ids slot, weight slot, dim, scale_grad_by_freq, symbolic ids?)`` of an ``F.embedding`` member, or
    raise ValueError. The ids' sizes may be symbolic (the batch), the table's may not."""
    bound = bound_call(m, "embedding", EMBEDDING_PARAMS)
    freq = bound.get("scale_grad_by_freq", False)
    if bound.get("max_norm") is not None or bound.get("sparse", False) is not False \
            or not isinstance(freq, bool) or bound.get("padding_idx") is not None:
        raise ValueError("max_norm, sparse or padding_idx")
    x, wt = slot(bound, "input"), slot(bound, "weight")
    if x is None or wt is None:
        raise ValueError("no input or weight")
    xs, ws = m.in_shapes[x], m.in_shapes[wt]
    if xs is None or ws is None or len(ws) != 2 or m.shape != tuple(xs) + (ws[1],) or not is_static(ws):
        raise ValueError("shapes")
    if 0 in m.shape:  # an empty result: see _bag_parts
        raise ValueError("empty")
    return x, wt, ws[1], freq, not is_static(xs)


def embedding_key(m):
    """batch_embedding: same embedding dim and the dtypes and devices of ids, weight and output; ids of
    any shape, tables of any number of rows."""
    if m.is_output and not m.eager_contiguous:
        return None
    try:
        x, wt, dim, freq, sym = _embedding_parts(m)
    except ValueError:
        return None
    # under a symbolic batch the members share the ids' shape (their counts are not added)
    return ("batch_embedding", dim, freq, x, wt, tuple(m.in_shapes[x]) if sym else None, m.types)


# A lookup's value is a new contiguous tensor in eager, and so is each member's row slice of the fused
# output: where the member's e-class holds a non-contiguous FX node too (DLRM's KeyedTensor: the bag is
# equal to its column slice of the pooled cat, by the split-of-cat rule), the plan already reads the bag, with
# the bag's strides (``any_strides`` below). Graph outputs of such classes are still left alone.


def build_embedding(w, members) -> None:
    """``Y = F.embedding(flat_shifted_cat(ids_i, +S_i), cat(W_i))``; member i is
    ``Y[n_i : n_i + numel(ids_i)].reshape(*ids_i.shape, D)`` (a view: rows of a contiguous Y), or, when every
    member's ids have one shape ``s`` (static or symbolic), ``Y.view(n, *s, D).select(0, i)``."""
    m0 = members[0]
    x, wt, dim, freq, sym = _embedding_parts(m0)
    types_in, types_out = m0.types
    rows = [m.in_shapes[wt][0] for m in members]
    starts = [sum(rows[:i]) for i in range(len(rows))]
    W = w.cat([w.handle(m.inputs[wt]) for m in members], 0, (sum(rows), dim))
    shapes = [tuple(m.in_shapes[x]) for m in members]
    counts = [prod_sizes(w, s) for s in shapes]
    one = len(set(shapes)) == 1
    total = prod_sizes(w, (len(members), counts[0])) if one else sum(counts)
    ids = _shifted(w, [w.handle(m.inputs[x]) for m in members], starts, (total,), types_in[x], flat=True, rows=rows)
    recipe = _recipe("embedding", F.embedding, (_slots(2)), {"scale_grad_by_freq": True} if freq else {})
    key = w.key(f"batch_embedding:{freq}", recipe, ((types_in[x], types_in[wt]), types_out))
    Y = w.apply(key, [ids, W], (total, dim))
    if one:
        shape = shapes[0] + (dim,)
        R = w.reshape(Y, (len(members),) + shape)
        for i, m in enumerate(members):
            w.union(m, w.select(R, 0, i, len(members), shape))
        return
    union_row_blocks(w, Y, members, [tuple(m.in_shapes[x]) + (dim,) for m in members], counts, total, dim)


batch_embedding_bag = HorizontalPattern(
    name="batch_embedding_bag",
    levels=("pre_grad",),
    doc="""Independent embedding bags of one embedding dim, mode, input form, dtype and device become one
    embedding bag over the row-wise cat of their tables (ids offset by each table's row start).

    y_i = F.embedding_bag(ids_i, W_i, offsets_i, mode=m, per_sample_weights=p_i)
        =>  Y = F.embedding_bag(cat(ids_i + S_i), cat(W_i), cat(offsets_i + N_i), mode=m,
                                per_sample_weights=cat(p_i)); y_i = Y[b_i : b_i + B_i]
    (2-D ids [B_i, L] without offsets: cat along dim 0; with padding_idx p_i, ids equal to p_i map to the
    one padding row S_0 + p_0; max_norm, sparse and scale_grad_by_freq are left alone)
    """,
    group_key=embedding_bag_key,
    build=build_embedding_bag,
    any_strides=True,  # see build_embedding
    batches=("embedding_bag",),
)

batch_embedding = HorizontalPattern(
    name="batch_embedding",
    levels=("pre_grad",),
    doc="""Independent embedding lookups of one embedding dim, dtype and device become one lookup into the
    row-wise cat of their tables.

    y_i = F.embedding(ids_i, W_i)        (W_i: [R_i, D], ids_i of any shape)
        =>  Y = F.embedding(cat(ids_i.flatten() + S_i), cat(W_i)); y_i = Y[n_i : n_i + ids_i.numel()].view(*ids_i.shape, D)
    (max_norm, sparse and padding_idx are left alone)
    """,
    group_key=embedding_key,
    build=build_embedding,
    any_strides=True,
    batches=("embedding",),
)

PATTERNS = (batch_embedding_bag, batch_embedding)
