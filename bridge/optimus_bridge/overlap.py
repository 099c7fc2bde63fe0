"""Storage-overlap facts of tensor layouts (shape, strides, storage offset), read from FakeTensors or real
tensors alike: whether a layout is static, whether two views of one storage share an element address,
whether one tensor's elements overlap each other. Used by lowering's output fix-ups and meta propagation,
and by the translator's alias analysis.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily


def static_layout(t: torch.Tensor) -> bool:
    """Are the sizes, strides and storage offset of ``t`` plain ints (no SymInt)?"""
    return (all(type(d) is int for d in t.shape) and all(type(d) is int for d in t.stride())
            and type(t.storage_offset()) is int)


def may_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Do two tensors of one storage share an element address? Exact for static sizes up to 2**16
    elements each (the addresses enumerated), else whether their address spans intersect."""
    if not (static_layout(a) and static_layout(b)) or a.numel() == 0 or b.numel() == 0:
        return not (static_layout(a) and static_layout(b))

    def span(t):
        lo = t.storage_offset() + sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if st < 0)
        hi = t.storage_offset() + sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if st > 0)
        return lo, hi

    (alo, ahi), (blo, bhi) = span(a), span(b)
    if ahi < blo or bhi < alo:
        return False
    if a.numel() > 2**16 or b.numel() > 2**16:
        return True
    with unset_fake_temporarily():  # inside Inductor a fake mode is active: these must be real tensors
        addr = torch.arange(max(ahi, bhi) + 1)
        pa = torch.as_strided(addr, tuple(a.shape), tuple(a.stride()), a.storage_offset())
        pb = torch.as_strided(addr, tuple(b.shape), tuple(b.stride()), b.storage_offset())
        return bool(torch.isin(pa.reshape(-1), pb.reshape(-1)).any())


def non_overlapping(t: torch.Tensor) -> bool:
    """No two elements of ``t`` share an address (dims by increasing stride, each past the span before)."""
    span = 1
    for st, n in sorted((st, n) for st, n in zip(t.stride(), t.shape) if n != 1):
        if st < span:
            return False
        span += (n - 1) * st
    return True