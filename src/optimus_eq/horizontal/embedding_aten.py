"""Embedding lookups batched in Aten-IR (post-grad): ``batch_aten_embedding``.

AOTAutograd splits an ``nn.Embedding`` lookup into ``aten.embedding(W, ids)`` in the forward graph and its
backward in the backward graph; the two graphs pass through the post-grad pass separately. The forward
lookups are batched here, with only aten ops (Inductor lowers the post-grad graph op by op)::

    y_i = aten.embedding(W_i, ids_i)                         (W_i: [R_i, D])
        =>  Y = aten.embedding(cat(W_i), cat(ids_i.view(-1) + S_i));  y_i = rows of Y, viewed as ids_i.shape + [D]

``S_i`` is table i's first row in the concatenation; the fused lookup reads the same rows (exact). The
forward ignores ``padding_idx`` and ``sparse`` (they only steer the backward), so every forward lookup of
one embedding dim, dtype and device groups.

Not batched post-grad (docs/DESIGN.md, "Embedding lookups"):

* the backward: Inductor's decompositions turn ``aten.embedding_dense_backward`` into a zero fill, a mask
  and ``aten._unsafe_masked_index_put_accumulate`` per table before any post-grad pass runs, so the
  post-grad graph holds no embedding backward to batch (a pattern on the index_put would be a new one);
* ``aten._embedding_bag``: it returns a tuple (output, offset2bag, bag_size, max_indices) whose last three
  the backward graph reads, and whose shapes differ between the meta kernel and the CPU kernel (sum mode
  on CPU: an empty offset2bag and a max_indices of one entry per bag; meta: the other way round), so a
  rewrite of those saved tensors cannot be stated from the graph's meta. The pre-grad bag
  pattern batches forward and backward in one (AOTAutograd derives the fused backward).
* symbolic sizes (the fused ids are a ``cat`` whose pieces would have symbolic lengths), tables other
  than 2-D.
"""

from __future__ import annotations

import torch

from optimus_eq.horizontal.recipes import recipe, slots, union_row_blocks
from optimus_eq.registry import HorizontalPattern
from optimus_eq.symbolic import is_static

aten = torch.ops.aten


def _aten_call(m, target):
    """The recipe of member ``m`` when it calls the OpOverload ``target``; ValueError otherwise."""
    r = m.recipe
    if m.op != "Apply" or r.op != "call_function" or r.target is not target:
        raise ValueError("another op")
    return r


def _static(m) -> None:
    if any(s is None or not is_static(s) for s in (m.shape, *m.in_shapes)):
        raise ValueError("unknown or symbolic sizes")


# -- forward: aten.embedding -------------------------------------------------------------------------

def _forward_parts(m) -> int:
    """The embedding dim of an ``aten.embedding(W, ids, ...)`` member, or ValueError."""
    r = _aten_call(m, aten.embedding.default)
    _static(m)
    if r.kwargs or len(r.args) < 2 or r.args[:2] != slots(2):
        raise ValueError("spelling")
    ws, xs = m.in_shapes[0], m.in_shapes[1]
    if len(ws) != 2 or tuple(m.shape) != tuple(xs) + (ws[1],):
        raise ValueError("shapes")
    if 0 in m.shape:  # an empty result (embedding.py's _bag_parts says why)
        raise ValueError("empty")
    return ws[1]


def aten_embedding_key(m):
    """batch_aten_embedding: same embedding dim, dtypes and devices (ids of any shape, tables of any rows)."""
    if m.is_output and not m.eager_contiguous:
        return None
    try:
        dim = _forward_parts(m)
    except ValueError:
        return None
    return ("batch_aten_embedding", dim, m.types)


aten_embedding_key.any_strides = True  # see optimus_eq.horizontal.embedding.embedding_key


def _row_starts(rows: list) -> list:
    return [sum(rows[:i]) for i in range(len(rows))]


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _shifted_ids(w, members, x: int, starts: list, types) -> tuple[int, int]:
    """``cat(ids_i.view(-1) + S_i)`` in aten ops: the handle and its length. Inductor fuses the adds into
    the cat's one kernel."""
    pieces, total = [], 0
    for m, s in zip(members, starts):
        xs = tuple(m.in_shapes[x])
        n = _numel(xs)
        h = w.handle(m.inputs[x])
        if xs != (n,):
            h = w.reshape(h, (n,))
        if s:
            h = w.apply(w.key(f"aten.add{s}", recipe("add", aten.add.Tensor, (slots(1)[0], s)), ((types,), types)),
                        [h], (n,))
        pieces.append(h)
        total += n
    return w.cat(pieces, 0, (total,)), total


def build_aten_embedding(w, members) -> None:
    """``Y = aten.embedding(cat(W_i), cat(ids_i.view(-1) + S_i))``; member i is its rows, viewed back."""
    m0 = members[0]
    dim = _forward_parts(m0)
    (t_w, t_x), t_out = m0.types
    rows = [m.in_shapes[0][0] for m in members]
    starts = _row_starts(rows)
    W = w.cat([w.handle(m.inputs[0]) for m in members], 0, (sum(rows), dim))
    ids, total = _shifted_ids(w, members, 1, starts, t_x)
    key = w.key("aten.embedding", recipe("embedding", aten.embedding.default, slots(2)), ((t_w, t_x), t_out))
    Y = w.apply(key, [W, ids], (total, dim))
    shapes = [tuple(m.shape) for m in members]
    union_row_blocks(w, Y, members, shapes, [_numel(s[:-1]) for s in shapes], total, dim)


batch_aten_embedding = HorizontalPattern(
    name="batch_aten_embedding",
    levels=("post_grad",),
    doc="""Independent aten.embedding lookups of one embedding dim, dtype and device become one lookup into
    the row-wise cat of their tables (post-grad forward graph).

    y_i = aten.embedding(W_i, ids_i)
        =>  Y = aten.embedding(cat(W_i), cat(ids_i.view(-1) + S_i)); y_i = Y[n_i : n_i + ids_i.numel()].view(*ids_i.shape, D)
    """,
    group_key=aten_embedding_key,
    build=build_aten_embedding,
)

PATTERNS = (batch_aten_embedding,)
