"""Predict how many kernels Inductor emits for a graph, without running Inductor (issue 15, item 1).

A model of Inductor's lowering and scheduler (torch 2.13), applied to an Aten-IR graph with FakeTensor
``meta["val"]`` (the graphs AOTAutograd hands Inductor: :func:`aten_graphs` traces them from a Torch-IR
graph with Inductor's decompositions and partitioner, no code generated). Rules, each from the Inductor
source named:

* **views are free** (``OpOverload.is_view``, ``getitem``): Inductor makes them ``ReinterpretView``/``View``
  of their base, read through an index expression;
* **externs are one kernel each**: ops Inductor leaves to ATen (``lowering.fallbacks``, ops with no
  lowering, and the matmul/convolution family ``mm``/``addmm``/``bmm``/``baddbmm``/``convolution``/
  ``convolution_backward``, lowered as ``extern_kernels.*`` calls); their inputs are realized buffers;
* **scatters** (``index_put``, ``scatter*``: a store through an index) are a kernel of their own;
* **reductions** (ops tagged ``torch.Tag.reduction``) are realized buffers of group ``(n, r)`` (output
  elements, reduced elements per output); ``r <= unroll_reductions_threshold`` (8) is unrolled into a
  pointwise node (``lowering.make_reduction``);
* **pointwise** ops are inlined into their readers (no buffer) unless realized (``graph.run_node``,
  ``ir.StorageBox.should_realize_on_reuse``): a graph output, read by an extern or a ``cat`` (CPU:
  ``ConcatKernel`` writes each computed input in place), or read by more than one op and either reading
  more than ``realize_reads_threshold`` (4) buffers or, on CPU, computing ``exp``/``log``/``sigmoid``/``tanh``;
* **cat**: on CPU a ``ConcatKernel`` (``lowering.cat``): a computed input is written in place by its own
  node, an input that is already a buffer (an extern's output, a graph input, a shared buffer) gets a copy
  node; on CUDA a ``pointwise_cat`` (one pointwise node reading every input) up to
  ``max_pointwise_cat_inputs`` (8) inputs, above that the CPU form;
* **fusion** (``scheduler.Scheduler.fuse_nodes``): realized nodes that share a buffer (one reads what the
  other writes, or both read one buffer of at least ``score_fusion_memory_threshold`` bytes) fuse when
  their loop groups are compatible and the fusion makes no cycle, at most ``max_fusion_size`` (64) nodes;
  CPU (``CppScheduling._why_fuse_nodes``, ``can_fuse_vertical_outer_loop``): equal element counts, a
  pointwise node into a reduction over as many elements, a reduction's reader over its outer loop (n or
  n*r elements) and horizontal groups of at most ``cpp.max_horizontal_fusion_size`` (16); CUDA
  (``SIMDScheduling.can_fuse``): equal ``(numel, rnumel)`` or a pointwise node of ``numel * rnumel`` or
  ``numel`` elements with a reduction, no horizontal limit but 64.

Horizontal fusion of independent nodes that share no buffer (``combo_kernels``) is off in Inductor's
default config and is not modelled. What is approximated: loop groups are compared by element counts, not
by their ranges and index expressions (a transposed read that blocks a fusion is not seen); split
reductions on CUDA (a large ``r`` with a small ``n`` is two kernels) are not modelled.

:func:`predict` gives a :class:`KernelPrediction` per graph; :func:`predict_module` traces a Torch-IR
graph and sums its forward and, when training, backward graphs.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

import torch
import torch.fx

aten = torch.ops.aten

#: Inductor's extern matmul/convolution calls (``kernel/mm.py``, ``kernel/bmm.py``, ``kernel/conv.py``):
#: each one ATen call (or one template kernel under max-autotune, not modelled).
EXTERN_OPS = frozenset({
    aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default, aten.convolution.default,
    aten.convolution_backward.default, aten._int_mm.default, aten.addbmm.default,
})
#: stores through an index: one kernel each, never fused with the nodes around them
SCATTER_OPS = frozenset({
    aten.index_put.default, aten.index_put_.default, aten._unsafe_index_put.default, aten.scatter.src,
    aten.scatter.value, aten.scatter_add.default, aten.scatter_reduce.two, aten.scatter_.src,
    aten.scatter_add_.default, aten.index_add.default,
})
#: allocations without a computed value (no kernel; a reader sees an input buffer)
ALLOC_OPS = frozenset({aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default,
                       aten.new_empty.default, aten.new_empty_strided.default})
#: pointwise ops whose reuse realizes them on CPU (``should_realize_on_reuse``'s heavy ops)
CPU_HEAVY = frozenset({"exp", "log", "log10", "log1p", "log2", "sigmoid", "tanh"})
#: Inductor config values the rules use (torch 2.13 defaults)
REALIZE_READS_THRESHOLD = 4
UNROLL_REDUCTIONS_THRESHOLD = 8
MAX_POINTWISE_CAT_INPUTS = 8
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


def _val(node):
    v = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return v


def _numel(v) -> int:
    if isinstance(v, torch.Tensor):
        try:
            return int(math.prod(int(s) for s in v.shape))
        except (TypeError, ValueError):  # unbacked symbolic size
            return 1
    if isinstance(v, (tuple, list)):
        for x in v:
            if isinstance(x, torch.Tensor):
                return _numel(x)
    return 0


def _dim0(v) -> int:
    """The outermost loop's size: the first dimension of ``v`` above 1 (Inductor drops loops of size 1;
    a reduction's output keeps its outer loops), 1 for a scalar."""
    if isinstance(v, (tuple, list)):
        v = next((x for x in v if isinstance(x, torch.Tensor)), None)
    if isinstance(v, torch.Tensor):
        for s in v.shape:
            try:
                if int(s) > 1:
                    return int(s)
            except (TypeError, ValueError):
                return 1
    return 1


def _itemsize(v) -> int:
    if isinstance(v, torch.Tensor):
        return v.element_size()
    if isinstance(v, (tuple, list)):
        for x in v:
            if isinstance(x, torch.Tensor):
                return x.element_size()
    return 4


def _tensor_args(node: torch.fx.Node) -> list[torch.fx.Node]:
    out: list[torch.fx.Node] = []

    def visit(a):
        if isinstance(a, torch.fx.Node):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            for x in a:
                visit(x)
        elif isinstance(a, dict):
            for x in a.values():
                visit(x)
    visit(node.args)
    visit(node.kwargs)
    return out


def _kind(node: torch.fx.Node, lowerings, fallbacks) -> str:
    """``input``, ``view``, ``alloc``, ``extern``, ``scatter``, ``cat``, ``reduction``, ``pointwise`` or
    ``other`` (output and non-tensor nodes)."""
    if node.op in ("placeholder", "get_attr"):
        return "input"
    if node.op != "call_function":
        return "other"
    t = node.target
    if t is operator.getitem:
        return "view"
    if not isinstance(t, torch._ops.OpOverload):
        return "other" if not isinstance(_val(node), torch.Tensor) else "extern"
    if not isinstance(_val(node), (torch.Tensor, tuple, list)):
        return "other"
    if t in ALLOC_OPS:
        return "alloc"
    if t.is_view or t in (aten.alias.default, aten.detach.default, aten.lift_fresh.default):
        return "view"
    if t in (aten.cat.default,):
        return "cat"
    if t in EXTERN_OPS:
        return "extern"
    if t in SCATTER_OPS:
        return "scatter"
    if t in fallbacks or t not in lowerings:
        return "extern"
    if torch.Tag.reduction in t.tags:
        return "reduction"
    return "pointwise"


class _Sched:
    """One realized node of the model scheduler."""

    __slots__ = ("id", "names", "kind", "key", "reads", "fx")

    def __init__(self, i, name, kind, key, reads, fx):
        self.id, self.names, self.kind, self.key, self.reads, self.fx = i, [name], kind, key, reads, fx


def predict(gm: torch.fx.GraphModule, device: str = "cpu") -> KernelPrediction:
    """Kernels Inductor (torch 2.13, default config) emits for the Aten-IR graph ``gm``.

    Args:
        gm: an Aten-IR graph whose nodes carry FakeTensor ``meta["val"]`` (as :func:`aten_graphs` gives, or
            Inductor's post-grad graph).
        device: ``"cpu"`` (C++ kernels) or ``"cuda"`` (Triton kernels): the fusion rules differ.

    Returns the prediction (see the module docstring for the rules).

    Raises:
        ValueError: ``device`` is not ``"cpu"`` or ``"cuda"``.
    """
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    from torch._inductor.lowering import fallbacks, lowerings

    cpu = device == "cpu"
    nodes = list(gm.graph.nodes)
    kind = {n: _kind(n, lowerings, fallbacks) for n in nodes}

    def base(n):
        while kind.get(n) == "view" and _tensor_args(n):
            n = _tensor_args(n)[0]
        return n

    # consumers through views: what reads each non-view node's storage
    readers: dict[torch.fx.Node, list[torch.fx.Node]] = {n: [] for n in nodes}
    to_output: set[torch.fx.Node] = set()
    for n in nodes:
        if kind[n] == "view":
            continue
        for a in _tensor_args(n):
            b = base(a)
            if n.op == "output":
                to_output.add(b)
            else:
                readers[b].append(n)

    # realization, in topological order: for each node the buffers its (inlined) value reads
    realized: dict[torch.fx.Node, bool] = {}
    reads: dict[torch.fx.Node, frozenset] = {}
    heavy: dict[torch.fx.Node, bool] = {}
    sched: list[_Sched] = []
    producer: dict[torch.fx.Node, _Sched] = {}  # realized node -> its scheduler node
    extern = 0
    cat_copy_inputs: set[torch.fx.Node] = set()
    cat_writers: dict[torch.fx.Node, list[_Sched]] = {}

    def buf_reads(a) -> frozenset:
        b = base(a)
        if realized.get(b, True):
            return frozenset([(b, a)])
        return reads[b]

    def add(n, k, key, r):
        s = _Sched(len(sched), n.name, k, key, frozenset(r), n)
        sched.append(s)
        producer[n] = s
        return s

    pointwise_cat = {}
    for n in nodes:
        k = kind[n]
        if k in ("view", "other"):
            continue
        if k in ("input", "alloc"):
            realized[n] = True
            continue
        args = [a for a in _tensor_args(n) if kind.get(base(a)) not in ("other",)]
        if k in ("extern", "scatter"):
            for a in args:
                _realize(base(a), realized, reads, readers, producer, sched, add, n)
            realized[n] = True
            s = add(n, k, None, set().union(*[buf_reads(a) for a in args]) if args else set())
            extern += 1
            continue
        if k == "cat":
            ins = [base(a) for a in args]
            if not cpu and len(ins) <= MAX_POINTWISE_CAT_INPUTS:
                pointwise_cat[n] = True
                k = "pointwise"
            else:
                writers = []
                for a, b in zip(args, ins):
                    if kind[b] == "pointwise" and not realized.get(b, False) and b not in cat_copy_inputs:
                        _realize(b, realized, reads, readers, producer, sched, add, n)
                        writers.append(producer[b])
                    else:  # a buffer already: copied into its slice by a pointwise node
                        copy_node = _Sched(len(sched), f"{n.name}_copy_{b.name}", "pointwise",
                                           ("p", _numel(_val(a)), _dim0(_val(a))), buf_reads(a), None)
                        sched.append(copy_node)
                        writers.append(copy_node)
                    cat_copy_inputs.add(b)
                realized[n] = True
                # the cat buffer is written by its inputs' nodes: a reader depends on all of them
                producer[n] = None
                cat_writers[n] = writers
                continue
        my_reads = frozenset().union(*[buf_reads(a) for a in args]) if args else frozenset()
        my_heavy = any(heavy.get(base(a), False) for a in args if not realized.get(base(a), True))
        name = getattr(n.target, "_opname", str(n.target))
        my_heavy = my_heavy or name in CPU_HEAVY
        reads[n], heavy[n] = my_reads, my_heavy
        if k == "reduction":
            out_n = _numel(_val(n))
            big = max(args, key=lambda a: _numel(_val(a)), default=None)
            in_n = _numel(_val(big)) if big is not None else out_n
            r = in_n // max(out_n, 1)
            if r <= UNROLL_REDUCTIONS_THRESHOLD:
                # unrolled into a pointwise node over the outputs; it still fuses like the reduction it
                # computes (its reads are r elements apart per output)
                realized[n] = True
                add(n, "pointwise", ("u", out_n, r, _dim0(_val(n))), my_reads)
                continue
            else:
                realized[n] = True
                add(n, "reduction", ("r", out_n, r, _dim0(_val(n))), my_reads)
                continue
        # pointwise: realized now or left to be inlined (decided when a reader needs it, or below)
        users = {id(u) for u in readers[n]}
        if n in to_output:
            realized[n] = False
            _realize(n, realized, reads, readers, producer, sched, add, None)
        elif len(users) > 1 and (len({b for b, _ in my_reads}) > REALIZE_READS_THRESHOLD or (cpu and my_heavy)):
            realized[n] = False
            _realize(n, realized, reads, readers, producer, sched, add, None)
        else:
            realized[n] = False

    # dependencies: a scheduler node reads buffers; a cat buffer stands for its inputs' nodes
    def producers_of(b, seen=None):
        if b in producer and producer[b] is not None:
            return [producer[b]]
        return cat_writers.get(b, [])

    deps: list[set[int]] = []
    for s in sched:
        d = set()
        for b, _view in s.reads:
            for p in producers_of(b):
                if p.id != s.id:
                    d.add(p.id)
        deps.append(d)
    # the nodes that write one cat buffer share it (their writes are slices of one buffer)
    writes = {w.id: cat for cat, ws in cat_writers.items() for w in ws}
    return _fuse(sched, deps, cpu, extern, writes)


def _realize(b, realized, reads, readers, producer, sched, add, by) -> None:
    """Make the pointwise node ``b`` a buffer (a scheduler node) if it is not one yet."""
    if realized.get(b, True) or b in producer:
        realized[b] = True
        return
    realized[b] = True
    add(b, "pointwise", ("p", _numel(_val(b)), _dim0(_val(b))), reads.get(b, frozenset()))


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


def _fuse(sched: list[_Sched], deps: list[set[int]], cpu: bool, extern: int, writes: dict) -> KernelPrediction:
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
    vertical = [(j, i) for i, d in enumerate(deps) for j in sorted(d)]
    # readers of one view of a buffer share memory deps (Scheduler.score_fusion_memory); readers of
    # different views of one buffer (split pieces) only count when neither is a reduction
    # (_can_use_buffer_overlap_scoring)
    exact: dict[object, list[int]] = {}
    overlap: dict[object, list[int]] = {}
    for s in sched:
        if not fusable[s.id]:
            continue
        for b, v in s.reads:
            val = _val(v) if isinstance(v, torch.fx.Node) else None
            if _numel(val) * _itemsize(val) >= SCORE_FUSION_MEMORY_THRESHOLD:
                exact.setdefault((b, v), []).append(s.id)
                overlap.setdefault(b, []).append(s.id)
    for i, cat in writes.items():
        if fusable[i]:
            overlap.setdefault(("write", cat), []).append(i)
    # pairs within each buffer's readers, as Scheduler.get_possible_fusions tries them (at most
    # max_fusion_buffer_group_pairwise_attempts = 64 nodes apart)
    horizontal = [(ids[i], ids[j], same) for groups, same in ((exact, True), (overlap, False))
                  for ids in groups.values() for i in range(len(ids)) for j in range(i + 1, min(len(ids), i + 65))]

    def has_reduction(g):
        return any(key[m][0] == "r" for m in members[g])

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


def aten_graphs(gm: torch.fx.GraphModule, example_inputs, training: bool | None = None) -> list[torch.fx.GraphModule]:
    """The Aten-IR graphs Inductor would lower for the Torch-IR graph ``gm``: AOTAutograd with Inductor's
    decomposition table, its joint-graph passes and partitioner (``compile_fx.partition_fn``: pattern
    rewrites such as attention fusion, then ``min_cut_rematerialization_partition``) and its post-grad
    passes (no Inductor lowering or code generation), traced on
    ``example_inputs`` (real or fake tensors; nothing is compiled, the graphs run once to reach the
    backward). Returns ``[forward]`` or, when an output requires grad (``training`` not False),
    ``[forward, backward]``.
    """
    import copy

    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func
    from torch._inductor.decomposition import select_decomp_table

    from torch._guards import detect_fake_mode
    from torch._inductor import compile_fx as inductor_compile
    from torch._inductor.virtualized import V

    graphs: dict[str, torch.fx.GraphModule] = {}

    def grab(name, inference=False):
        def compiler(g, inputs):
            if inference:  # what Inductor's inference compiler runs first
                g = inductor_compile._recursive_joint_graph_passes(g)
            g = copy.copy(g)
            # Inductor's post-grad passes (pattern rewrites, no-op removal) on the graph it lowers
            with V.set_fake_mode(detect_fake_mode(inputs) or torch._subclasses.FakeTensorMode()):
                inductor_compile._recursive_post_grad_passes(g, is_inference=inference)
            graphs[name] = g
            return make_boxed_func(g.forward)
        return compiler

    backend = aot_autograd(fw_compiler=grab("forward"), bw_compiler=grab("backward"),
                           inference_compiler=grab("forward", True), decompositions=select_decomp_table(),
                           partition_fn=inductor_compile.partition_fn)
    gm = copy.deepcopy(gm)
    with torch.enable_grad() if training else torch.no_grad():
        fn = backend(gm, list(example_inputs))
        if training and "backward" not in graphs:
            out = fn(*example_inputs)
            outs = [o for o in (out if isinstance(out, (tuple, list)) else [out])
                    if isinstance(o, torch.Tensor) and o.requires_grad]
            if outs:
                torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
    return [graphs[k] for k in ("forward", "backward") if k in graphs]


def predict_module(gm: torch.fx.GraphModule, example_inputs, device: str = "cpu",
                   training: bool | None = None) -> KernelPrediction:
    """Kernels Inductor emits for the Torch-IR graph ``gm`` (forward, and backward when ``training``):
    :func:`predict` on each graph of :func:`aten_graphs`."""
    total = KernelPrediction()
    for g in aten_graphs(gm, example_inputs, training):
        total = total + predict(g, device)
    return total
