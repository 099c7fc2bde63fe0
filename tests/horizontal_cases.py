"""Randomized soundness cases of the horizontal patterns, one hypothesis strategy per pattern (the registry's
meta-test in tests/test_patterns.py picks them up through :data:`CASES`).

Each case draws a group size, shapes and a dtype and returns a function that holds a group of independent
identical ops (plus a distractor that must not join the group where it can be drawn). Low-precision layer
norms with affine parameters are drawn too: the fused form computes them in float32 like eager's kernel.
Dropout cases use p = 1 (every element dropped): deterministic, so eager and the fused graph agree
exactly; tests/test_horizontal.py checks 0 < p < 1 statistically.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@dataclass
class Case:
    fn: Callable
    inputs: list
    note: str = ""


def _fixed(body: Callable, arity: int) -> Callable:
    """``body(*args)`` as a function of ``arity`` named parameters (symbolic_trace rejects ``*args``)."""
    names = ", ".join(f"a{i}" for i in range(arity))
    scope = {"body": body}
    exec(f"def fn({names}):\n    return body({names})\n", scope)
    return scope["fn"]


def _x(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def _group(draw, rank_min=1, rank_max=3):
    n = draw(st.integers(5, 7))  # upstream's default min_fuse_set_size is 5
    rank = draw(st.integers(rank_min, rank_max))
    shape = [draw(st.integers(1, 4)) for _ in range(rank)]
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 2**16))
    return n, shape, dtype, seed


def _pointwise_case(op: Callable, name: str, prepare=None):
    @st.composite
    def case(draw) -> Case:
        n, shape, dtype, seed = _group(draw)
        inputs = [_x(shape, dtype, seed + i) for i in range(n)]
        if prepare is not None:
            inputs = [prepare(x, seed + i) for i, x in enumerate(inputs)]
        weights = [float(i + 1) for i in range(n)]

        def fn(*xs):
            return tuple(op(x) * w for x, w in zip(xs, weights))

        return Case(_fixed(fn, len(inputs)), inputs, f"{name} n={n} shape={shape} {dtype}")

    return case


def _with_nans(x, seed):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(x.shape, generator=g)
    x = x.clone()
    x[mask < 0.2] = float("nan")
    x[mask > 0.9] = float("inf")
    return x


@st.composite
def clamp_case(draw) -> Case:
    n, shape, dtype, seed = _group(draw)
    lo = draw(st.sampled_from([-1.0, -0.5, None]))
    hi = draw(st.sampled_from([0.5, 1.0]))
    other = draw(st.booleans())  # one member with other bounds: never in the same group

    def fn(*xs):
        out = [torch.clamp(x, lo, hi) * (i + 1) for i, x in enumerate(xs)]
        if other:
            out.append(torch.clamp(xs[0], -2.0, 2.0))
        return tuple(out)

    inputs = [_x(shape, dtype, seed + i) for i in range(n)]
    return Case(_fixed(fn, n), inputs, f"clamp({lo}, {hi}) n={n} {shape} {dtype}")


@st.composite
def detach_case(draw) -> Case:
    n, shape, dtype, seed = _group(draw)

    def fn(*xs):
        return tuple(x * 2 + x.detach() for x in xs)  # detach outputs are not graph outputs

    return Case(_fixed(fn, n), [_x(shape, dtype, seed + i) for i in range(n)], f"detach n={n} {shape} {dtype}")


@st.composite
def dropout_case(draw) -> Case:
    n, shape, dtype, seed = _group(draw)
    spelling = draw(st.sampled_from(["functional", "torch"]))

    def fn(*xs):
        if spelling == "functional":
            return tuple(F.dropout(x, 1.0, True) + x for x in xs)
        return tuple(torch.dropout(x, 1.0, True) + x for x in xs)

    inputs = [_x(shape, dtype, seed + i) for i in range(n)]
    return Case(_fixed(fn, n), inputs, f"dropout {spelling} n={n} {shape} {dtype}")


@st.composite
def linear_case(draw) -> Case:
    n, shape, dtype, seed = _group(draw, rank_min=2, rank_max=3)
    k, o = shape[-1], draw(st.integers(1, 4))
    bias = draw(st.booleans())
    xs = [_x(shape, dtype, seed + i) for i in range(n)]
    ws = [_x((o, k), dtype, seed + 100 + i) for i in range(n)]
    bs = [_x((o,), dtype, seed + 200 + i) for i in range(n)] if bias else []

    def fn(*args):
        xs, ws, bs = args[:n], args[n:2 * n], args[2 * n:]
        return tuple(F.linear(x, w, bs[i] if bs else None) for i, (x, w) in enumerate(zip(xs, ws)))

    return Case(_fixed(fn, len(xs + ws + bs)), xs + ws + bs, f"linear n={n} x={shape} out={o} bias={bias} {dtype}")


@st.composite
def linear_lhs_case(draw) -> Case:
    n, shape, dtype, seed = _group(draw, rank_min=2, rank_max=3)
    k = shape[-1]
    outs = [draw(st.integers(1, 4)) for _ in range(n)]
    bias = draw(st.booleans())
    x = _x(shape, dtype, seed)
    ws = [_x((o, k), dtype, seed + 100 + i) for i, o in enumerate(outs)]
    bs = [_x((o,), dtype, seed + 200 + i) for i, o in enumerate(outs)] if bias else []

    def fn(x, *args):
        ws, bs = args[:n], args[n:]
        return tuple(F.linear(x, w, bs[i] if bs else None).relu() for i, w in enumerate(ws))

    return Case(_fixed(fn, 1 + len(ws + bs)), [x] + ws + bs, f"linear_lhs outs={outs} x={shape} bias={bias} {dtype}")


@st.composite
def gemm_lhs_case(draw) -> Case:
    """batch_gemm_lhs: GEMMs of one x spelled ``x @ P``, ``torch.matmul(x, P)``, ``torch.mm`` (rank 2) and bias-free
    ``F.linear(x, W)``, at least one a matmul."""
    n, shape, dtype, seed = _group(draw, rank_min=2, rank_max=3)
    k = shape[-1]
    spellings = ["@", "matmul", "linear"] + (["mm"] if len(shape) == 2 else [])
    kinds = [draw(st.sampled_from(spellings)) for _ in range(n)]
    if all(kd == "linear" for kd in kinds):
        kinds[0] = "@"
    outs = [draw(st.integers(1, 4)) for _ in range(n)]
    x = _x(shape, dtype, seed)
    ws = [_x((k, o) if kd != "linear" else (o, k), dtype, seed + 100 + i) for i, (kd, o) in enumerate(zip(kinds, outs))]
    ops = {"@": lambda x, w: x @ w, "matmul": torch.matmul, "mm": torch.mm, "linear": F.linear}

    def fn(x, *ws):
        return tuple(ops[kd](x, w).relu() for kd, w in zip(kinds, ws))

    return Case(_fixed(fn, 1 + n), [x] + ws, f"gemm_lhs kinds={kinds} outs={outs} x={shape} {dtype}")


@st.composite
def layernorm_case(draw) -> Case:
    n, shape, dtype, seed = _group(draw, rank_min=1, rank_max=3)
    nd = draw(st.integers(1, len(shape)))
    ns = tuple(shape[len(shape) - nd:])
    if math.prod(ns) < 4:
        # a layer norm over 1 or 2 elements has a zero input gradient that eager computes as rounding
        # noise (1e-5 in fp32, 1e-2 in bf16), which no other summation order reproduces; and 3 is
        # ill-conditioned in bf16: normalize over 4 or more
        shape[-1] = ns[-1] * 4
        ns = ns[:-1] + (shape[-1],)
    affine = draw(st.sampled_from(["both", "weight", "bias", "none"]))
    eps = draw(st.sampled_from([1e-5, 1e-3]))
    xs = [_x(shape, dtype, seed + i) for i in range(n)]
    ws = [_x(ns, dtype, seed + 100 + i) for i in range(n)] if affine in ("both", "weight") else []
    bs = [_x(ns, dtype, seed + 200 + i) for i in range(n)] if affine in ("both", "bias") else []

    def fn(*args):
        xs, rest = args[:n], args[n:]
        w = rest[:n] if ws else [None] * n
        b = rest[len(ws):] if bs else [None] * n
        return tuple(F.layer_norm(x, ns, w[i], b[i], eps) for i, x in enumerate(xs))

    note = f"layer_norm n={n} x={shape} ns={ns} {affine} eps={eps} {dtype}"
    return Case(_fixed(fn, len(xs + ws + bs)), xs + ws + bs, note)


@st.composite
def einsum_case(draw) -> Case:
    """An einsum "P i, Q i o -> P o" (Q a suffix of P, as upstream's "bni,nio->bno" and "bni,bnio->bno")
    feeding an add, plus a distractor einsum that is not a multiply-sum over x's last letter."""
    rank = draw(st.integers(1, 3))                       # letters in P
    letters = "abcd"[:rank]
    q = draw(st.integers(0, rank))                       # letters of P that w has too
    sizes = [draw(st.integers(1, 4)) for _ in range(rank)]
    i, o = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    dtype, seed = draw(st.sampled_from(DTYPES[:2])), draw(st.integers(0, 2**16))
    spaced = draw(st.booleans())
    eq = f"{letters}i,{letters[rank - q:]}io->{letters}o"
    if spaced:
        eq = eq.replace(",", ", ").replace("->", " -> ")
    x = _x(sizes + [i], dtype, seed)
    w = _x(sizes[rank - q:] + [i, o], dtype, seed + 1)
    b = _x(sizes + [o], dtype, seed + 2)
    m = _x([i, i], dtype, seed + 3)

    def fn(x, w, b, m):
        return torch.einsum(eq, x, w) + b, torch.einsum("ij,jk->ik", m, m.t())

    return Case(fn, [x, w, b, m], f"einsum {eq!r} x={tuple(x.shape)} w={tuple(w.shape)} {dtype}")


@st.composite
def embedding_bag_case(draw) -> Case:
    """n embedding bags of one dim and mode (tables of any number of rows), 2-D ids or 1-D ids with
    offsets (empty bags included; ``include_last_offset`` or not), per_sample_weights with sum (groups of
    six or more: eqsat prices that fused form at five kernels), a padding_idx per table (some negative)
    or none, plus a bag of another dim that must stay apart. Ids have repeats."""
    n, _, dtype, seed = _group(draw)
    dim = draw(st.integers(1, 4))
    mode = draw(st.sampled_from(["sum", "mean", "max"]))
    two_d = draw(st.booleans())
    last = draw(st.booleans())
    psw = mode == "sum" and n >= 6 and draw(st.booleans())
    g = torch.Generator().manual_seed(seed)
    rows = [draw(st.integers(1, 6)) for _ in range(n + 1)]
    pads = [draw(st.integers(-r, r - 1)) for r in rows] if draw(st.booleans()) else [None] * (n + 1)
    ws = [_x([r, dim + (i == n)], dtype, seed + i) for i, r in enumerate(rows)]
    xs, offs, ps = [], [], []
    bag = draw(st.integers(1, 3))  # 2-D ids: one bag size per group (in the group key), any batch
    for r in rows:
        if two_d:
            xs.append(torch.randint(0, r, (draw(st.integers(1, 3)), bag), generator=g))
        else:
            k = draw(st.integers(0, 5))
            xs.append(torch.randint(0, r, (k,), generator=g))
            cuts = sorted(draw(st.lists(st.integers(0, k), min_size=1, max_size=3)))
            offs.append(torch.tensor([0] + cuts + ([k] if last else [])))
        ps.append(_x(list(xs[-1].shape), dtype, seed + 50))
    m = n + 1

    def fn(*a):
        x, w, rest = a[:m], a[m:2 * m], a[2 * m:]
        o, rest = ([None] * m, rest) if two_d else (rest[:m], rest[m:])
        p = rest if psw else [None] * m
        return tuple(F.embedding_bag(x[i], w[i], o[i], mode=mode, include_last_offset=last and not two_d,
                                     per_sample_weights=p[i], padding_idx=pads[i]) for i in range(m))

    inputs = xs + ws + ([] if two_d else offs) + (ps if psw else [])
    return Case(_fixed(fn, len(inputs)), inputs,
                f"embedding_bag n={n} dim={dim} {mode} {'2-D' if two_d else f'1-D last={last}'} psw={psw} "
                f"pads={pads} {dtype}")


@st.composite
def embedding_case(draw) -> Case:
    """n lookups into tables of one dim, ids of rank 1 to 3 with repeats, plus one of another dim."""
    n, _, dtype, seed = _group(draw)
    dim = draw(st.integers(1, 4))
    g = torch.Generator().manual_seed(seed)
    ws, xs = [], []
    for i in range(n + 1):
        r = draw(st.integers(1, 6))
        ws.append(_x([r, dim + (i == n)], dtype, seed + i))
        shape = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(1, 3)))]
        xs.append(torch.randint(0, r, shape, generator=g))
    m = n + 1

    def fn(*a):
        return tuple(F.embedding(x, w) * 2 for x, w in zip(a[:m], a[m:]))

    return Case(_fixed(fn, 2 * m), xs + ws, f"embedding n={n} dim={dim} {dtype}")


CASES = {
    "batch_embedding_bag": embedding_bag_case,
    "batch_embedding": embedding_case,
    "einsum_to_pointwise_pass": einsum_case,
    "batch_linear_lhs": linear_lhs_case,
    "batch_gemm_lhs": gemm_lhs_case,
    "batch_linear": linear_case,
    "batch_layernorm": layernorm_case,
    "batch_tanh": _pointwise_case(torch.tanh, "tanh"),
    "batch_sigmoid": _pointwise_case(torch.sigmoid, "sigmoid"),
    "batch_relu": _pointwise_case(F.relu, "relu"),
    "batch_detach": detach_case,
    "batch_nan_to_num": _pointwise_case(lambda x: torch.nan_to_num(x, 0.5, 9.0, -9.0), "nan_to_num", _with_nans),
    "batch_clamp": clamp_case,
    "batch_dropout": dropout_case,
}
