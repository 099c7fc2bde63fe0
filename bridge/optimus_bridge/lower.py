"""Extracted term DAG -> FX GraphModule, with the original calling convention: the driver of lowering.

:class:`Lowerer` emits each chosen e-node once, so sharing is preserved, through the table of an IR level
(:mod:`optimus_bridge.lower_table`: ``TORCH_IR`` here, ``optimus_bridge.aten.ATEN_IR`` for Aten-IR) plus
the recipe of each pure op. Kept (opaque) FX nodes are copied in their original relative order, which keeps
the order of in-place mutations and random ops. Chosen narrows that tile a range of one autograd tensor's
dim come back as one ``torch.split`` (:func:`~optimus_bridge.lower_table.split_groups`). Then, in order:
the outputs get eager's gradient paths (:mod:`optimus_bridge.lower_grad`), dead terms go, every node gets
its meta for Inductor (:mod:`optimus_bridge.lower_meta`), and the outputs are copied where their storage
sharing or strides differ from eager's (:mod:`optimus_bridge.lower_outputs`). The GraphModule generates its
Python code on first use, as dynamo's.
"""

from __future__ import annotations

import copy
import operator
import sys
from functools import partial

import torch
from torch.fx import Graph, GraphModule, Node

from optimus_bridge.grad_facts import gradient_info
from optimus_bridge.lower_grad import keep_gradient_paths
from optimus_bridge.lower_meta import propagate_meta
from optimus_bridge.lower_outputs import distinct_outputs, fix_kept_layouts, fix_strides, unalias_outputs
from optimus_bridge.lower_random import fix_random_inputs
from optimus_bridge.lower_table import (INSIDE_INDUCTOR, TORCH_IR, IRLevel, LoweringError, SplitGroup, call_function,
                                        split_groups, squeezed_dims)
from optimus_bridge.translation import Translation
from optimus_eq.extract import EGraphView, no_gc
from optimus_eq.extract.grad import grad_classes
from optimus_eq.extract.plan import chosen_list
from optimus_eq.recipe import Slot, SymSize


class Lowerer:
    """One lowering of the plan ``choice`` (e-class -> e-node id) of ``view``, the e-graph of translation
    ``t``, into a new graph at IR level ``level`` (default :data:`~optimus_bridge.lower_table.TORCH_IR`);
    :meth:`run` returns the GraphModule. Use once."""

    def __init__(self, t: Translation, view: EGraphView, choice: dict[str, str], level: "IRLevel | None" = None) -> None:
        self.t, self.view, self.choice = t, view, choice
        self.level = level or TORCH_IR
        self.graph = Graph()
        # the calling convention: a pytree codegen (``ExportedProgram.module()``: inputs and outputs as the
        # user's pytrees) stays, or the optimized module would return a tuple where the original returned a
        # tensor
        self.graph._codegen = copy.copy(t.gm.graph._codegen)
        self.env: dict[Node, Node] = {}
        self.cval: dict[str, Node] = {}
        self.kept = set(t.kept)
        self._order = t.kept_order
        self._last_rank = -1      # KeptOrder.rank of the last ordered kept node emitted
        self._last_barrier = -1   # KeptOrder.epoch of the last barrier emitted
        self._free_left: dict = {}  # epoch -> kept nodes of that epoch, not barriers, not emitted yet
        self._free: dict = {}       # epoch -> those nodes, in original order
        self._barrier_of: dict = {}  # epoch -> its barrier
        self._ordered = sorted(self._order.ordered, key=self._order.rank.__getitem__)
        self._emitting: set = set()  # kept nodes whose emission is under way (a re-entry is a cycle)
        for n in t.kept:
            e = self._order.epoch[n]
            if n not in self._order.barriers:
                self._free_left[e] = self._free_left.get(e, 0) + 1
                self._free.setdefault(e, []).append(n)
            else:
                self._barrier_of[e] = n
        self.splits: dict[str, SplitGroup] = {}
        self.op_key: dict[Node, int] = {}  # emitted pure-op node -> its op key (gradient check)
        self._size_nodes: dict = {}  # sympy expression -> its emitted value (symbolic sizes)
        self._dep_memo: dict = {}  # class -> :meth:`_deps`

    def class_of(self, node: Node) -> str:
        return self.view.node_of[self.t.node_id[node]]

    # -- original nodes ------------------------------------------------------------------------
    def value_of_node(self, n: Node) -> Node:
        if n in self.env:
            return self.env[n]
        if n in self.kept:
            return self.emit_kept(n)
        if n in self.t.node_id:
            return self.emit_class(self.class_of(n))
        raise LoweringError(f"node {n.name} has no lowering")

    def emit_kept(self, n: Node) -> Node:
        """Copy kept node ``n`` (once), after the kept nodes its order needs before it
        (:meth:`_emit_kept_before`), the values a global-state change must find computed, and its inputs.

        Raises:
            LoweringError: when the plan would reorder kept nodes (a kept node that needs, through the plan,
                a value computed after it).
        """
        if n in self.env:
            return self.env[n]
        if n in self._emitting:
            raise LoweringError(f"kept node {n.name} would need a value computed after it")
        self._emitting.add(n)
        try:
            self._emit_kept_before(n)
            for live in self.t.barriers.get(n, ()):  # values computed before a global-state change
                self.value_of_node(live)              # (no_grad, autocast) stay before it
            for a in n.all_input_nodes:
                self.value_of_node(a)
            self._check_kept_order(n)
        finally:
            self._emitting.discard(n)
        respell = None if INSIDE_INDUCTOR.get() else self.level.grad_mode_blind.get(n.target)
        if respell is not None and any(_views_an_input(self.value_of_node(a)) for a in n.all_input_nodes):
            args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), self.value_of_node)
            new = respell(self.graph, n, args, kwargs)
            new.meta = dict(n.meta)
            self.env[n] = new
            return new
        new = self.graph.node_copy(n, lambda a: self.value_of_node(a))
        self.env[n] = new
        return new

    def _emit_kept_before(self, n: Node) -> None:
        """Emit the kept nodes :class:`optimus_bridge.kept_order.KeptOrder` puts before ``n`` that are not emitted
        yet: for an ordered node the ordered ones of lower rank, for a barrier also every other kept node of an
        earlier epoch, for any other node its epoch's barrier. Lowering emits on demand, so a fused op can need a
        kept node (a random draw, a pure op after a barrier) before the loop over kept nodes reaches it."""
        order = self._order
        if n in order.ordered:
            for m in self._ordered[self._last_rank + 1:order.rank[n]]:
                self.emit_kept(m)
        e = order.epoch[n]
        if n in order.barriers:
            for i in range(self._last_barrier, e):
                for m in self._free.get(i, ()):
                    if m not in self.env:
                        self.emit_kept(m)
        elif e > self._last_barrier:
            self.emit_kept(self._barrier_of[e])

    def _check_kept_order(self, n: Node) -> None:
        """Emitting kept node ``n`` now keeps the order of :class:`optimus_bridge.kept_order.KeptOrder`: an ordered
        node (barrier or random draw) comes right after the previous ordered one; a barrier also after every kept
        node before it; any other kept node after the barrier before it and before the one after it.

        Raises:
            LoweringError: when the plan would move ``n`` across a barrier or reorder two ordered kept nodes.
        """
        order, e = self._order, self._order.epoch[n]
        if n in order.ordered:
            if order.rank[n] != self._last_rank + 1:
                raise LoweringError(f"kept node {n.name} would move before an earlier kept node")
            self._last_rank = order.rank[n]
        if n in order.barriers:
            if any(self._free_left.get(i, 0) for i in range(self._last_barrier, e)):
                raise LoweringError(f"kept node {n.name} would move before an earlier kept node")
            self._last_barrier = e
        else:
            if e != self._last_barrier:
                raise LoweringError(f"kept node {n.name} would move across a kept node with an effect")
            self._free_left[e] -= 1

    # -- e-classes -------------------------------------------------------------------------------
    def _list(self, cls: str) -> list[str]:
        return chosen_list(self.view, self.choice, cls)

    def _deps(self, cls: str) -> list[str]:
        """The classes whose values ``cls``'s chosen e-node is emitted from (memoized: the reachability walk,
        the emission walk and the pure-op emitter all ask). A cat emitted as a stack (:meth:`_stack_inputs`)
        depends on the unsqueezes' inputs, so the unsqueezes themselves are never emitted (they were
        emitted and removed as dead terms: 22k nodes at 50k FX nodes)."""
        got = self._dep_memo.get(cls)
        if got is None:
            got = self._dep_memo[cls] = self._find_deps(cls)
        return got

    def _find_deps(self, cls: str) -> list[str]:
        node = self.view.nodes[self.choice[cls]]
        if node.op in ("Cat", "Apply", "Binary"):
            if node.op == "Apply" and node.literals[0] in self.t.opaque_keys:
                return []
            if node.op == "Cat":
                inner = self._stack_inputs(node)
                if inner is not None:
                    return inner
            kids = []
            for c in node.children:
                if self.view.nodes[self.choice[c]].op in ("Cons", "Nil", "ACons", "ANil"):
                    kids.extend(self._list(c))
                else:
                    kids.append(c)
            return kids
        if node.op == "Leaf":
            return []
        return list(node.children)

    def _stack_inputs(self, node) -> list[str] | None:
        """The classes a chosen ``Cat`` e-node stacks: the inputs of its elements when the level has a stack and
        each element is an unsqueeze along the cat's dim (the cat is emitted as ``level.stack`` of them), else
        None."""
        if self.level.stack is None:
            return None
        nodes, choice = self.view.nodes, self.choice
        dim = nodes[choice[node.children[0]]].literals[0]
        inner = []
        for e in self._list(node.children[0]):
            k = nodes[choice[e]]
            if k.op != "Unsqueeze" or k.literals[0] != dim:
                return None
            inner.append(k.children[0])
        return inner

    def _reachable(self, out_node: Node) -> list[str]:
        """The e-classes lowering will emit (before dead-term removal): those behind the non-kept inputs of
        kept nodes, the barriers' live values and the outputs, through the chosen e-nodes (:meth:`_deps`)."""
        roots: list[Node] = []
        for n in self.t.kept:
            roots.extend(self.t.barriers.get(n, ()))
            roots.extend(n.all_input_nodes)
        torch.fx.node.map_arg(out_node.args[0], roots.append)
        seen: set[str] = set()
        stack = [self.class_of(n) for n in roots if n not in self.kept and n in self.t.node_id]
        order = []
        while stack:
            cls = stack.pop()
            if cls in seen:
                continue
            seen.add(cls)
            order.append(cls)
            stack.extend(c for c in self._deps(cls) if c not in seen)
        return order

    def _plan_splits(self, out_node: Node) -> None:
        """Fill :attr:`splits`: the chosen narrows that are emitted as pieces of one split (:func:`split_groups`)."""
        if self.level.split is None:
            return
        narrows = {}
        for cls in self._reachable(out_node):
            node = self.view.nodes[self.choice[cls]]
            if node.op == "Narrow" and len(node.literals) == 4 and all(type(v) is int for v in node.literals):
                narrows[cls] = (node.children[0], *node.literals)
        groups = split_groups(narrows)
        if not groups:
            return
        # only tensors that take part in autograd: the split matters for the backward AOTAutograd traces (one
        # cat instead of summed slice_backwards); without grad, narrows and a split are the same views, and
        # narrows leave no split node to count as junk
        info = gradient_info(self.t)
        grad = grad_classes(self.view, info) if info else set()
        self.splits = {c: g for c, g in groups.items() if g.source in grad}

    def emit_class(self, root: str) -> Node:
        stack = [root]
        while stack:
            cls = stack[-1]
            if cls in self.cval:
                stack.pop()
                continue
            missing = [c for c in self._deps(cls) if c not in self.cval]
            if missing:
                stack.extend(reversed(missing))  # the first dependency is emitted first
                continue
            stack.pop()
            self.cval[cls] = self._emit_node(cls)
        return self.cval[root]

    def _emit_node(self, cls: str) -> Node:
        """The FX node of ``cls``'s chosen e-node, whose children are emitted (:attr:`cval`): an opaque op's
        kept node, else the emitter of its constructor (:data:`_EMITTERS`), else the level's view."""
        node = self.view.nodes[self.choice[cls]]
        if node.op in ("Leaf", "Apply") and node.literals[0] in self.t.opaque_keys:
            return self.emit_kept(self.t.opaque_keys[node.literals[0]])
        return _EMITTERS.get(node.op, Lowerer._emit_view)(self, cls, node)

    def _emit_view(self, cls: str, node, literals=None) -> Node:
        """``level.views[op]`` of the child (``literals``: the e-node's unless given)."""
        view = self.level.views.get(node.op)
        if view is None:
            raise LoweringError(f"no lowering for e-node {node.op}")
        return view(self.graph, self.cval[node.children[0]], node.literals if literals is None else literals)

    def _emit_narrow(self, cls: str, node) -> Node:
        """A piece of its split (:attr:`splits`), else a view."""
        group = self.splits.get(cls)
        if group is None:
            return self._emit_view(cls, node)
        if group.node is None:
            group.node = self.level.split(self.graph, self.cval[group.source], list(group.sizes), group.dim)
        return call_function(self.graph, operator.getitem, (group.node, group.piece[cls]), name="getitem")

    def _emit_reshape(self, cls: str, node) -> Node:
        """A squeeze where it only drops size-1 dims (``level.squeeze``), else a view; symbolic sizes as graph
        values (:meth:`reshape_sizes`)."""
        shape = node.literals[0]
        if self.level.squeeze is not None:
            dims = squeezed_dims(self.view.shapes.get(node.children[0]), tuple(shape))
            if dims:
                return self.level.squeeze(self.graph, self.cval[node.children[0]], dims)
        if any(s < 0 for s in shape):
            return self._emit_view(cls, node, [self.reshape_sizes(shape)])
        return self._emit_view(cls, node)

    def _emit_cat(self, cls: str, node) -> Node:
        """``level.cat`` of the list's elements, or ``level.stack`` of their inputs when each is an unsqueeze
        along the cat's dim."""
        dim = self.view.nodes[self.choice[node.children[0]]].literals[0]
        inner = self._stack_inputs(node)
        if inner is not None:  # the unsqueezes are not emitted (:meth:`_deps`)
            return self.level.stack(self.graph, [self.cval[c] for c in inner], dim)
        return self.level.cat(self.graph, [self.cval[e] for e in self._list(node.children[0])], dim)

    def _emit_pure(self, cls: str, node) -> Node:
        """A pure op (``Unary``, ``Binary``, ``Apply``) from its recipe: its FX target and constant arguments,
        with the children at the recipe's slots and symbolic sizes as graph values."""
        key = node.literals[0]
        recipe = self.t.recipes[key]
        vals = [self.cval[c] for c in self._deps(cls)]

        def arg(a):
            if isinstance(a, Slot):
                return vals[a.index]
            if isinstance(a, SymSize):
                return self.size_value(self.t.sizes.expr(a.token))
            return a

        args = torch.fx.node.map_aggregate(recipe.args, arg)
        kwargs = torch.fx.node.map_aggregate(recipe.kwargs, arg)
        n = self.graph.create_node(recipe.op, recipe.target)  # arguments set after: see call_function
        if kwargs:
            n.kwargs = dict(kwargs)
        n.args = tuple(args)
        self.op_key[n] = key
        return n

    # -- symbolic sizes -------------------------------------------------------------------------------
    def reshape_sizes(self, shape) -> list:
        """A reshape target with symbolic tokens (:mod:`optimus_eq.symbolic`) as graph values: one token
        among positive static sizes is ``-1`` (inferred: the algebra guarantees the element count); else
        each token is rebuilt from the graph's inputs (:meth:`size_value`)."""
        tokens = [s for s in shape if s < 0]
        if len(tokens) == 1 and all(s > 0 for s in shape if s >= 0):
            return [-1 if s < 0 else s for s in shape]
        return [self.size_value(self.t.sizes.expr(s)) if s < 0 else s for s in shape]

    def size_value(self, e):
        """Graph code computing sympy expression ``e`` at run time: symbols from ``Translation.size_sources``
        (a SymInt input, or ``level.sym_size`` of a tensor input), integers, sums, products and floor
        divisions with ``operator`` calls. Memoized per expression.

        Raises:
            LoweringError: an expression of another kind, a symbol without a source, or a level without
                ``sym_size``.
        """
        if isinstance(e, int):
            return e
        import sympy
        from torch.utils._sympy.functions import FloorDiv

        if e.is_Integer:
            return int(e)
        if e in self._size_nodes:
            return self._size_nodes[e]
        g = self.graph
        if e.is_Symbol:
            src = self.t.size_sources.get(e)
            if src is None:
                raise LoweringError(f"symbolic size {e} has no source in the graph")
            if src[0] == "node":
                out = self.value_of_node(src[1])
            elif self.level.sym_size is None:
                raise LoweringError("this IR level cannot read sizes at run time")
            else:
                out = self.level.sym_size(g, self.value_of_node(src[1]), src[2])
        elif isinstance(e, (sympy.Add, sympy.Mul)):
            fn = operator.add if isinstance(e, sympy.Add) else operator.mul
            args = [self.size_value(a) for a in e.args]
            out = args[0]
            for a in args[1:]:
                out = call_function(g, fn, (out, a), name=fn.__name__)
        elif isinstance(e, FloorDiv):
            a, b = (self.size_value(x) for x in e.args)
            out = call_function(g, operator.floordiv, (a, b), name="floordiv")
        else:
            raise LoweringError(f"cannot rebuild symbolic size {e}")
        self._size_nodes[e] = out
        return out

    def run(self) -> GraphModule:
        old_limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old_limit, 20000))
        try:
            out_node = next(n for n in reversed(self.t.gm.graph.nodes) if n.op == "output")
            self._plan_splits(out_node)
            for n in self.t.kept:
                self.emit_kept(n)
            out_args = torch.fx.node.map_arg(out_node.args[0], self.value_of_node)
            new_out = self.graph.output(out_args)
            new_out.meta = dict(out_node.meta)
            if self.level is TORCH_IR:  # Aten-IR: no autograd here
                keep_gradient_paths(self.graph, new_out, self.t, self.env, self.op_key)
        finally:
            sys.setrecursionlimit(old_limit)
        self._remove_dead_terms()
        copies = set(self.env.values())
        memo: dict = {}  # the original's inputs, read once for every propagation
        propagate_meta(self.graph, self.t.gm, self.t.gm, lambda n: n not in copies, memo=memo)
        added = fix_random_inputs(self.graph, self.env, self.level)  # kept random ops draw over eager's layout
        if added:
            propagate_meta(self.graph, self.t.gm, self.t.gm, lambda n: True, only=added, memo=memo)
        if fix_kept_layouts(self.graph, self.t.gm, self.env, self.level):  # kept views see eager's layout (rare)
            propagate_meta(self.graph, self.t.gm, self.t.gm, lambda n: n not in copies, memo=memo)
        storages: dict = {}  # the inputs' storages, read once for both checks
        fixes = (partial(unalias_outputs, visible=self.t.visible_outputs, internal=self.t.internal_outputs,
                         memo=storages),
                 partial(fix_strides, copies=frozenset(copies), visible=self.t.visible_outputs, memo=storages),
                 distinct_outputs)
        for fix in fixes:
            added = fix(self.graph, out_node, self.level)
            if added:
                propagate_meta(self.graph, self.t.gm, self.t.gm, lambda n: True, only=added, memo=memo)
        return _graph_module(self.t.gm, self.graph)

    def _remove_dead_terms(self) -> None:
        """Drop emitted term nodes nobody uses; kept (copied) nodes always stay."""
        copies = set(self.env.values())
        for n in reversed(list(self.graph.nodes)):
            if not n.users and n.op != "output" and n not in copies:
                self.graph.erase_node(n)


#: constructor -> the Lowerer's emitter of its e-nodes; any other constructor is a view of the level's table
_EMITTERS = {"Narrow": Lowerer._emit_narrow, "Reshape": Lowerer._emit_reshape, "Cat": Lowerer._emit_cat,
             "Unary": Lowerer._emit_pure, "Binary": Lowerer._emit_pure, "Apply": Lowerer._emit_pure}


def _views_an_input(n: Node) -> bool:
    """Is ``n`` a graph input, or a chain of view ops (``OpOverload.is_view``) on one?"""
    while n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and n.target.is_view:
        if not n.args or not isinstance(n.args[0], Node):
            return False
        n = n.args[0]
    return n.op == "placeholder"


def _graph_module(root: torch.nn.Module, graph: Graph) -> GraphModule:
    """A GraphModule whose Python code is generated on first use (torch.fx's ``_LazyGraphModule``, what dynamo
    hands to backends), like dynamo's graphs when ``torch._dynamo.config.use_lazy_graph_module`` is on.

    Inductor never needs the code (AOTAutograd runs the graph with an Interpreter), and generating and
    compiling it costs about 1 s at 20k nodes; a caller who runs or prints the module pays it then.
    """
    try:
        from torch._dynamo import config
        from torch.fx._lazy_graph_module import _LazyGraphModule
    except ImportError:  # a torch without lazy graph modules
        return GraphModule(root, graph)
    if not getattr(config, "use_lazy_graph_module", True):
        return GraphModule(root, graph)
    return _LazyGraphModule(root, graph)


def lower(t: Translation, view: EGraphView, choice: dict[str, str], level: IRLevel | None = None) -> GraphModule:
    """Lower the extracted plan ``choice`` (e-class -> e-node id) to a GraphModule.

    ``level`` says which ops to emit (default :data:`TORCH_IR`; Aten-IR: ``optimus_bridge.aten.ATEN_IR``).

    Raises:
        LoweringError: when the plan would reorder kept nodes or change an output's shape, dtype or
            (non-contiguous) strides.
    """
    with no_gc():
        return Lowerer(t, view, choice, level).run()

