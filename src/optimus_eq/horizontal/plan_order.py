"""The topological order of a plan graph, kept as fused ops are added
(:class:`PlanOrder`, a part of :class:`optimus_eq.horizontal.plan.PlanGraph`): positions, ancestor sets of
candidates, the local repair of the order after a fused op (Pearce and Kelly, "A dynamic topological sort
algorithm for directed acyclic graphs", JEA 2007), and the greedy independent subsets walked in that order."""

from __future__ import annotations

import bisect
from typing import Iterator

import networkx as nx

from optimus_eq.horizontal.subsets import GroupOverlap, greedy_subsets


def topological_order(g: nx.DiGraph) -> list:
    """``list(nx.topological_sort(g))``, the same order (Kahn's algorithm, generation by generation: a
    first-in first-out queue of the nodes whose inputs are all placed, children in adjacency order), read
    straight off networkx's adjacency dicts: 3-4x faster than networkx's generator, which the group search
    runs again after each fused op that does not fit between its inputs and members (17 sorts of
    a 160k-node plan, 2.5 of 3.6 s of the round on 512 parallel branches).

    Raises:
        networkx.NetworkXUnfeasible: when ``g`` has a cycle.
    """
    pred, succ = g._pred, g._succ
    indegree = {v: len(p) for v, p in pred.items() if p}
    order = [v for v, p in pred.items() if not p]
    for v in order:  # grows while it is walked: the queue
        for c in succ[v]:
            d = indegree[c] - 1
            if d:
                indegree[c] = d
            else:
                del indegree[c]
                order.append(c)
    if indegree:
        raise nx.NetworkXUnfeasible("Graph contains a cycle or graph changed during iteration")
    return order


class PlanOrder:
    """The order half of :class:`optimus_eq.horizontal.plan.PlanGraph` (a mixin: it reads and updates the plan
    graph's ``g``, ``_pos``, ``_seq``, ``_keys`` and ``_fresh``)."""

    def acyclic(self) -> bool:
        """Whether the plan's graph (order edges included) has no cycle; its topological order is kept."""
        try:
            self._positions()
        except nx.NetworkXUnfeasible:
            return False
        return True

    def _positions(self) -> dict:
        """Node -> position in a topological order (floats; fused ops get positions between others).

        Raises:
            networkx.NetworkXUnfeasible: when the graph has a cycle.
        """
        if self._pos is None:
            self._seq = topological_order(self.g)
            self._pos = {v: float(i) for i, v in enumerate(self._seq)}
            self._keys = list(range(len(self._seq)))
        return self._pos

    def _ancestor_bits(self, cands: list, pos: dict) -> dict:
        """For each candidate, the bitset of the candidates it depends on: one pass, in topological order,
        over the nodes between the first and the last candidate (nothing before the first can depend on a
        candidate)."""
        bit = {c: 1 << i for i, c in enumerate(cands)}
        first = bisect.bisect_left(self._keys, pos[cands[0]])
        last = bisect.bisect_right(self._keys, pos[cands[-1]])
        anc: dict = {}
        pred = self.g._pred  # networkx's adjacency dict (read only)
        for v in self._seq[first:last]:
            a = 0
            for u in pred[v]:
                a |= anc.get(u, 0) | bit.get(u, 0)
            anc[v] = a
        return {c: anc[c] for c in cands}

    def fused_op(self, members: list) -> None:
        """Record a fused op in the graph: every member's inputs -> the fused op -> every member."""
        f = ("fused", self._fresh)
        self._fresh += 1
        succ, pred = self.g._succ, self.g._pred
        preds = {u for m in members for u in pred[m.cls]}
        # g.add_node(f) and g.add_edge per edge, in the same order, without networkx's per-call cost (a group
        # of 512 members with 3 inputs each: 2k edges)
        succ[f], pred[f], self.g._node[f] = {}, {}, {}
        into = pred[f]
        for u in preds:
            succ[u][f] = into[u] = {}
        out = succ[f]
        for m in members:
            if m.cls not in out:
                out[m.cls] = pred[m.cls][f] = {}
        nx._clear_cache(self.g)
        if self._pos is None:
            return
        lo = max((self._pos[u] for u in preds), default=-1.0)
        hi = min(self._pos[m.cls] for m in members)
        if lo >= hi and not self._reorder(preds, [m.cls for m in members], lo, hi):
            self._pos = None  # sort again when next needed
            return
        lo = max((self._pos[u] for u in preds), default=-1.0)
        hi = min(self._pos[m.cls] for m in members)
        # a slot between its inputs and its first member: keep the order, no re-sort
        p = (lo + hi) / 2 if hi - lo > 1e-9 else None
        if p is None:
            self._pos = None
            return
        i = bisect.bisect_left(self._keys, p)
        if i < len(self._keys) and self._keys[i] == p:  # taken (an earlier fused op between lo and hi):
            p = (self._keys[i - 1] + p) / 2             # the same place in the order, a position of its own
            if not self._keys[i - 1] < p < self._keys[i]:
                self._pos = None
                return
        self._keys.insert(i, p)
        self._seq.insert(i, f)
        self._pos[f] = p

    def _reorder(self, preds: set, members: list, lo: float, hi: float) -> bool:
        """Repair the topological order for a fused op whose inputs ``preds`` reach up to position ``lo`` while
        a member sits at ``hi`` <= ``lo`` (Pearce and Kelly's dynamic topological order, JEA 2006): the nodes
        reachable from the members up to ``lo`` move, in their order, after the nodes that reach the inputs
        from ``hi`` on, in theirs, within the positions both sets held; nothing else moves. Replaces a full
        re-sort of the plan (0.3 s at 400k nodes, once per such group: 45 of them on 512 parallel
        branches). Returns False (the caller re-sorts) when a member reaches an input: a cycle."""
        pos, succ, pred = self._pos, self.g._succ, self.g._pred
        fwd = set()
        stack = [m for m in members if pos[m] <= lo]
        fwd.update(stack)
        while stack:
            v = stack.pop()
            for w in succ[v]:
                if w not in fwd and pos.get(w, lo + 1) <= lo:
                    fwd.add(w)
                    stack.append(w)
        back = set()
        stack = [u for u in preds if pos[u] >= hi]
        back.update(stack)
        while stack:
            v = stack.pop()
            for w in pred[v]:
                if w not in back and pos.get(w, hi - 1) >= hi:
                    back.add(w)
                    stack.append(w)
        if fwd & back:
            return False
        key = pos.__getitem__
        moved = sorted(back, key=key) + sorted(fwd, key=key)
        slots = sorted(map(key, moved))
        keys, seq = self._keys, self._seq
        for p, v in zip(slots, moved):
            pos[v] = p
            seq[bisect.bisect_left(keys, p)] = v
        return True

    def _independent_subsets(self, cands: list, options: dict, fused: set,
                             made: "GroupOverlap | None" = None) -> Iterator[list]:
        """Greedy independent subsets (:func:`.subsets.greedy_subsets`) of ``cands``, walked in topological
        order; the caller adds each yielded subset's fused op to the graph before the next round. With ``made``
        (:meth:`groups`' ``overlap``), after those subsets, the list's subsets with members of groups yielded
        earlier in the call that ``made`` accepts (wider than every such group they meet)."""

        def walk(remaining: list) -> tuple[list, list[int]]:
            pos = self._positions()
            remaining.sort(key=pos.__getitem__)
            anc = self._ancestor_bits(remaining, pos)
            return remaining, [anc[c] for c in remaining]

        # (overlap) the list meets a group yielded earlier in this call: its wider subsets are walked after
        met = made is not None and any(c in made.group_of for c in cands)
        for subset in greedy_subsets(cands, options, walk, fused):  # the groups without overlap, as before
            if made is not None:
                made.add(subset)
            yield [self.member(c) for c in subset]
        if not met or not made.wider(cands):
            return  # every subset of the list is within one group already offered
        for subset in greedy_subsets(cands, options, walk):  # no member of another pattern's call: ``skip``
            if made.wider(subset):
                made.add(subset)
                yield [self.member(c) for c in subset]
