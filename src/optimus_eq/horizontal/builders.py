"""Group keys and fused-op builders of the horizontal patterns, in the e-graph's own term language.

Every builder adds ONE fused op per group and one view per member that equals it (``writer.union``):

* pointwise (``Unary``/``Binary``/one-input ``Apply``): ``F = f(stack(x_1..x_n))``, ``y_i = F.select(0, i)``;
* batch_linear: ``Y^T = baddbmm(stack(b).unsqueeze(2), stack(w), stack(x).permute(0, 2, 1))`` (``bmm``
  without bias; inputs of rank > 2 flattened to [n, M, in] and outputs viewed back),
  ``y_i = Y^T.permute(0, 2, 1).select(0, i)``: the weights' gradients come out in their own layout;
  without a weight gradient (inference) ``Y = baddbmm(stack(b).unsqueeze(1), stack(x), stack(w).permute(0, 2, 1))``,
  ``y_i = Y.select(0, i)``, contiguous as eager's;
* batch_linear_lhs (one input x): ``Y = linear(x, cat(w), cat(b))``, ``y_i = Y.narrow(-1, offset_i, out_i)``;
* batch_layernorm: ``Y = addcmul(stack(b), layer_norm(stack(x), no affine), stack(w))`` with the stacked
  weight and bias viewed to broadcast, ``y_i = Y.select(0, i)``; bf16/fp16 are computed in float32 and
  rounded once, as eager's kernels do (bit-identical results).

The fused ops are pure ``Apply``/``Unary`` terms with a recipe the lowering emits (``torch.bmm``,
``torch.baddbmm``, ``F.layer_norm``, ``torch.addcmul``, ...). The stacks are ``Cat`` of ``Unsqueeze``, so
the vertical rules turn a stack of slices of one tensor into a view when the group is saturated again.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from optimus_eq.symbolic import is_static
from optimus_eq.terms import MAX_RANK

#: Ops whose every call draws fresh random numbers: a fused call gets a key of its own (never merged).
RANDOM_OPS = frozenset(["dropout"])

LINEAR_PARAMS = ("input", "weight", "bias")
LAYER_NORM_PARAMS = ("input", "normalized_shape", "weight", "bias", "eps", "cudnn_enable")


def bind(recipe, params: tuple[str, ...]) -> dict | None:
    """The recipe's arguments by parameter name (``Slot`` markers for tensor inputs); None if they do not
    fit ``params`` (an unknown keyword, a method call)."""
    if recipe.op != "call_function" or len(recipe.args) > len(params):
        return None
    out = dict(zip(params, recipe.args))
    for k, v in recipe.kwargs.items():
        if k not in params or k in out:
            return None
        out[k] = v
    return out


def _slot(bound: dict, name: str):
    """The input index bound to ``name`` (a Slot), None when the argument is None/absent, or raises."""
    from optimus_bridge.translate import Slot

    v = bound.get(name)
    if v is None:
        return None
    if isinstance(v, Slot):
        return v.index
    raise ValueError(f"{name} is a constant")


def _recipe(name: str, target, args: tuple, kwargs: dict | None = None):
    from optimus_bridge.translate import Recipe

    return Recipe(name, "call_function", target, args, kwargs or {})


def _method(name: str, *consts):
    from optimus_bridge.translate import Recipe, Slot

    return Recipe(name, "call_method", name, (Slot(0),) + consts, {})


def _slots(n: int) -> tuple:
    from optimus_bridge.translate import Slot

    return tuple(Slot(i) for i in range(n))


# -- pointwise ---------------------------------------------------------------------------------------

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


# -- linear ------------------------------------------------------------------------------------------

def _linear_parts(m):
    """(x, w, b) input indices of a ``F.linear`` member (b None without bias), or raise."""
    if m.recipe.name != "linear" or m.op != "Apply":
        raise ValueError("not a linear")
    bound = bind(m.recipe, LINEAR_PARAMS)
    if bound is None:
        raise ValueError("unknown spelling")
    x, wt, b = _slot(bound, "input"), _slot(bound, "weight"), _slot(bound, "bias")
    if x is None or wt is None:
        raise ValueError("no input or weight")
    xs, ws = m.in_shapes[x], m.in_shapes[wt]
    if xs is None or ws is None or len(ws) != 2 or len(xs) < 2 or xs[-1] != ws[1]:
        raise ValueError("shapes")
    if b is not None and m.in_shapes[b] != (ws[0],):
        raise ValueError("bias shape")
    if len(set(m.types[0])) != 1:
        raise ValueError("mixed input dtypes")
    return x, wt, b


def linear_key(m):
    """batch_linear: same input shape, weight shape, bias or not, dtypes and devices."""
    try:
        x, wt, b = _linear_parts(m)
    except ValueError:
        return None
    return ("batch_linear", m.in_shapes[x], m.in_shapes[wt], b is not None, m.types)


def _trains_weights(w, members, wt: int) -> bool:
    """True when some member's weight and output both require grad in eager's values (``node.meta``):
    the graph is a training step's forward that differentiates the weights. False when unknown."""
    for m in members:
        weight, y = w.eager_value(m.inputs[wt]), w.eager_value(m.cls)
        if weight is not None and y is not None and weight.requires_grad and y.requires_grad:
            return True
    return False


def build_linear(w, members) -> None:
    """``Y^T = baddbmm(stack(b).unsqueeze(2), stack(w), stack(x).permute(0, 2, 1))`` (``bmm`` without
    bias; x of rank > 2 flattened to ``[n, rows, in]``), ``y_i = Y^T.permute(0, 2, 1).select(0, i)``
    (viewed back to x's leading dims).

    The weights are ``bmm``'s first operand, untransposed, so their gradient ``dY^T @ X`` (derivatives.yaml,
    ``bmm``: ``self: grad.bmm(mat2.transpose(1, 2))``) is a contiguous ``[n, out, in]`` whose slices have
    each weight's own layout: AccumulateGrad takes them without a copy (``Y = X @ W^T`` would give every
    weight a transposed gradient slice and one eager clone each, see extract/grad.py). The members are
    transposed views of ``Y^T``; pointwise readers read them in place, and a graph output gets eager's
    contiguous layout from the lowering's stride fix (bridge/optimus_bridge/lower.py, ``_fix_strides``).

    That form is for graphs that train the weights (:func:`_trains_weights`); without a backward there is
    no copy to save, so an inference graph gets ``Y = baddbmm(stack(b).unsqueeze(1), stack(x),
    stack(w).permute(0, 2, 1))``, whose members are contiguous as eager's linears (no output clone, no
    strided reads).
    """
    m0, n = members[0], len(members)
    x, wt, b = _linear_parts(m0)
    xs, (out, inp) = tuple(m0.in_shapes[x]), m0.in_shapes[wt]
    rows = _prod(w, xs[:-1])  # a token when a leading dim is symbolic (the batch)
    X = w.stack([w.handle(m.inputs[x]) for m in members], xs)
    if len(xs) > 2:
        X = w.reshape(X, (n, rows, inp))
    W = w.stack([w.handle(m.inputs[wt]) for m in members], (out, inp))
    types = (tuple(m0.types[0][:1] * 3), m0.types[1])
    B = None
    if b is not None:
        B = w.stack([w.handle(m.inputs[b]) for m in members], (out,))
    if _trains_weights(w, members, wt):  # Y^T = W @ X^T: weight gradients in the weights' layout
        lhs, rhs, shape, bias_dim = W, w.permute(X, (0, 2, 1), (n, inp, rows)), (n, out, rows), 2
    else:                                 # Y = X @ W^T: members contiguous, as eager's
        lhs, rhs, shape, bias_dim = X, w.permute(W, (0, 2, 1), (n, inp, out)), (n, rows, out), 1
    if B is None:
        key = w.key("bmm", _recipe("bmm", torch.bmm, _slots(2)), types)
        Y = w.apply(key, [lhs, rhs], shape)
    else:
        B = w.unsqueeze(B, bias_dim, shape[:bias_dim] + (1,) + shape[bias_dim + 1:])
        B = _expand_symbolic(w, B, shape, types[0][0])
        key = w.key("baddbmm", _recipe("baddbmm", torch.baddbmm, _slots(3)), types)
        Y = w.apply(key, [B, lhs, rhs], shape)
    if bias_dim == 2:
        Y = w.permute(Y, (0, 2, 1), (n, rows, out))
    for i, m in enumerate(members):
        y = w.select(Y, 0, i, n, (rows, out))
        if len(xs) > 2:
            y = w.reshape(y, xs[:-1] + (out,))
        w.union(m, y)


def _prod(w, sizes) -> int:
    """The product of e-graph sizes (a symbolic token when one is: :class:`optimus_eq.symbolic.SizeTable`)."""
    table = getattr(w.tr, "sizes", None)
    if table is None:
        return math.prod(sizes)
    return table.prod(sizes)


def _expand_symbolic(w, h: int, shape, t, aten_ir: bool = False) -> int:
    """``h`` (a broadcasting operand of static shape, dtype and device ``t``) expanded to ``shape`` when
    ``shape`` has a symbolic size, else ``h``. The meta kernels of baddbmm and addcmul cannot broadcast a
    static operand over a symbolic batch (torch 2.13: "SymIntArrayRef expected to contain only concrete
    integers"), so the operand is expanded first: a view, which Inductor folds into the kernel."""
    if is_static(shape):
        return h
    shape = tuple(shape)
    if aten_ir:
        recipe = _recipe("expand", torch.ops.aten.expand.default, (_slots(1)[0], list(_sym_sizes(shape))))
    else:
        recipe = _method("expand", *_sym_sizes(shape))
    return w.apply(w.key(f"expand{shape}{aten_ir}", recipe, ((t,), t)), [h], shape)


def _sym_sizes(shape) -> tuple:
    """Recipe arguments for an e-graph shape: ints, and ``SymSize`` markers for symbolic tokens."""
    from optimus_bridge.translate import SymSize

    return tuple(SymSize(s) if s < 0 else s for s in shape)


def linear_lhs_key(m):
    """batch_linear_lhs: linears reading the same input (e-class), bias or not, dtypes and devices."""
    try:
        x, wt, b = _linear_parts(m)
    except ValueError:
        return None
    if not m.in_shapes[wt] or m.in_shapes[wt][0] == 0:
        # no output features: nothing to fuse, and the weight cat drops the empty weight (which then gets no
        # gradient where eager gives it an empty one)
        return None
    return ("batch_linear_lhs", m.inputs[x], m.in_shapes[x], b is not None, m.types)


linear_lhs_key.shared_input = True  # members are gathered by their input too (PlanGraph.groups)


def build_linear_lhs(w, members) -> None:
    m0 = members[0]
    x, wt, b = _linear_parts(m0)
    xs = tuple(m0.in_shapes[x])
    outs = [m.in_shapes[wt][0] for m in members]
    total = sum(outs)
    W = w.cat([w.handle(m.inputs[wt]) for m in members], 0, (total, xs[-1]))
    args = [w.handle(m0.inputs[x]), W]
    if b is not None:
        args.append(w.cat([w.handle(m.inputs[b]) for m in members], 0, (total,)))
    recipe = _recipe("linear", F.linear, _slots(len(args)))
    key = w.key(f"linear{len(args)}", recipe, (tuple(m0.types[0][:1] * len(args)), m0.types[1]))
    Y = w.apply(key, args, xs[:-1] + (total,))
    start, d = 0, len(xs) - 1
    for m, o in zip(members, outs):
        w.union(m, w.narrow(Y, d, start, o, total, xs[:-1] + (o,)))
        start += o


# -- layer norm --------------------------------------------------------------------------------------

def _layer_norm_parts(m):
    if m.recipe.name != "layer_norm" or m.op != "Apply":
        raise ValueError("not a layer_norm")
    bound = bind(m.recipe, LAYER_NORM_PARAMS)
    if bound is None:
        raise ValueError("unknown spelling")
    ns = bound.get("normalized_shape")
    if isinstance(ns, int):
        ns = (ns,)
    if not isinstance(ns, (tuple, list)) or not all(isinstance(s, int) for s in ns):
        raise ValueError("normalized_shape")
    eps = bound.get("eps", 1e-5)
    if not isinstance(eps, (int, float)):
        raise ValueError("eps")
    x, wt, b = _slot(bound, "input"), _slot(bound, "weight"), _slot(bound, "bias")
    xs = m.in_shapes[x] if x is not None else None
    ns = tuple(ns)
    if xs is None or tuple(xs[len(xs) - len(ns):]) != ns or len(xs) + 1 > MAX_RANK:
        raise ValueError("shapes")
    for i in (wt, b):
        if i is not None and m.in_shapes[i] != ns:
            raise ValueError("affine shape")
    if len(set(m.types[0])) != 1:
        raise ValueError("mixed input dtypes")
    return x, wt, b, ns, float(eps)


def layer_norm_key(m):
    """batch_layernorm: same input shape, normalized_shape, eps, weight/bias or not, dtypes, devices."""
    try:
        x, wt, b, ns, eps = _layer_norm_parts(m)
    except ValueError:
        return None
    return ("batch_layernorm", m.in_shapes[x], ns, eps, wt is not None, b is not None, m.types)


#: dtypes whose eager layer norm computes in float32 and rounds once (CPU and CUDA kernels): the fused
#: form does the same, so results are bit-identical to eager (measured: bf16 and fp16, 600 draws each).
_UPCAST = {"torch.bfloat16": torch.bfloat16, "torch.float16": torch.float16}


def _to(w, h, shape, src, dst):
    """``h.to(dtype)`` (Torch-IR) from the (dtype, device) type ``src`` to ``dst``; ``h`` when they are equal."""
    if src == dst:
        return h
    dtype = torch.float32 if dst[0] == "torch.float32" else _UPCAST[dst[0]]
    return w.apply(w.key(f"to:{dst[0]}", _method("to", dtype), ((src,), dst)), [h], shape)


def build_layer_norm(w, members) -> None:
    m0, n = members[0], len(members)
    x, wt, b, ns, eps = _layer_norm_parts(m0)
    xs = tuple(m0.in_shapes[x])
    out = (n,) + xs
    t = m0.types[0][0]                       # (dtype, device) of the inputs
    low = t[0] in _UPCAST
    c = ("torch.float32", t[1]) if low else t  # computing type

    X = _to(w, w.stack([w.handle(m.inputs[x]) for m in members], xs), out, t, c)
    ln = w.key(f"layer_norm{ns}{eps}", _recipe("layer_norm", F.layer_norm, (_slots(1)[0], ns, None, None, eps)),
               ((c,), c))
    Y = w.apply(ln, [X], out)
    bshape = (n,) + (1,) * (len(xs) - len(ns)) + ns

    def stacked(i):  # left in the input dtype: type promotion computes the affine in float32 exactly
        return _expand_symbolic(w, w.reshape(w.stack([w.handle(m.inputs[i]) for m in members], ns), bshape), out, t)

    if wt is not None and b is not None:
        key = w.key("addcmul", _recipe("addcmul", torch.addcmul, _slots(3)), ((t, c, t), c))
        Y = w.apply(key, [stacked(b), Y, stacked(wt)], out)
    elif wt is not None:
        key = w.key("mul", _recipe("mul", torch.mul, _slots(2)), ((c, t), c))
        Y = w.apply(key, [Y, stacked(wt)], out)
    elif b is not None:
        key = w.key("add", _recipe("add", torch.add, _slots(2)), ((c, t), c))
        Y = w.apply(key, [Y, stacked(b)], out)
    Y = _to(w, Y, out, c, t)
    for i, m in enumerate(members):
        w.union(m, w.select(Y, 0, i, n, xs))


# -- Aten-IR (post-grad) linear: aten.mm / aten.addmm -> aten.bmm / aten.baddbmm -----------------------

def _mm_operands(m):
    """``(kind, bias, a, b)`` of a plain aten.mm / aten.addmm (beta = alpha = 1) / aten.bmm member (kind
    ``"mm"`` or ``"bmm"``, bias None or its input index, a and b the matrices' input indices), or raise
    ValueError."""
    from optimus_bridge.translate import Slot

    aten = torch.ops.aten
    r = m.recipe
    if m.op != "Apply" or r.op != "call_function" or r.kwargs:
        raise ValueError("not a plain aten call")
    if r.target is aten.mm.default and r.args == (Slot(0), Slot(1)):
        return "mm", None, 0, 1
    if r.target is aten.addmm.default and r.args == (Slot(0), Slot(1), Slot(2)):
        return "mm", 0, 1, 2
    if r.target is aten.bmm.default and r.args == (Slot(0), Slot(1)):
        return "bmm", None, 0, 1
    raise ValueError("not mm, addmm or bmm")


def _aten_mm_parts(m):
    """(bias, mat1, mat2) input indices of an ``aten.mm``/``aten.addmm`` member (bias None for mm), or
    raise. addmm must have beta = alpha = 1 and a bias of shape [N], [1, N] or [M, N]."""
    kind, bias, a, b = _mm_operands(m)
    if kind != "mm":
        raise ValueError("not mm/addmm with default beta and alpha")
    sa, sb = m.in_shapes[a], m.in_shapes[b]
    if sa is None or sb is None or len(sa) != 2 or len(sb) != 2 or sa[1] != sb[0]:
        raise ValueError("shapes")
    if bias is not None and m.in_shapes[bias] not in ((sb[1],), (1, sb[1]), (sa[0], sb[1])):
        raise ValueError("bias shape")
    if len(set(m.types[0])) != 1:
        raise ValueError("mixed input dtypes")
    return bias, a, b


def aten_linear_key(m):
    """batch_linear_post_grad: aten.mm or aten.addmm of equal operand shapes, dtypes and devices."""
    try:
        bias, a, b = _aten_mm_parts(m)
    except ValueError:
        return None
    return ("batch_linear_post_grad", bias is not None, tuple(tuple(s) for s in m.in_shapes), m.types)


def build_aten_linear(w, members) -> None:
    """``Y = aten.baddbmm(stack(bias) (viewed to [n, 1|M, N]), stack(mat1), stack(mat2))`` (``aten.bmm``
    without bias), ``y_i = Y.select(0, i)``. The stacks are cats of unsqueezes, which the vertical rules
    turn into views where the operands are slices of one tensor."""
    aten = torch.ops.aten
    m0, n = members[0], len(members)
    bias, a, b = _aten_mm_parts(m0)
    (M, K), (_, N) = m0.in_shapes[a], m0.in_shapes[b]
    A = w.stack([w.handle(m.inputs[a]) for m in members], (M, K))
    B = w.stack([w.handle(m.inputs[b]) for m in members], (K, N))
    t = m0.types[0][0]
    if bias is None:
        key = w.key("aten.bmm", _recipe("bmm", aten.bmm.default, _slots(2)), ((t, t), m0.types[1]))
        Y = w.apply(key, [A, B], (n, M, N))
    else:
        bs = tuple(m0.in_shapes[bias])
        C = w.stack([w.handle(m.inputs[bias]) for m in members], bs)
        if len(bs) == 1:
            C = w.unsqueeze(C, 1, (n, 1, N))
        if tuple(bs) != (M, N):
            C = _expand_symbolic(w, C, (n, M, N), t, aten_ir=True)
        key = w.key("aten.baddbmm", _recipe("baddbmm", aten.baddbmm.default, _slots(3)), ((t, t, t), m0.types[1]))
        Y = w.apply(key, [C, A, B], (n, M, N))
    for i, m in enumerate(members):
        w.union(m, w.select(Y, 0, i, n, (M, N)))


# -- einsum_to_pointwise_pass: a rewrite of one op, done by the same machinery (groups of one) ----------

def einsum_parts(m):
    """``(x, w, P, i, Q, o)`` of an einsum member ``einsum("P i, Q i o -> P o", x, w)`` with Q a suffix of P
    (so ``x.unsqueeze(-1) * w`` broadcasts P against Q from the right), or raise ValueError.

    Every letter appears once per operand (no diagonal), no ellipsis, i and o are not in P, the
    static sizes of the letters shared by x, w and the output agree, and the dtype is floating or int64
    (``torch.sum`` turns narrower integers into int64).
    """
    from optimus_bridge.translate import Slot, einsum_operands

    r = m.recipe
    if m.op != "Apply" or r.name != "einsum" or r.op != "call_function" or r.kwargs or len(m.inputs) != 2:
        raise ValueError("not a two-operand einsum")
    eq, operands = einsum_operands(r.args)
    if not isinstance(eq, str) or operands != (Slot(0), Slot(1)):
        raise ValueError("spelling")
    eq = eq.replace(" ", "")
    if "." in eq or "->" not in eq:
        raise ValueError("implicit output or ellipsis")
    lhs, out = eq.split("->")
    specs = lhs.split(",")
    if len(specs) != 2 or not all(s.isalpha() for s in specs + [out]):
        raise ValueError("not two operands")
    xs, ws = specs
    if len(xs) < 1 or len(ws) < 2 or any(len(set(s)) != len(s) for s in (xs, ws, out)):
        raise ValueError("repeated letters")
    P, i = xs[:-1], xs[-1]
    Q, wi, o = ws[:-2], ws[-2], ws[-1]
    if wi != i or out != P + o or i in P or o in P or i == o or not P.endswith(Q):
        raise ValueError("not a broadcast multiply and a sum over the last input letter")
    sx, sw = m.in_shapes
    if sx is None or sw is None or len(sx) != len(xs) or len(sw) != len(ws):
        raise ValueError("shapes")
    size = dict(zip(xs, sx))
    if any(size[c] != s for c, s in zip(ws[:-1], sw[:-1])) or m.shape != tuple(sx[:-1]) + (sw[-1],):
        raise ValueError("sizes disagree (broadcast einsum)")
    if len(xs) + 1 > MAX_RANK or len(set(m.types[0])) != 1:
        raise ValueError("rank or mixed dtypes")
    if not sum_keeps_dtype(m.types[0][0][0]):
        raise ValueError("an integer dtype that torch.sum promotes")
    return 0, 1, P, i, Q, o


def sum_keeps_dtype(name: str) -> bool:
    """Whether ``torch.sum`` / ``aten.sum`` of a tensor of dtype ``name`` (``"torch.int32"``) keeps that
    dtype: floating dtypes and int64 do; bool and narrower integers are summed into int64 (the einsum and
    matmul that a multiply + sum replaces keep the operands' dtype)."""
    dtype = getattr(torch, name.removeprefix("torch."), None)
    return isinstance(dtype, torch.dtype) and (dtype.is_floating_point or dtype == torch.int64)


def einsum_key(m):
    """einsum_to_pointwise_pass: every matching einsum is its own group (a rewrite, not a fusion).

    Eager's einsum often returns a permuted view of a bmm (non-contiguous), and pointwise readers keep
    that layout up to the graph's outputs: such einsums are taken (``any_strides``) and the builder
    gives the pointwise result eager's strides (:func:`build_einsum`).
    """
    try:
        einsum_parts(m)
    except ValueError:
        return None
    return ("einsum_to_pointwise_pass", m.cls)


einsum_key.any_strides = True


def _eager_layout(w, m):
    """The permutation ``perm`` with ``value == value.permute(perm).contiguous().permute(inverse)`` in
    eager's layout (dims by decreasing stride), None when eager's value is contiguous; raise ValueError
    when it is not dense (overlapping or with gaps) or unknown."""
    val = w.eager_value(m.cls)
    if val is None:
        raise ValueError("no eager strides")
    shape, stride = tuple(val.shape), tuple(val.stride())
    if m.eager_contiguous:
        return None
    perm = sorted(range(len(shape)), key=lambda d: (-stride[d], d))
    expect = 1
    for d in reversed(perm):
        if shape[d] != 1 and stride[d] != expect:
            raise ValueError("not a dense layout")
        expect *= shape[d]
    return perm


def build_einsum(w, members) -> None:
    """``einsum("P i, Q i o -> P o", x, w) == (x.unsqueeze(-1) * w).sum(-2)``; where eager's einsum
    returned a permuted layout (it computes through bmm), the result is copied into that layout
    (``.permute(perm).contiguous()`` viewed back), so eager's strides reach the graph's outputs.

    bf16/fp16 operands are computed in float32 and rounded once, as eager's einsum (a bmm) accumulates:
    rounding the products first, as upstream's ``replace_einsum_to_pointwise`` does, loses digits under
    cancellation (measured: 6.6% relative error on one element of a 5x5 bf16 ``m @ m.t()``;
    tests/test_horizontal.py::test_einsum_to_pointwise_bf16_matches_eager_under_cancellation)."""
    for m in members:
        try:
            perm = _eager_layout(w, m)
        except ValueError:
            continue
        x, wt, P, i, Q, o = einsum_parts(m)
        sx, sw = tuple(m.in_shapes[x]), tuple(m.in_shapes[wt])
        t, out = m.types[0][0], m.types[1]
        c = ("torch.float32", t[1]) if t[0] in _UPCAST else t  # computing type

        X = w.unsqueeze(_to(w, w.handle(m.inputs[x]), sx, t, c), len(sx), sx + (1,))
        W = _to(w, w.handle(m.inputs[wt]), sw, t, c)
        prod_shape = sx + (sw[-1],)
        mul = w.key("einsum_to_pointwise:mul", _recipe("mul", torch.mul, _slots(2)), ((c, c), c))
        prod = w.apply(mul, [X, W], prod_shape)
        red = w.key("einsum_to_pointwise:sum", _recipe("sum", torch.sum, (_slots(1)[0], -2)), ((c,), c))
        y = _to(w, w.apply(red, [prod], m.shape), tuple(m.shape), c, out)
        if perm is not None:
            pshape = tuple(m.shape[d] for d in perm)
            inv = [perm.index(d) for d in range(len(perm))]
            copy = w.key("einsum_to_pointwise:contiguous", _method("contiguous"), ((m.types[1],), m.types[1]))
            y = w.permute(w.apply(copy, [w.permute(y, perm, pshape)], pshape), inv, m.shape)
        w.union(m, y)


# -- decompose_mm_pass: memory-bound mm / addmm / bmm -> multiply + sum (Aten-IR), groups of one ----------

#: upstream torch/_inductor/fx_passes/decompose_mem_bound_mm.py (torch 2.13): MIN_FIRST_DIMENSION_DECOMPOSITION,
#: MAX_OTHER_DIMENSION_DECOMPOSITION (CUDA/XPU), CPU_MAX_FIRST_DIMENSION_DECOMPOSITION,
#: CPU_MAX_OTHER_DIMENSION_DECOMPOSITION (CPU); the same option names override them.
DECOMPOSE_MM_OPTIONS = {"min_first_dimension_decomposition": 10240, "max_other_dimension_decomposition": 32,
                        "cpu_max_first_dimension_decomposition": 1, "cpu_max_other_dimension_decomposition": 2048}


def should_decompose(m, options: dict) -> bool:
    """Upstream's size guards (``should_decompose_mm`` / ``should_decompose_bmm``): on CUDA/XPU, mm
    [M, K] x [K, N] when M >= min_first (10240) and K, N < max_other (32); bmm [b, M, K] x [b, K, N] when
    b >= min_first and two of M, K, N < max_other. On CPU, mm when M <= cpu_max_first (1) and K, N <=
    cpu_max_other (2048); bmm when b <= cpu_max_first. Other devices: never."""
    kind, _, a, b = _mm_operands(m)
    sa, sb = m.in_shapes[a], m.in_shapes[b]
    rank = 2 if kind == "mm" else 3
    if sa is None or sb is None or len(sa) != rank or len(sb) != rank or len(set(m.types[0])) != 1:
        return False
    if not (is_static(sa) and is_static(sb)):  # upstream's guards compare sizes: static ones only
        return False
    if not sum_keeps_dtype(m.types[0][0][0]):  # an int32 mm would come back as int64
        return False
    device = m.types[1][1].split(":")[0]
    o = {**DECOMPOSE_MM_OPTIONS, **{k: v for k, v in options.items() if k in DECOMPOSE_MM_OPTIONS}}
    lo, hi = o["min_first_dimension_decomposition"], o["max_other_dimension_decomposition"]
    cpu_first, cpu_other = o["cpu_max_first_dimension_decomposition"], o["cpu_max_other_dimension_decomposition"]
    if device in ("cuda", "xpu"):
        if kind == "mm":
            return sa[0] >= lo and sb[0] < hi and sb[1] < hi
        return sa[0] >= lo and (sa[1] < hi) + (sa[2] < hi) + (sb[2] < hi) >= 2
    if device == "cpu":
        if kind == "mm":
            return sa[0] <= cpu_first and sb[0] <= cpu_other and sb[1] <= cpu_other
        return sa[0] <= cpu_first and sb[0] <= cpu_first
    return False


def decompose_mm_key(m, options: dict):
    """decompose_mm_pass: every mm/addmm/bmm within upstream's size guards is its own group."""
    try:
        if m.shape is None or len(m.shape) + 2 > MAX_RANK or not should_decompose(m, options):
            return None
    except ValueError:
        return None
    return ("decompose_mm_pass", m.cls)


decompose_mm_key.wants_options = True
decompose_mm_key.option_defaults = DECOMPOSE_MM_OPTIONS


def build_decompose_mm(w, members) -> None:
    """mm: ``sum(A[:, :, None] * B[None], -2)`` (+ bias for addmm); bmm: ``sum(A[..., None] * B[:, None], -2)``,
    as aten.unsqueeze / aten.mul.Tensor / aten.sum.dim_IntList (/ aten.add.Tensor). bf16/fp16 operands are
    computed in float32 and rounded once (prims.convert_element_type), as eager's matmul kernels
    accumulate: upstream rounds the products and the sum to the input dtype, which loses digits under
    cancellation (measured: a relative error of 0.1 on a bf16 addmm element)."""
    aten = torch.ops.aten
    convert = torch.ops.prims.convert_element_type.default
    for m in members:
        kind, bias, a, b = _mm_operands(m)
        sa, sb = tuple(m.in_shapes[a]), tuple(m.in_shapes[b])
        t, out = m.types[0][0], m.types[1]
        low = t[0] in _UPCAST
        c = ("torch.float32", t[1]) if low else t

        def cast(h, shape, src, dst):
            if src == dst:
                return h
            dtype = torch.float32 if dst[0] == "torch.float32" else _UPCAST[dst[0]]
            key = w.key(f"decompose_mm:convert:{dst[0]}", _recipe("convert_element_type", convert,
                                                                  (_slots(1)[0], dtype)), ((src,), dst))
            return w.apply(key, [h], shape)

        A = w.unsqueeze(cast(w.handle(m.inputs[a]), sa, t, c), len(sa), sa + (1,))
        B = w.unsqueeze(cast(w.handle(m.inputs[b]), sb, t, c), len(sb) - 2, sb[:-2] + (1,) + sb[-2:])
        prod_shape = sa + (sb[-1],)
        mul = w.key("decompose_mm:mul", _recipe("mul", aten.mul.Tensor, _slots(2)), ((c, c), c))
        red = w.key("decompose_mm:sum", _recipe("sum", aten.sum.dim_IntList, (_slots(1)[0], [-2])), ((c,), c))
        y = w.apply(red, [w.apply(mul, [A, B], prod_shape)], tuple(m.shape))
        if bias is not None:
            add = w.key("decompose_mm:add", _recipe("add", aten.add.Tensor, _slots(2)), ((c, t), c))
            y = w.apply(add, [y, w.handle(m.inputs[bias])], tuple(m.shape))
        w.union(m, cast(y, tuple(m.shape), c, out))
