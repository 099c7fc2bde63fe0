"""batch_layernorm: n layer norms (same normalized_shape, eps, affine) -> one layer norm of the stack without
affine, then ``addcmul`` with the stacked weight and bias; bf16/fp16 computed in float32 and rounded once."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from optimus_eq.horizontal.recipes import (UPCAST, bound_call, check_one_input_type, expand_symbolic, recipe, slot,
                                           slots, to_type)
from optimus_eq.terms import MAX_RANK
from optimus_eq.registry import PRE_GRAD, horizontal

LAYER_NORM_PARAMS = ("input", "normalized_shape", "weight", "bias", "eps", "cudnn_enable")


def _layer_norm_parts(m):
    bound = bound_call(m, "layer_norm", LAYER_NORM_PARAMS)
    ns = bound.get("normalized_shape")
    if isinstance(ns, int):
        ns = (ns,)
    if not isinstance(ns, (tuple, list)) or not all(isinstance(s, int) for s in ns):
        raise ValueError("normalized_shape")
    eps = bound.get("eps", 1e-5)
    if not isinstance(eps, (int, float)):
        raise ValueError("eps")
    x, wt, b = slot(bound, "input"), slot(bound, "weight"), slot(bound, "bias")
    xs = m.in_shapes[x] if x is not None else None
    ns = tuple(ns)
    if xs is None or tuple(xs[len(xs) - len(ns):]) != ns or len(xs) + 1 > MAX_RANK:
        raise ValueError("shapes")
    for i in (wt, b):
        if i is not None and m.in_shapes[i] != ns:
            raise ValueError("affine shape")
    check_one_input_type(m)
    return x, wt, b, ns, float(eps)


def layer_norm_key(m):
    """batch_layernorm: same input shape, normalized_shape, eps, weight/bias or not, dtypes, devices."""
    try:
        x, wt, b, ns, eps = _layer_norm_parts(m)
    except ValueError:
        return None
    return ("batch_layernorm", m.in_shapes[x], ns, eps, wt is not None, b is not None, m.types)


def build_layer_norm(w, members) -> None:
    m0, n = members[0], len(members)
    x, wt, b, ns, eps = _layer_norm_parts(m0)
    xs = tuple(m0.in_shapes[x])
    out = (n,) + xs
    t = m0.types[0][0]                       # (dtype, device) of the inputs
    low = t[0] in UPCAST
    c = ("torch.float32", t[1]) if low else t  # computing type

    X = to_type(w, w.stack([w.handle(m.inputs[x]) for m in members], xs), out, t, c)
    ln = w.key(f"layer_norm{ns}{eps}", recipe("layer_norm", F.layer_norm, (slots(1)[0], ns, None, None, eps)),
               ((c,), c))
    Y = w.apply(ln, [X], out)
    bshape = (n,) + (1,) * (len(xs) - len(ns)) + ns

    def stacked(i):  # left in the input dtype: type promotion computes the affine in float32 exactly
        return expand_symbolic(w, w.reshape(w.stack([w.handle(m.inputs[i]) for m in members], ns), bshape), out, t)

    if wt is not None and b is not None:
        key = w.key("addcmul", recipe("addcmul", torch.addcmul, slots(3)), ((t, c, t), c))
        Y = w.apply(key, [stacked(b), Y, stacked(wt)], out)
    elif wt is not None:
        key = w.key("mul", recipe("mul", torch.mul, slots(2)), ((c, t), c))
        Y = w.apply(key, [Y, stacked(wt)], out)
    elif b is not None:
        key = w.key("add", recipe("add", torch.add, slots(2)), ((c, t), c))
        Y = w.apply(key, [Y, stacked(b)], out)
    Y = to_type(w, Y, out, c, t)
    for i, m in enumerate(members):
        w.union(m, w.select(Y, 0, i, n, xs))


batch_layernorm = horizontal(
    "batch_layernorm", PRE_GRAD, layer_norm_key, build_layer_norm, builtin=PRE_GRAD, batches=("layer_norm",),
    doc="""Independent layer norms of equal shapes, normalized_shape and eps become one layer norm.

    y_i = F.layer_norm(x_i, (D,), w_i, b_i, eps)
        =>  Y = torch.addcmul(stack(b)[:, None], F.layer_norm(stack(x), (D,), eps=eps), stack(w)[:, None])
            y_i = Y[i]
    """)

PATTERNS = (batch_layernorm,)
