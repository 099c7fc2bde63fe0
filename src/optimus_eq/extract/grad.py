"""Gradient facts of a pre-grad graph as types: which terms require grad (:class:`GradientInfo`, for training
costs) and eager's gradient paths from every input or parameter that requires grad to every output
(:class:`GradientReach`, kept by horizontal fusion's grouping and checked by lowering; docs/DESIGN.md,
"Safety"). The bridge computes them from the FX nodes' meta (:mod:`optimus_bridge.grad_facts`). Then the
training costs.

Training costs: what the backward of a plan adds to its e-nodes (docs/DESIGN.md, "Extraction and cost").

A pre-grad graph whose values require grad will be differentiated by AOTAutograd; its backward is compiled
with it, so a plan that is cheap forward can be dear backward. Two terms are added to an e-node's forward
cost (:meth:`optimus_eq.cost.GPUCostModel.node_cost`) when its value requires grad:

1. its backward kernels, :meth:`GPUCostModel.backward_cost` (one kernel per input that requires grad for
   compute ops; nothing for ``Cat``, whose input gradients are views; the piece's bytes for narrows and
   selects);
2. AccumulateGrad's copy of each parameter whose gradient arrives in another layout than the parameter's,
   :meth:`GPUCostModel.grad_copy_cost`: one eager kernel outside the compiled graph per parameter.

The second is what a stack of weights fed transposed to ``bmm`` costs in a training step: for
``bmm(x, stack(w).permute(0, 2, 1))`` (``Cat`` of ``Unsqueeze``, ``[n, out, in]``, permuted) the weight
gradient of ``bmm`` is a contiguous ``[n, in, out]`` tensor (derivatives.yaml: ``mat2:
self.transpose(1, 2).bmm(grad)``; unlike ``mm``, whose ``mm_mat2_backward`` returns the input's layout), so
each weight's gradient is a transposed view ``[out, in]`` with strides ``(1, out)``; AccumulateGrad's
layout contract (torch/csrc/autograd/functions/accumulate_grad.h, ``obeys_layout_contract``) fails and it
clones every one, launched eagerly by the autograd engine. The rule here: a ``Permute`` of a stack of
parameters whose inverse permutation, applied to a contiguous gradient, gives each member a
non-contiguous slice pays one copy per member (the gradient reaching the permute is taken to be
contiguous, as compute kernels write it). A stack read unpermuted pays nothing.

Which forms pay: a user's own ``stack(w).permute(0, 2, 1)`` (priced in the input graph too), and
the batched linear's earlier form ``Y = baddbmm(b, X, stack(w).permute(0, 2, 1))`` (64 extra launches per
DHEN / launch_bound training step on the H200 bench, 70 launches per CUDA-graph step against 6, see
bench/results/h200_matrix_2026-11-29). In training graphs the batched linear now builds ``Y^T = baddbmm(b, stack(w),
X.permute(0, 2, 1))`` (horizontal/linear.py, ``build_linear``): the stack of weights is ``bmm``'s first
operand, unpermuted, its gradient ``dY^T @ X`` is a contiguous ``[n, out, in]`` whose slices AccumulateGrad
takes without a copy, and this rule charges it nothing (the ``Permute`` in it is of the inputs' stack).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from optimus_eq.symbolic import numel


@dataclass(frozen=True)
class GradientInfo:
    """Which terms of a graph require grad (from the FX nodes' FakeTensors).

    Attributes:
        requires_grad: term (handle) ids of FX nodes whose value requires grad.
        no_grad: term ids of FX nodes known not to require grad (never marked by propagation).
        params: term id -> element count of each leaf tensor that requires grad (a parameter, or an input
            that will get a ``.grad``).
    """

    requires_grad: frozenset = frozenset()
    no_grad: frozenset = frozenset()
    params: dict = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.requires_grad)


@dataclass(frozen=True)
class GradientReach:
    """Eager's gradient paths through a Torch-IR graph, from its FX nodes' FakeTensor meta.

    A *source* is a node whose value requires grad while none of its inputs' values does: a graph input
    or parameter that requires grad (or a tensor made with ``requires_grad=True`` inside the graph). An edge
    ``u -> n`` carries gradient when both values require grad. Eager's rule for ``autograd.grad(o, s,
    allow_unused=True)`` (and ``s.grad`` after ``o.backward``): None exactly when no such path leads from
    source s to output o, a tensor (possibly zeros) otherwise. Optimization must keep that, per output.

    Attributes:
        sources: the source nodes; bit i of a mask stands for ``sources[i]``.
        carries: FX node -> mask of the sources whose gradient paths reach it (0: its value needs no grad).
        reaches: FX node -> mask of the flattened output positions it reaches along gradient paths.
        at_output: per flattened output position, the mask of sources it has paths to (0 for a value
            that does not require grad, or no tensor).
        nondiff_keys: pure op keys (``Translation.recipes``) seen in eager not to carry gradient from an
            input that requires grad (``detach``, comparisons, integer results, ``zeros_like``).
    """

    sources: tuple = ()
    carries: dict = field(default_factory=dict)
    reaches: dict = field(default_factory=dict)
    at_output: tuple = ()
    nondiff_keys: frozenset = frozenset()

    def class_reach(self, tr, view) -> dict:
        """E-class -> ``(requires grad, output mask)`` over the FX nodes in it (their union: lowering
        emits one value per e-class, read by every reader of any of them)."""
        out: dict = {}
        for node, h in tr.node_id.items():
            c = view.node_of.get(h)
            if c is None:
                continue
            rg, m = out.get(c, (False, 0))
            out[c] = (rg or self.carries.get(node, 0) != 0, m | self.reaches.get(node, 0))
        return out


def contiguous_strides(shape) -> tuple:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


def member_grad_is_strided(stack_shape, perm, dim: int) -> bool:
    """Whether a member of ``stack_shape`` (stacked along ``dim``) gets a non-contiguous gradient slice when
    the gradient of ``stack.permute(perm)`` is contiguous. Size-1 dims are ignored (their stride is free).

    Example: ``stack [n, o, k]``, ``perm (0, 2, 1)``, ``dim 0``: the gradient ``[n, k, o]`` is contiguous,
    permuted back it has strides ``(k*o, 1, o)``, a member's slice ``[o, k]`` strides ``(1, o)``: True.
    """
    if len(perm) != len(stack_shape) or not 0 <= dim < len(stack_shape):
        return False
    permuted = [stack_shape[p] for p in perm]
    g = contiguous_strides(permuted)
    strides = [0] * len(stack_shape)
    for i, p in enumerate(perm):
        strides[p] = g[i]
    member = [(s, st) for d, (s, st) in enumerate(zip(stack_shape, strides)) if d != dim]
    shape = [s for s, _ in member]
    want = contiguous_strides(shape)
    return any(s > 1 and st != w for (s, st), w in zip(member, want))


def _list_elems(view, cls, op: str = "Cons") -> list | None:
    """The elements (and, for ``Cons``, the dims) of a list e-class: ``[(dim or None, elem class)]``."""
    out = []
    seen = set()
    while cls not in seen:
        seen.add(cls)
        cell = next((view.nodes[n] for n in view.classes.get(cls, ()) if view.nodes[n].op == op), None)
        if cell is None:
            nil = "Nil" if op == "Cons" else "ANil"
            return out if any(view.nodes[n].op == nil for n in view.classes.get(cls, ())) else None
        out.append((cell.literals[0] if op == "Cons" else None, cell.children[0]))
        cls = cell.children[1]
    return None


def _stacked_params(view, cls, params: dict) -> tuple[int, list] | None:
    """``(dim, [param numels])`` when e-class ``cls`` holds a ``Cat`` of ``Unsqueeze(param, dim)`` (a stack
    of parameters along ``dim``), else None."""
    for nid in view.classes.get(cls, ()):
        node = view.nodes[nid]
        if node.op != "Cat":
            continue
        elems = _list_elems(view, node.children[0])
        if not elems:
            continue
        dims, numels = set(), []
        for d, e in elems:
            hit = None
            for m in view.classes.get(e, ()):
                u = view.nodes[m]
                if u.op == "Unsqueeze" and u.literals[0] == d and u.children[0] in params:
                    hit = params[u.children[0]]
                    break
            if hit is None:
                break
            dims.add(d)
            numels.append(hit)
        else:
            if len(dims) == 1:
                return dims.pop(), numels
    return None


def packable_leaves(tr, example_inputs, cost_model) -> frozenset:
    """Term ids of the placeholders whose example input is an ``nn.Parameter`` (``EGraphView.packable``),
    when ``cost_model`` prices packed parameters (``GPUCostModel.packed_parameters``); else empty."""
    if not getattr(cost_model, "packed_parameters", False) or example_inputs is None:
        return frozenset()
    placeholders = [n for n in tr.gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        return frozenset()
    return frozenset(tr.node_id[n] for n, x in zip(placeholders, example_inputs)
                     if type(x) is torch.nn.Parameter and n in tr.node_id)


def packed_cats(view, params: set) -> list:
    """Ids of the ``Cat`` e-nodes that join parameters along dim 0: every element of the list is an e-class
    of ``params`` (a cat of parameters) or holds ``Unsqueeze(param, 0)`` (a stack of them), at dim 0. The
    backend's parameter packing (:mod:`optimus_bridge.param_pack`) makes such a stack a view of one buffer,
    whose members are contiguous slices, so it launches nothing (forward) and its backward gives each
    parameter a slice of one gradient (``Cat``'s backward is free already). Dtypes, devices and layouts,
    which packing also checks, are not in the e-graph: a stack that does not pack after all is underpriced
    by one copy, never made wrong."""
    out = []
    if not params:
        return out
    lists: dict = {}
    for nid, node in view.nodes.items():
        if node.op != "Cat" or not node.children:
            continue
        lst = node.children[0]
        ok = lists.get(lst)
        if ok is None:
            elems = _list_elems(view, lst)
            ok = bool(elems) and len(elems) >= 2 and all(d == 0 and (e in params or any(
                view.nodes[m].op == "Unsqueeze" and view.nodes[m].literals[0] == 0 and view.nodes[m].children[0] in params
                for m in view.classes.get(e, ()))) for d, e in elems)
            lists[lst] = ok
        if ok:
            out.append(nid)
    return out


def grad_classes(view, info: GradientInfo) -> set:
    """E-classes whose value requires grad: the FX nodes' classes, then every class with an e-node that
    reads one (forward propagation), except classes of FX nodes known not to require grad."""
    node_of = view.node_of
    grad = {node_of[h] for h in info.requires_grad if h in node_of}
    blocked = {node_of[h] for h in info.no_grad if h in node_of} - grad
    parents: dict = {}
    for nid, node in view.nodes.items():
        if node.op == "Leaf":
            continue
        for c in node.children:
            parents.setdefault(c, []).append(node.eclass)
    work = list(grad)
    while work:
        c = work.pop()
        for p in parents.get(c, ()):
            if p not in grad and p not in blocked:
                grad.add(p)
                work.append(p)
    return grad


def _transposed_param_copies(view, cat, params: dict, model) -> float:
    """:meth:`GPUCostModel.grad_copy_cost` for every element of ``Cat`` e-node ``cat`` (along dim 0) that is a
    transposed 2-D parameter, ``Permute(p, (1, 0))`` (the fused weight ``cat([P.t(), W])`` of
    patterns/gemm_lhs.py): the cat's gradient arrives contiguous (a GEMM's weight gradient), the element's slice
    of it is a contiguous ``[o, k]``, so ``p`` (``[k, o]``) gets it transposed and AccumulateGrad copies it into
    ``p``'s layout (``accumulate_grad.h``, ``obeys_layout_contract``): one eager kernel outside the compiled
    graph per such parameter and step. Size-1 dims are free (their stride does not matter)."""
    elems = _list_elems(view, cat.children[0]) if cat.children else None
    total = 0.0
    for d, e in elems or ():
        if d != 0:
            continue
        for m in view.classes.get(e, ()):
            u = view.nodes[m]
            if u.op == "Permute" and tuple(u.literals[0]) == (1, 0) and u.children and u.children[0] in params:
                shape = view.shapes.get(u.children[0])
                if shape is not None and len(shape) == 2 and all(isinstance(s, int) and s > 1 for s in shape):
                    total += model.grad_copy_cost(params[u.children[0]])
                break
    return total


def training_costs(view, info: GradientInfo, model, forced=frozenset(), fused=None, gemms=None) -> dict:
    """E-node id -> cost (us) its backward adds: :meth:`GPUCostModel.backward_cost` for e-nodes whose
    value requires grad, plus :meth:`GPUCostModel.grad_copy_cost` per member for a ``Permute`` of a stack
    of parameters whose members get strided gradients (:func:`member_grad_is_strided`). Forced (opaque)
    e-nodes add nothing: they are the same in every plan, and free forward too. E-nodes in ``fused``
    (:func:`optimus_eq.extract.fusion.fused_nodes`) pay :meth:`GPUCostModel.fused_backward_cost` instead of
    ``backward_cost``: Inductor fuses the backward of a pointwise chain too. E-nodes in ``gemms`` (e-node id ->
    ``(GEMM name, tensor argument e-classes)``, :func:`optimus_eq.extract.gemm.gemm_nodes`) pay
    :meth:`GPUCostModel.gemm_backward_cost` where their shapes are known."""
    grad = grad_classes(view, info)
    if not grad:
        return {}
    node_of = view.node_of
    params = {node_of[h]: n for h, n in info.params.items() if h in node_of}
    sizes = {c: numel(s) for c, s in view.shapes.items()}  # tokens at their hints
    args_memo: dict = {}
    out: dict = {}
    for nid, node in view.nodes.items():
        if node.op == "Cat" and node.eclass in grad and nid not in forced:
            copies = _transposed_param_copies(view, node, params, model)
            if copies:
                out[nid] = copies
        if node.eclass not in grad or nid in forced or node.op in ("Leaf", "Cons", "Nil", "ACons", "ANil", "Cat"):
            continue
        if node.op == "Apply":
            a = node.children[0] if node.children else None
            if a not in args_memo:
                elems = _list_elems(view, a, "ACons") if a is not None else None
                args_memo[a] = [e for _, e in elems] if elems else []
            inputs = args_memo[a]
        else:
            inputs = node.children
        extra = None
        if gemms and nid in gemms:
            name, args = gemms[nid]
            extra = model.gemm_backward_cost(name, view.shapes.get(node.eclass), [view.shapes.get(c) for c in args],
                                             [c in grad for c in args])
        if extra is None and fused and nid in fused:
            extra = model.fused_backward_cost(sizes.get(node.eclass), [sizes.get(c) for c in inputs if c in grad])
        elif extra is None:
            extra = model.backward_cost(node.op, sizes.get(node.eclass), [sizes.get(c) for c in inputs],
                                        sum(1 for c in inputs if c in grad), False)
        if node.op == "Permute" and node.children:
            stacked = _stacked_params(view, node.children[0], params)
            shape = view.shapes.get(node.children[0])
            if stacked is not None and shape is not None and member_grad_is_strided(shape, node.literals[0],
                                                                                    stacked[0]):
                extra += sum(model.grad_copy_cost(n) for n in stacked[1])
        if extra:
            out[nid] = extra
    return out
