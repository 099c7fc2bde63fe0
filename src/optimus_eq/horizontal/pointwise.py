"""Pointwise families (batch_tanh, batch_sigmoid, batch_relu, batch_detach, batch_nan_to_num, batch_clamp,
batch_dropout; batch_aten_*): n identical ops of equal shapes -> the op on the stack of their inputs,
``y_i = F.select(0, i)``."""

from __future__ import annotations

from optimus_eq.terms import MAX_RANK

#: Ops whose every call draws fresh random numbers: a fused call gets a key of its own (never merged).
RANDOM_OPS = frozenset(["dropout"])


def pointwise_key(names: frozenset, exclude_outputs: bool = False):
    """Group key of pointwise ops named ``names`` whose tensor inputs all have the output's shape.

    ``exclude_outputs``: leave graph outputs alone (``detach`` aliases its input in eager; a fused detach
    would not).
    """

    def key(m):
        if m.recipe.name not in names or m.shape is None or not m.inputs:
            return None
        if any(s != m.shape for s in m.in_shapes) or len(m.shape) + 1 > MAX_RANK:
            return None
        if m.op == "Apply" and len(m.inputs) != 1:
            return None
        if exclude_outputs and m.is_output:
            return None
        return ("pointwise", m.op, m.signature, m.types, m.shape)

    return key


def build_pointwise(w, members) -> None:
    m0, n = members[0], len(members)
    out = (n,) + tuple(m0.shape)
    xs = [w.stack([w.handle(m.inputs[j]) for m in members], m0.shape) for j in range(len(m0.inputs))]
    if m0.op == "Unary":
        fused = w.unary(m0.key, xs[0], out)
    elif m0.op == "Binary":
        fused = w.binary(m0.key, xs[0], xs[1], out)
    else:
        key = m0.key
        if m0.recipe.name in RANDOM_OPS:  # its own random draw: a key no other term has
            key = w.key(f"{m0.signature!r}|fused@{w.alloc.term}", m0.recipe, m0.types)
        fused = w.apply(key, xs, out)
    for i, m in enumerate(members):
        w.union(m, w.select(fused, 0, i, n, m0.shape))
