"""Predict how many kernels Inductor emits for a graph, without running Inductor.

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
  ``max_pointwise_cat_inputs`` (8) inputs, above that the CPU form, whose writers (each storing its own
  buffer name, ``NonOwningLayout``) fuse with no other writer or the cat's reader unless buffer-overlap
  scoring applies; copies of graph inputs are one foreach kernel (``register_operation_list``);
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
by their ranges and index expressions (a transposed read that blocks a fusion is not seen). **Split
reductions** (CUDA): a reduction with few outputs and many elements each is two kernels
(:func:`~optimus_bridge.cuda_kernel_rules.split_reduction`, the H200's figures); the second stage is counted as a kernel of its own.
**Split-K GEMMs** (CUDA): cuBLAS runs some ``mm`` with a long contraction dim and few output tiles as two
GPU activities (:mod:`optimus_bridge.cuda_kernel_rules`: :func:`split_k_gemm`, a fit to the H200's per-call kernel lists); ``baddbmm`` and an ``addmm``
without cuBLASLt's bias epilogue copy their bias into the output first, one more (:func:`bias_copied`); a few
ATen ops launch many kernels (:func:`extern_gpu_kernels`: the embedding-bag gradient's radix sort). A
pointwise node stored transposed does not fuse with a reduction on CUDA (``inductor_fusion``). Graphs traced
on CPU and predicted for CUDA get Inductor's CUDA-only pattern passes (:func:`_cuda_passes`).

:func:`predict` gives a :class:`KernelPrediction` per graph; :func:`predict_module` traces a Torch-IR
graph and sums its forward and, when training, backward graphs.
"""

from __future__ import annotations

import contextlib
import operator

import torch
import torch.fx

from optimus_bridge.cuda_kernel_rules import extern_gpu_kernels, split_reduction
from optimus_bridge.cuda_kernel_rules import tensor_args as _tensor_args
from optimus_bridge.inductor_fusion import (KernelPrediction, SchedNode, buffer_overlap_scoring, fuse_kernels,
                                           node_val, numel_of)

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
        return "other" if not isinstance(node_val(node), torch.Tensor) else "extern"
    if not isinstance(node_val(node), (torch.Tensor, tuple, list)):
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
    sched: list[SchedNode] = []
    producer: dict[torch.fx.Node, SchedNode] = {}  # realized node -> its scheduler node
    extern = 0
    cat_copy_inputs: set[torch.fx.Node] = set()
    cat_writers: dict[torch.fx.Node, list[SchedNode]] = {}

    def buf_reads(a) -> frozenset:
        b = base(a)
        if realized.get(b, True):
            return frozenset([(b, a)])
        if a is not b and numel_of(node_val(a)) < numel_of(node_val(b)):
            # a slice of an inlined node reads a part of each buffer that node reads: readers of different
            # slices share no memory dependency (Inductor's MemoryDep holds the sliced index), so they fuse
            # only under buffer-overlap scoring (the H200's torch 2.11 ran DHEN's q, k and v slices of one
            # projection plus its bias, ``triton_poi_fused_addmm_clone_permute_slice_view_0/1/2``, apart)
            return frozenset((b2, (v2, a)) for b2, v2 in reads[b])
        return reads[b]

    def add(n, k, key, r):
        s = SchedNode(len(sched), n.name, k, key, frozenset(r), n)
        sched.append(s)
        producer[n] = s
        return s

    pointwise_cat = {}
    foreach: set[int] = set()  # CUDA: copies of graph inputs into a cat (ConcatKernel's foreach list)
    splits: list[str] = []  # CUDA reductions Inductor splits in two kernels
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
            extern += 1 if cpu else extern_gpu_kernels(n)
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
                        copy_node = SchedNode(len(sched), f"{n.name}_copy_{b.name}", "pointwise",
                                           ("p", numel_of(node_val(a)), _dim0(node_val(a))), buf_reads(a), None)
                        sched.append(copy_node)
                        writers.append(copy_node)
                        if b.op == "placeholder":  # ``StorageBox.is_input_buffer``: not a constant
                            foreach.add(copy_node.id)
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
            out_n = numel_of(node_val(n))
            big = max(args, key=lambda a: numel_of(node_val(a)), default=None)
            in_n = numel_of(node_val(big)) if big is not None else out_n
            r = in_n // max(out_n, 1)
            if r <= UNROLL_REDUCTIONS_THRESHOLD:
                # unrolled into a pointwise node over the outputs; it still fuses like the reduction it
                # computes (its reads are r elements apart per output)
                realized[n] = True
                add(n, "pointwise", ("u", out_n, r, _dim0(node_val(n))), my_reads)
                continue
            else:
                realized[n] = True
                add(n, "reduction", ("r", out_n, r, _dim0(node_val(n))), my_reads)
                if not cpu and split_reduction(n, out_n, r):
                    splits.append(n.name)
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
    through_cat: set[tuple[int, int]] = set()  # (writer, reader) edges that go through a cat buffer
    for s in sched:
        d = set()
        for b, _view in s.reads:
            for p in producers_of(b):
                if p.id != s.id:
                    d.add(p.id)
                    if b in cat_writers:
                        through_cat.add((p.id, s.id))
        deps.append(d)
    # the nodes that write one cat buffer share it (their writes are slices of one buffer). On CUDA that
    # counts only for copies of graph inputs (``ConcatKernel.create`` registers them as one foreach list:
    # ``triton_for_fused``) or under buffer-overlap scoring: otherwise a writer stores its own buffer name
    # (``NonOwningLayout``), the writers share no memory dependency and each is a kernel of its own (the H200's
    # plain-Inductor launch-bound model: 32 stack writers and 32 cat copies per layer, 259 kernels); nor does a
    # reader of the cat buffer share a dependency with its writers, so they do not fuse vertically either
    writes = {w.id: cat for cat, ws in cat_writers.items() for w in ws
              if cpu or w.id in foreach or buffer_overlap_scoring()}
    no_vertical = set() if cpu or buffer_overlap_scoring() else through_cat
    pred = fuse_kernels(sched, deps, cpu, extern, writes, no_vertical)
    # a split reduction's second stage (the partial results reduced) is a kernel of its own: it reads only
    # the first stage's buffer, which no other node reads
    pred.fused += len(splits)
    pred.groups.extend([f"{name}_split_stage2"] for name in splits)
    return pred


def _realize(b, realized, reads, readers, producer, sched, add, by) -> None:
    """Make the pointwise node ``b`` a buffer (a scheduler node) if it is not one yet."""
    if realized.get(b, True) or b in producer:
        realized[b] = True
        return
    realized[b] = True
    add(b, "pointwise", ("p", numel_of(node_val(b)), _dim0(node_val(b))), reads.get(b, frozenset()))


_EMULATE_CUDA = [False]


def _install_attention_check() -> None:
    """Wrap Inductor's attention-fusion check (``fx_passes.fuse_attention._sfdp_params_check``) once, before
    its patterns are registered (they keep the function they were given): while :func:`_cuda_passes` is
    active, a float32 attention is refused as on CUDA without TF32 (the check's own rule: "fused kernels use
    tf32"; the H200 ran DHEN's attention as two bmm and a softmax kernel). Patterns registered before this
    ran (an earlier Inductor compile in the process) keep the unwrapped check."""
    from torch._inductor.fx_passes import fuse_attention

    check = fuse_attention._sfdp_params_check
    if getattr(check, "_optimus_wrapped", False):
        return

    def params_check(match):
        q = match.kwargs["query"].meta["val"]
        if _EMULATE_CUDA[0] and q.dtype == torch.float32 and torch.backends.cuda.matmul.fp32_precision != "tf32":
            return False
        return check(match)
    params_check._optimus_wrapped = True
    fuse_attention._sfdp_params_check = params_check


@contextlib.contextmanager
def _cuda_passes(on: bool):
    """Inductor's pattern passes as they run for CUDA tensors, applied to graphs traced on CPU (``on``):
    ``post_grad.should_prefer_unfused_addmm`` (an ``addmm`` whose readers are all pointwise becomes ``mm``
    plus a bias add fused into the readers, GPU only: the H200's ``triton_poi_fused_addmm_...`` kernels) and
    the float32 attention check of :func:`_install_attention_check`."""
    from torch._inductor.fx_passes import post_grad

    _install_attention_check()
    if not on:
        yield
        return
    is_gpu = post_grad.is_gpu
    post_grad.is_gpu = lambda d: d == "cpu" or is_gpu(d)
    _EMULATE_CUDA[0] = True
    try:
        yield
    finally:
        post_grad.is_gpu = is_gpu
        _EMULATE_CUDA[0] = False


def aten_graphs(gm: torch.fx.GraphModule, example_inputs, training: bool | None = None,
                device: str | None = None) -> list[torch.fx.GraphModule]:
    """The Aten-IR graphs Inductor would lower for the Torch-IR graph ``gm``: AOTAutograd with Inductor's
    decomposition table, its joint-graph passes and partitioner (``compile_fx.partition_fn``: pattern
    rewrites such as attention fusion, then ``min_cut_rematerialization_partition``) and its post-grad
    passes (no Inductor lowering or code generation), traced on
    ``example_inputs`` (real or fake tensors; nothing is compiled, the graphs run once to reach the
    backward). Returns ``[forward]`` or, when an output requires grad (``training`` not False),
    ``[forward, backward]``. ``device="cuda"`` with CPU inputs runs the passes as for CUDA tensors
    (:func:`_cuda_passes`: the development machine predicts the GPU's graphs).
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
    on_cpu = all(x.device.type == "cpu" for x in example_inputs if isinstance(x, torch.Tensor))
    with _cuda_passes(device == "cuda" and on_cpu), torch.enable_grad() if training else torch.no_grad():
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
    for g in aten_graphs(gm, example_inputs, training, device):
        total = total + predict(g, device)
    return total
