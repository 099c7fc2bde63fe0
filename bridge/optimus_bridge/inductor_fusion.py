"""The fusion half of the kernel predictor (:mod:`optimus_bridge.inductor_kernels`): the scheduler's nodes
(:class:`SchedNode`), when two loop groups may fuse, and the greedy fusion of the realized nodes into kernels, the
way Inductor's scheduler does it (``torch/_inductor/scheduler.py``: ``fuse_nodes``, ``can_fuse``, ``score_fusion``;
``codegen/cpp.py`` for the CPU's outer-loop and horizontal limits). The constants below are Inductor's
(``torch._inductor.config`` defaults of torch 2.13) unless a comment says otherwise."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import torch
import torch.fx

MAX_FUSION_SIZE = 64
CPP_MAX_HORIZONTAL_FUSION_SIZE = 16
SCORE_FUSION_MEMORY_THRESHOLD = 10  # bytes


@dataclass
class KernelPrediction:
    """Kernels predicted for one or more graphs.

    Attributes:
        fused: Inductor-generated kernels (fusion groups of pointwise and reduction nodes).
        extern: extern/fallback ATen calls and scatter kernels.
        groups: per generated kernel, the FX node names fused into it (for explanations).
    """

    fused: int = 0
    extern: int = 0
    groups: list[list[str]] = field(default_factory=list)

    @property
    def kernels(self) -> int:
        """All kernels: generated plus extern calls."""
        return self.fused + self.extern

    def __add__(self, other: "KernelPrediction") -> "KernelPrediction":
        return KernelPrediction(self.fused + other.fused, self.extern + other.extern, self.groups + other.groups)


#: Whether to model buffer-overlap scoring: ``None`` reads the installed Inductor (:func:`buffer_overlap_scoring`);
#: ``False`` models an Inductor without it (predicting the H200's torch 2.11 on a machine with torch 2.13)
OVERLAP_SCORING: bool | None = None


def buffer_overlap_scoring() -> bool:
    """Whether Inductor scores readers of different views of one buffer as sharing memory
    (``Scheduler._can_use_buffer_overlap_scoring``, torch 2.13 has it): without it (the H200's torch 2.11
    ran DHEN's q, k and v slices of one projection as three kernels) such readers do not fuse."""
    if OVERLAP_SCORING is not None:
        return OVERLAP_SCORING
    return _installed_overlap_scoring()


@functools.lru_cache(maxsize=1)
def _installed_overlap_scoring() -> bool:
    from torch._inductor.scheduler import Scheduler

    return hasattr(Scheduler, "_can_use_buffer_overlap_scoring")


def node_val(node):
    v = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return v


def numel_of(v) -> int:
    if isinstance(v, torch.Tensor):
        try:
            return int(math.prod(int(s) for s in v.shape))
        except (TypeError, ValueError):  # unbacked symbolic size
            return 1
    if isinstance(v, (tuple, list)):
        for x in v:
            if isinstance(x, torch.Tensor):
                return numel_of(x)
    return 0


def itemsize_of(v) -> int:
    if isinstance(v, torch.Tensor):
        return v.element_size()
    if isinstance(v, (tuple, list)):
        for x in v:
            if isinstance(x, torch.Tensor):
                return x.element_size()
    return 4


class SchedNode:
    """One realized node of the model scheduler."""

    __slots__ = ("id", "names", "kind", "key", "reads", "fx", "transposed")

    def __init__(self, i, name, kind, key, reads, fx):
        self.id, self.names, self.kind, self.key, self.reads, self.fx = i, [name], kind, key, reads, fx
        self.transposed = kind == "pointwise" and transposed_layout(node_val(fx) if fx is not None else None)


def transposed_layout(v) -> bool:
    """Whether the tensor ``v`` is stored in an order other than row-major (its dims above size 1 not in
    decreasing stride order): a pointwise node writing such a buffer iterates in that order."""
    if not isinstance(v, torch.Tensor):
        return False
    try:
        dims = [(int(st), int(sz)) for st, sz in zip(v.stride(), v.shape) if int(sz) > 1]
    except (TypeError, ValueError):
        return False
    return any(a[0] < b[0] for a, b in zip(dims, dims[1:]))


def _compatible(a: tuple, b: tuple, vertical: bool, cpu: bool) -> bool:
    """Whether fused nodes of loop groups ``a`` and ``b`` may fuse (``vertical``: ``b`` depends on ``a``).
    Groups: ``("p", numel, outer)`` or ``("r", n, r, outer)``, ``outer`` the outermost loop's size."""
    if a == b:
        return True
    if a[0] == "u" or b[0] == "u":  # an unrolled reduction: pointwise over n, or a reduction of n x r
        u, o = (a, b) if a[0] == "u" else (b, a)
        if o[0] in "ur" and o[1:3] == u[1:3]:
            return True
        if o[0] == "p" and o[1] in (u[1], u[1] * u[2]):
            return True
    if cpu and vertical and a[-1] == b[-1] and a[-1] > 1:
        return True  # outer-loop fusion (CppScheduling.can_fuse_vertical_outer_loop)
    if a[0] in "pu" and b[0] in "pu":
        return a[1] == b[1]
    if a[0] == "r" and b[0] == "r":
        return a[1:3] == b[1:3]
    if a[0] == "p":  # a pointwise producer (or sibling) of a reduction over as many elements
        return a[1] == b[1] * b[2]
    # a reduction then a pointwise node: CPU only over a common outer loop (above); CUDA over the
    # reduction's elements (persistent reduction) or its outputs (epilogue)
    return not cpu and b[1] in (a[1] * a[2], a[1])


def fuse_kernels(sched: list[SchedNode], deps: list[set[int]], cpu: bool, extern: int, writes: dict,
                 no_vertical: set[tuple[int, int]] = frozenset()) -> KernelPrediction:
    """Greedy fusion of the scheduler nodes ``sched`` (``deps[i]``: ids node ``i`` depends on) into kernels:
    producer -> reader pairs first (except the ``(producer, reader)`` pairs in ``no_vertical``, which only
    order), then readers of one buffer and the writers of one cat buffer (``writes``: id -> cat), rounds until
    nothing changes. ``extern`` is passed through as the extern kernel count."""
    n = len(sched)
    parent = list(range(n))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    members = {i: [i] for i in range(n)}
    key = {i: sched[i].key for i in range(n)}
    fusable = [s.kind in ("pointwise", "reduction") for s in sched]
    # group-level dependency edges (successors), kept up to date on each union
    succ: dict[int, set[int]] = {i: set() for i in range(n)}
    pred: dict[int, set[int]] = {i: set() for i in range(n)}
    for i, d in enumerate(deps):
        for j in d:
            succ[j].add(i)
            pred[i].add(j)

    def reaches(src, dst, skip_direct):
        """Whether group ``dst`` is reachable from group ``src`` by a path of length >= 2."""
        stack = [x for x in succ[src] if x != dst] if skip_direct else list(succ[src])
        seen = set(stack)
        while stack:
            x = stack.pop()
            if x == dst:
                return True
            for y in succ[x]:
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
        return False

    def group_key(g):
        ks = [key[m] for m in members[g]]
        red = [k for k in ks if k[0] == "r"] or [k for k in ks if k[0] == "u"]
        return red[0] if red else ks[0]

    def has_reduction(g):
        return any(key[m][0] == "r" for m in members[g])

    def transposed(g):
        return any(sched[m].transposed for m in members[g])

    def try_union(a, b, vertical):
        ga, gb = find(a), find(b)
        if ga == gb or not (fusable[a] and fusable[b]):
            return False
        size = len(members[ga]) + len(members[gb])
        if size > MAX_FUSION_SIZE:
            return False
        if cpu and not vertical and size > CPP_MAX_HORIZONTAL_FUSION_SIZE:
            return False
        if not (_compatible(group_key(ga), group_key(gb), vertical, cpu)
                or (not vertical and _compatible(group_key(gb), group_key(ga), False, cpu))):
            return False
        # all members of one reduction group must share it
        ra = {key[m] for m in members[ga] if key[m][0] == "r"}
        rb = {key[m] for m in members[gb] if key[m][0] == "r"}
        if ra and rb and {k[1:3] for k in ra} != {k[1:3] for k in rb} and not cpu:
            return False
        if not cpu and ((has_reduction(ga) and transposed(gb)) or (has_reduction(gb) and transposed(ga))):
            # a pointwise buffer stored transposed is iterated in its storage order; a reduction reading (or
            # written with) it iterates rows: the loop orders differ and Triton keeps them apart (the H200's
            # launch-bound step: ``triton_poi_fused_add_permute_relu_tanh`` writes a column-major buffer,
            # ``triton_red_fused_mul_sum`` then reduces its rows)
            return False
        if reaches(ga, gb, True) or reaches(gb, ga, True):
            return False
        parent[gb] = ga
        members[ga].extend(members.pop(gb))
        for s in succ.pop(gb):
            pred[s].discard(gb)
            if s != ga:
                succ[ga].add(s)
                pred[s].add(ga)
        for p in pred.pop(gb):
            succ[p].discard(gb)
            if p != ga:
                succ[p].add(ga)
                pred[ga].add(p)
        succ[ga].discard(ga)
        pred[ga].discard(ga)
        return True

    # candidate pairs: producer -> reader first (vertical), then readers of one buffer (horizontal)
    vertical = [(j, i) for i, d in enumerate(deps) for j in sorted(d) if (j, i) not in no_vertical]
    # readers of one view of a buffer share memory deps (Scheduler.score_fusion_memory); readers of
    # different views of one buffer (split pieces) only count when neither is a reduction
    # (_can_use_buffer_overlap_scoring)
    exact: dict[object, list[int]] = {}
    overlap: dict[object, list[int]] = {}
    for s in sched:
        if not fusable[s.id]:
            continue
        for b, v in s.reads:
            outer = v[-1] if isinstance(v, tuple) else v  # (inner view, slice of an inlined node)
            val = node_val(outer) if isinstance(outer, torch.fx.Node) else None
            if numel_of(val) * itemsize_of(val) >= SCORE_FUSION_MEMORY_THRESHOLD:
                exact.setdefault((b, v), []).append(s.id)
                if buffer_overlap_scoring():
                    overlap.setdefault(b, []).append(s.id)
    for i, cat in writes.items():
        if fusable[i]:
            overlap.setdefault(("write", cat), []).append(i)
    # pairs within each buffer's readers, as Scheduler.get_possible_fusions tries them (at most
    # max_fusion_buffer_group_pairwise_attempts = 64 nodes apart)
    horizontal = [(ids[i], ids[j], same) for groups, same in ((exact, True), (overlap, False))
                  for ids in groups.values() for i in range(len(ids)) for j in range(i + 1, min(len(ids), i + 65))]

    for _round in range(10):
        changed = False
        for a, b in vertical:
            changed |= try_union(a, b, True)
        for a, b, same_view in horizontal:
            if not same_view and (has_reduction(find(a)) or has_reduction(find(b))):
                continue
            if find(b) in pred.get(find(a), ()):
                a, b = b, a
            changed |= try_union(a, b, find(a) in pred.get(find(b), ()))
        if not changed:
            break
    groups = {}
    for i in range(n):
        if fusable[i]:
            groups.setdefault(find(i), []).extend(sched[i].names)
    return KernelPrediction(fused=len(groups), extern=extern, groups=list(groups.values()))
