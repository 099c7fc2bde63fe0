"""batch_gemm_lhs (ours): GEMMs of one input written as ``matmul`` and as ``F.linear`` become one linear.

``x @ P`` with a 2-D ``P`` (``torch.matmul``, the ``@`` operator, ``torch.mm``) is ``F.linear(x, P.t())``, so it
belongs in one group with the linears that read the same ``x`` (the linear-lhs batching of
:mod:`optimus_eq.horizontal.linear`, which sees ``F.linear`` calls only): a group that exists only in this
other, equivalent form. Wukong's layers (bench model
``wukong``, arXiv:2403.02545 Sec. 3) have one: the factorization machine block computes
``x.transpose(1, 2) @ P`` and the linear compression block ``F.linear(x.transpose(1, 2), W)`` on the same
transposed input, one GEMM each.

    z = x @ P; y = F.linear(x, W)                  (P: [k, n], W: [o, k], no bias)
        =>  t = F.linear(x, cat([P.t(), W])); z = t[..., :n]; y = t[..., n:]

Members: linears without bias and matmuls of a 2-D right operand (x of rank >= 2, its last size P's first;
``torch.matmul``, ``@``, ``torch.mm`` and the methods ``x.matmul`` / ``x.mm``), one dtype and device, reading one
input e-class (the key names it, ``shared_input`` as the linear-lhs batching). Biased linears stay with the
linear-lhs batching (a matmul has no bias to concatenate). In eqsat the linears that the linear-lhs batching fused
earlier in the round stay candidates here (``regroups``): two linears and a matmul of one input are one GEMM.

Why a choice: the fused GEMM reads x once and launches one GEMM (and one backward GEMM per operand) instead
of one per member, but it adds the weight cat, a copy of every call (the transposed ``P`` is not a packable
parameter stack: ``extract.grad.packed_cats``). Groups are small (two members per Wukong layer): greedy, which
commits without pricing, keeps upstream's ``min_fuse_set_size`` of 5 and leaves them; eqsat adds the group
from two members and the cost model decides (``horizontal.driver.COST_DECIDED_MIN_FUSE_SET_SIZE``).

In a training graph a matmul member's weight gets its gradient transposed (a slice of ``dY^T @ x`` viewed
back), which AccumulateGrad copies into the parameter's layout outside the compiled graph, one eager kernel per
such weight and step: priced by ``extract.grad._transposed_param_copies`` (docs/DESIGN.md, "GEMMs of one input
in two spellings").
"""

from __future__ import annotations

import torch.nn.functional as F

from optimus_eq.horizontal.linear import SHARED_INPUT_LINEARS, _linear_parts
from optimus_eq.horizontal.recipes import bound_call, check_one_input_type, recipe, slot, slots
from optimus_eq.registry import PRE_GRAD, horizontal

#: parameter names of the matmul spellings the translator names ``matmul`` (torch.matmul, operator.matmul)
#: and ``mm``
_MATMUL_PARAMS = {"matmul": ("input", "other"), "mm": ("input", "mat2")}


def _parts(m) -> tuple[int, int, bool]:
    """``(x, w, transposed)`` input indices of a member: a bias-free ``F.linear(x, w)`` (``transposed``
    False, w ``[o, k]``) or ``matmul(x, w)`` / ``mm(x, w)`` with a 2-D w (``transposed`` True, w ``[k, o]``).

    Raises:
        ValueError: any other op or spelling, a bias, shapes that do not fit, mixed input dtypes, or no
            output features.
    """
    name = m.recipe.name
    if name == "linear":
        x, wt, b = _linear_parts(m)
        if b is not None:
            raise ValueError("bias")
        out, transposed = m.in_shapes[wt][0], False
    elif name in _MATMUL_PARAMS:
        bound = bound_call(m, name, _MATMUL_PARAMS[name])
        params = _MATMUL_PARAMS[name]
        x, wt = slot(bound, params[0]), slot(bound, params[1])
        if x is None or wt is None:
            raise ValueError("no operands")
        xs, ws = m.in_shapes[x], m.in_shapes[wt]
        if xs is None or ws is None or len(ws) != 2 or len(xs) < 2 or xs[-1] != ws[0]:
            raise ValueError("shapes")
        check_one_input_type(m)
        out, transposed = ws[1], True
    else:
        raise ValueError("not a linear or matmul")
    if not isinstance(out, int) or out <= 0:
        # no output features (or a symbolic count): nothing to fuse
        raise ValueError("output features")
    return x, wt, transposed


def gemm_lhs_key(m):
    """batch_gemm_lhs: the input e-class, its shape, and the dtypes and devices (module docstring)."""
    try:
        x, _, _ = _parts(m)
    except ValueError:
        return None
    if len(m.in_shapes) != 2:
        return None
    return ("batch_gemm_lhs", m.inputs[x], tuple(m.in_shapes[x]), m.types)


def build_gemm_lhs(w, members) -> None:
    """``Y = F.linear(x, cat(W_i))`` with ``W_i`` a linear member's weight or a matmul member's right operand
    transposed (a view), ``y_i = Y.narrow(-1, start_i, o_i)`` (module docstring)."""
    m0 = members[0]
    x, _, _ = _parts(m0)
    xs = tuple(m0.in_shapes[x])
    k = xs[-1]
    weights, outs = [], []
    for m in members:
        _, wt, transposed = _parts(m)
        h = w.handle(m.inputs[wt])
        if transposed:
            o = m.in_shapes[wt][1]
            h = w.permute(h, (1, 0), (o, k))
        else:
            o = m.in_shapes[wt][0]
        weights.append(h)
        outs.append(o)
    total = sum(outs)
    W = w.cat(weights, 0, (total, k))
    types = (tuple(m0.types[0][:1] * 2), m0.types[1])
    key = w.key("linear2", recipe("linear", F.linear, slots(2)), types)
    Y = w.apply(key, [w.handle(m0.inputs[x]), W], xs[:-1] + (total,))
    start, d = 0, len(xs) - 1
    for m, o in zip(members, outs):
        w.union(m, w.narrow(Y, d, start, o, total, xs[:-1] + (o,)))
        start += o


batch_gemm_lhs = horizontal(
    "batch_gemm_lhs", PRE_GRAD, gemm_lhs_key, build_gemm_lhs, batches=("matmul",),
    shared_input=True,  # members are gathered by their input too (PlanGraph.groups)
    regroups=(SHARED_INPUT_LINEARS.name,),  # eqsat: two linears the linear-lhs batching fused and a matmul, one GEMM
    doc="""GEMMs reading one input, as matmuls of 2-D right operands and bias-free linears, become one linear.

    z = x @ P; y = F.linear(x, W)        (P: [k, n], W: [o, k])
        =>  t = F.linear(x, cat([P.t(), W])); z = t[..., :n]; y = t[..., n:]
    """)

PATTERNS = (batch_gemm_lhs,)
