"""The alternative forms of a plan's values for the horizontal round's group search
(:meth:`PlanAlternatives.add_alternatives`, a part of :class:`optimus_eq.horizontal.plan.PlanGraph`): the e-node
kinds an alternative form may use and how far below the plan it may reach."""

from __future__ import annotations

LIST_OPS = frozenset(["Cons", "Nil", "ACons", "ANil"])
#: E-node kinds an alternative form may use (:meth:`PlanGraph.add_alternatives`): ops first (they make
#: members), then views, then cats (a cat of per-piece ops that folded into one wide op), then the list
#: cells; ``Leaf`` e-nodes are not followed.
ALT_OPS = ("Unary", "Binary", "Apply")
ALT_VIEWS = ("Narrow", "Select", "Reshape", "Permute", "Unsqueeze")
ALT_LISTS = ("ACons", "ANil", "Cons", "Nil")
_ALT_RANK = {op: i for i, op in enumerate(ALT_OPS + ALT_VIEWS + ("Cat",) + ALT_LISTS)}
#: How many e-classes below the plan an alternative form may reach (list cells not counted; the split
#: tanh example needs 2: ``narrow(tanh(x))`` -> ``tanh(narrow(x))`` -> ``narrow(x)``; a cat of
#: ``sigmoid(tanh(piece) * 2)`` needs 4), and at most how many e-classes the forms
#: of one round may add (per plan class, plus a floor), so the round's work stays linear in the plan.
ALT_DEPTH = 4
ALT_BUDGET_PER_CLASS, ALT_BUDGET_MIN = 2, 1_000


class PlanAlternatives:
    """The alternative forms half of :class:`optimus_eq.horizontal.plan.PlanGraph` (a mixin: it reads the plan
    graph's ``view``, ``choice``, ``g`` and the positions of :class:`optimus_eq.horizontal.plan_order.PlanOrder`)."""

    def add_alternatives(self, depth: int = ALT_DEPTH, budget: int | None = None) -> int:
        """Make the e-graph's other forms of the plan's values visible to the group search.

        The plan holds one e-node per class; a group may exist only in another equivalent form (six
        same-shape tanhs, three of them on pieces of one split: the plan computes one wide tanh and three
        narrows of it, and the three per-piece tanhs are e-nodes the plan did not choose). For every plan
        class, its first other op e-node whose children can be computed (they are plan classes, or
        classes given a form here, at most ``depth`` classes below the plan, ops preferred, then views and
        argument lists) is its *alternative form*: its children get an edge to the class (so the search
        reaches them, and independence counts them: the class is taken to depend on both forms'
        inputs), a class of the plan whose chosen e-node is a view becomes a candidate through that form
        (:meth:`member`), and the classes below it become candidates through their own forms. Which form
        wins is left to extraction: a group is one more alternative of its members' classes.

        Acyclic by construction: a class given a form is ready after the last plan class its form
        reads (its position in the plan's topological order), and feeds a plan class only when that
        class comes later. ``budget`` bounds the classes given a form (default: ``ALT_BUDGET_PER_CLASS``
        per plan class, at least ``ALT_BUDGET_MIN``). Returns the number of classes added to the graph.
        Call after :meth:`acyclic` (which it needs) and before :meth:`groups`.
        """
        pos = self._positions()
        view = self.view
        nodes, classes = view.nodes, view.classes
        plan, choice, tr = self._plan, self.choice, self.tr
        if budget is None:
            budget = max(ALT_BUDGET_MIN, ALT_BUDGET_PER_CLASS * len(plan))
        state: dict = {}          # class outside the plan -> (form e-node, ready) | None (none, or in progress)
        order: list = []          # classes given a form, children before parents
        list_ready: dict = {}

        def usable(en) -> bool:
            if en.op in ALT_OPS:
                return bool(en.literals) and en.literals[0] in tr.recipes and en.literals[0] not in tr.opaque_keys
            return en.op in _ALT_RANK

        def ready_in_plan(k) -> float:
            if k in pos:
                return pos[k]
            r = list_ready.get(k)
            if r is None:  # a list class of the plan: ready after its elements
                r = list_ready[k] = max((pos.get(e, -1.0) for e in self.elements(k)), default=-1.0)
            return r

        def resolve(a, d):
            """The position after which class ``a`` (outside the plan) can be computed, or None."""
            if a in state:
                s = state[a]
                return None if s is None else s[1]
            if len(order) >= budget:
                return None
            state[a] = None  # in progress: a cycle back to ``a`` fails
            nids = [n for n in classes.get(a, ()) if usable(nodes[n])]
            nids.sort(key=lambda n: _ALT_RANK[nodes[n].op])
            for nid in nids:
                en = nodes[nid]
                is_list = en.op in ALT_LISTS
                if not is_list and d <= 0:
                    continue
                r = -1.0
                for k in en.children:
                    rk = ready_in_plan(k) if k in plan else resolve(k, d if is_list else d - 1)
                    if rk is None:
                        break
                    r = max(r, rk)
                else:
                    state[a] = (nid, r)
                    choice[a] = nid
                    order.append(a)
                    return r
            return None

        try:
            return self._add_forms(resolve, ready_in_plan, pos, plan, choice, order, depth)
        finally:
            # ``resolve`` calls itself through its closure cell: a reference cycle that held the whole e-graph
            # view (10^5 ENodes) and the plan graph until the next cyclic collection (0.4 s at 50k FX nodes,
            # right after ``optimize`` turned the collector back on)
            resolve = None  # noqa: F841

    def _add_forms(self, resolve, ready_in_plan, pos, plan, choice, order, depth) -> int:
        """The second half of :meth:`add_alternatives`: pick each plan class's alternative forms (``resolve``
        gives a class outside the plan its form), add them and their edges to the plan graph."""
        view, g = self.view, self.g
        nodes, classes = view.nodes, view.classes
        edges: list = []
        for c in list(g):
            if isinstance(c, tuple) or c not in plan:
                continue
            chosen = choice[c]
            kinds = set()  # at most one op form and one cat form per class
            for nid in classes.get(c, ()):
                en = nodes[nid]
                kind = "op" if self._is_op(nid) else "cat" if en.op == "Cat" else None
                if nid == chosen or kind is None or kind in kinds:
                    continue
                ok = True
                for k in en.children:
                    rk = ready_in_plan(k) if k in plan else resolve(k, depth)
                    if rk is None or rk >= pos[c]:
                        ok = False
                        break
                if ok:
                    kinds.add(kind)
                    if kind == "op" and not self._is_op(chosen):
                        self._form[c] = nid
                    edges.extend((k, c) for k in self.term_children(en))
        if not edges:
            return 0
        # the classes some accepted form reads, children first; their own edges
        used: set = set()
        stack = [k for k, _ in edges if k not in plan]
        while stack:
            a = stack.pop()
            if a in used or a in plan:
                continue
            used.add(a)
            stack.extend(self.term_children(nodes[choice[a]]) if nodes[choice[a]].op not in LIST_OPS
                         else nodes[choice[a]].children)
        added = [a for a in order if a in used and nodes[choice[a]].op not in LIST_OPS]
        for a in added:
            g.add_node(a)
        for a in added:
            for k in self.term_children(nodes[choice[a]]):
                g.add_edge(k, a)
        g.add_edges_from(edges)
        self.alternatives = True
        self._pos = None
        self._op_classes = None
        return len(added)
