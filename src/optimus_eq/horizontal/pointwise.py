"""Pointwise families (batch_tanh, batch_sigmoid, batch_relu, batch_detach, batch_nan_to_num, batch_clamp,
batch_dropout; batch_aten_*): n identical ops of equal shapes -> the op on the stack of their inputs,
``y_i = F.select(0, i)``."""

from __future__ import annotations

from optimus_eq.terms import MAX_RANK
from optimus_eq.registry import HorizontalPattern, horizontal

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


def _pointwise(name: str, op: str, doc: str, exclude_outputs: bool = False,
               level: str = "pre_grad") -> HorizontalPattern:
    """The batched ``op`` at ``level``, under the built-in's pass name ``name``."""
    return horizontal(name, (level,), pointwise_key(frozenset([op]), exclude_outputs), build_pointwise, doc,
                      builtin=(level,))


batch_tanh = _pointwise("batch_tanh", "tanh", """Independent tanh of equal shapes become one.

    torch.tanh(a), torch.tanh(b)  =>  t = torch.tanh(torch.stack([a, b])); t[0], t[1]
    """)
batch_sigmoid = _pointwise("batch_sigmoid", "sigmoid", """Independent sigmoids of equal shapes become one.

    torch.sigmoid(a), torch.sigmoid(b)  =>  s = torch.sigmoid(torch.stack([a, b])); s[0], s[1]
    """)
batch_relu = _pointwise("batch_relu", "relu", """Independent relus of equal shapes become one.

    F.relu(a), F.relu(b)  =>  r = F.relu(torch.stack([a, b])); r[0], r[1]
    """)
batch_detach = _pointwise("batch_detach", "detach", """Independent detaches of equal shapes become one
    (not for graph outputs: eager's detach aliases its input).

    a.detach(), b.detach()  =>  d = torch.stack([a, b]).detach(); d[0], d[1]
    """, exclude_outputs=True)
batch_nan_to_num = _pointwise("batch_nan_to_num", "nan_to_num", """Independent nan_to_num with the same
    replacement values become one.

    torch.nan_to_num(a, 0.0), torch.nan_to_num(b, 0.0)  =>  n = torch.nan_to_num(torch.stack([a, b]), 0.0); n[0], n[1]
    """)
batch_clamp = _pointwise("batch_clamp", "clamp", """Independent clamps with the same bounds become one.

    torch.clamp(a, 0, 1), torch.clamp(b, 0, 1)  =>  c = torch.clamp(torch.stack([a, b]), 0, 1); c[0], c[1]
    """)
batch_dropout = _pointwise("batch_dropout", "dropout", """Independent training-mode dropouts with the same
    p become one. Each element still gets its own Bernoulli draw, but from another place in the random
    stream than in eager: results match eager in distribution, not bit for bit under a fixed seed (as with
    Inductor's own dropout). With ``torch._inductor.config.fallback_random`` dropouts are left alone.

    F.dropout(a, 0.1), F.dropout(b, 0.1)  =>  d = F.dropout(torch.stack([a, b]), 0.1); d[0], d[1]
    """)

PRE_GRAD_PATTERNS = (batch_tanh, batch_sigmoid, batch_relu, batch_detach, batch_nan_to_num, batch_clamp, batch_dropout)

# -- post-grad (Aten-IR): upstream's BatchPointwise*PostGradFusion; members are aten OpOverload calls and the
# fused op keeps the members' OpOverload; stacks and selects lower to aten.cat / aten.unsqueeze / aten.select.


def _aten_pointwise(op: str, extra: str = "") -> HorizontalPattern:
    return _pointwise(f"batch_aten_{op}", op, f"""Independent aten.{op} of equal shapes (and equal constant
    arguments{extra}) become one aten.{op} of the stacked operands; dtypes and devices are in the group key,
    so fp32 and bf16 ops are never fused together.

    aten.{op}(a1{', b1' if extra else ''}), aten.{op}(a2{', b2' if extra else ''})
        =>  f = aten.{op}(aten.cat([a1[None], a2[None]]){', aten.cat([b1[None], b2[None]])' if extra else ''}); f[0], f[1]
    """, level="post_grad")


_BINARY = (": alpha, rounding_mode, a scalar operand's value; a scalar operand and a tensor operand are "
           "different ops, and operands that broadcast are not fused")
batch_aten_tanh = _aten_pointwise("tanh")
batch_aten_sigmoid = _aten_pointwise("sigmoid")
batch_aten_relu = _aten_pointwise("relu")
batch_aten_add = _aten_pointwise("add", _BINARY)
batch_aten_sub = _aten_pointwise("sub", _BINARY)
batch_aten_mul = _aten_pointwise("mul", _BINARY)
batch_aten_div = _aten_pointwise("div", _BINARY)

POST_GRAD_PATTERNS = (batch_aten_tanh, batch_aten_sigmoid, batch_aten_relu, batch_aten_add, batch_aten_sub,
                      batch_aten_div, batch_aten_mul)
