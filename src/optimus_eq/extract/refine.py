"""DAG-aware local search that improves a plan (for components over ``ilp_max_nodes``, or when the ILP
fails or runs out of time): re-choose one class, switch every user of one shared class at once, or (when
neither helps) stop using one shared kernel by switching all its readers at once (``drop``), or make a group
move that alone costs a little and then switch the used classes that can read what it newly uses (``compound``).
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np

from optimus_eq.extract.prune import _Prepared
from optimus_eq.extract.tree import _Problem


#: The drop move only tries classes whose chosen e-node costs at least this (us): kernels, not views.
DROP_MIN_COST = 1.0
#: ... and gives up when leaving one kernel would mean dropping more than this many classes.
DROP_MAX_CLASSES = 16
#: The compound move follows up at most this many classes that its first step newly uses (or views of them).
COMPOUND_MAX_CLASSES = 64


def _refine(p: _Problem, pick: list[int], rroots: list[int], prep: _Prepared, deadline: float,
            passes: int = 3, needed: list[int] | None = None) -> int:
    """DAG-aware local search on ``pick`` (class -> e-node, in place). Returns the number of moves.

    Reference counts say which classes the plan uses; a move re-chooses one used class when the exact
    change of the DAG cost is negative (e-nodes left unused are saved, classes newly used are paid once)
    and the new e-node's sub-plan does not reach the class (checked only inside its strongly connected
    component, where all cycles lie). ``pick`` must be acyclic over all classes (the tree choice is), and
    stays so. ``needed``: ``p.plan_classes(pick, rroots)`` when the caller has it already.
    """
    C = len(p.cids)
    kids, cost = p.kids, p.cost
    scc, cyclic = prep.scc.tolist(), prep.cyclic.tolist()
    refs = [0] * C
    for c in (p.plan_classes(pick, rroots) if needed is None else needed):
        for k in kids[pick[c]]:
            refs[k] += 1
    for r in set(rroots):
        refs[r] += 1
    candidates = np.flatnonzero(prep.reach & (prep.nvalid > 1)).tolist()

    def release(c: int, undo: list) -> float:
        saved = 0.0
        st = [c]
        while st:
            x = st.pop()
            refs[x] -= 1
            undo.append((x, 1))
            if refs[x] == 0:
                saved += cost[pick[x]]
                st.extend(kids[pick[x]])
        return saved

    def acquire(c: int, undo: list) -> float:
        paid = 0.0
        st = [c]
        while st:
            x = st.pop()
            refs[x] += 1
            undo.append((x, -1))
            if refs[x] == 1:
                paid += cost[pick[x]]
                st.extend(kids[pick[x]])
        return paid

    def reaches(srcs, target: int) -> bool:
        comp = scc[target]
        st = [k for k in srcs if cyclic[k] and scc[k] == comp]
        vis: set[int] = set()
        while st:
            x = st.pop()
            if x == target:
                return True
            if x in vis:
                continue
            vis.add(x)
            st.extend(k for k in kids[pick[x]] if scc[k] == comp)
        return False

    def settle(keep: bool, undo: list, switched: list) -> bool:
        """End a move: keep it (True), or undo its reference-count changes (``undo``: ``(class, change)``) and
        its switches (``switched``: ``(class, e-node picked before)``), newest first, and return False."""
        if keep:
            return True
        for x, dd in reversed(undo):
            refs[x] += dd
        for q, cur in reversed(switched):
            pick[q] = cur
        return False

    def single(c: int) -> bool:
        """Re-choose class ``c`` alone, if that lowers the DAG cost."""
        cur = pick[c]
        for alt in prep.vnodes(c):
            if alt == cur:
                continue
            undo: list = []
            delta = cost[alt] - cost[cur]
            for k in kids[alt]:
                delta += acquire(k, undo)
            for k in kids[cur]:
                delta -= release(k, undo)
            if delta < -1e-9 and not (cyclic[c] and reaches(kids[alt], c)):
                pick[c] = alt
                return True
            for x, d in reversed(undo):
                refs[x] += d
        return False

    # users[s]: valid e-nodes that need class s (for group moves)
    valid_edge = np.asarray(prep.valid, dtype=bool)[p.enode]
    order = np.argsort(p.flat[valid_edge], kind="stable")
    user_nodes = p.enode[valid_edge][order]
    user_ptr = np.searchsorted(p.flat[valid_edge][order], np.arange(C + 1))

    def group(s: int) -> bool:
        """Make every used class that has an e-node needing the unused class ``s`` switch to it, if the
        moves together lower the DAG cost (one shared e-node replacing many: what single moves miss)."""
        best: dict[int, int] = {}
        for i in user_nodes[user_ptr[s]:user_ptr[s + 1]].tolist():
            q = ncls[i]
            if refs[q] > 0 and pick[q] != i and (q not in best or cost[i] < cost[best[q]]):
                best[q] = i
        if len(best) < 2:
            return False
        undo: list = []
        switched: list[tuple[int, int]] = []
        delta = acquire(s, undo)  # a temporary reference: s is paid once, up front
        for q, i in best.items():
            cur = pick[q]
            if refs[q] == 0 or (cyclic[q] and reaches(kids[i], q)):  # unused now: a switch before released it
                continue
            mark = len(undo)
            d = cost[i] - cost[cur]
            for k in kids[i]:
                d += acquire(k, undo)
            for k in kids[cur]:
                d -= release(k, undo)
            if d < 0:
                pick[q] = i
                switched.append((q, cur))
                delta += d
            else:
                for x, dd in reversed(undo[mark:]):
                    refs[x] += dd
                del undo[mark:]
        delta -= release(s, undo)
        return settle(switched and delta < -1e-9, undo, switched)

    root_set = set(rroots)

    def current_users(x: int) -> list[int]:
        """Used classes whose chosen e-node reads class ``x``."""
        out = []
        for i in user_nodes[user_ptr[x]:user_ptr[x + 1]].tolist():
            q = ncls[i]
            if refs[q] > 0 and pick[q] == i:
                out.append(q)
        return out

    def drop(s: int) -> bool:
        """Stop using the kernel of class ``s``: every class that reads it switches to another of its e-nodes
        (one whose children are in use already, cheapest first), and a reader with none is dropped the same
        way; kept if the moves together lower the DAG cost. A fused alternative is often cheaper only once
        several classes leave one op at once (six tanhs batched: the wide tanh and the wide mul after it are
        read by six pieces, none of which pays off alone), which single and group moves miss."""
        dropped = [s]
        dset = {s}
        switch: dict[int, int] = {}
        i = 0
        while i < len(dropped):
            x = dropped[i]
            i += 1
            for q in current_users(x):
                if q in dset or q in switch:
                    continue
                best, best_cost = -1, 0.0
                for j in prep.vnodes(q):
                    if j == pick[q] or any(k in dset for k in kids[j]):
                        continue
                    extra = cost[j] + sum(cost[pick[k]] for k in kids[j] if refs[k] == 0)
                    if (best < 0 or extra < best_cost) and not (cyclic[q] and reaches(kids[j], q)):
                        best, best_cost = j, extra
                if best >= 0:
                    switch[q] = best
                elif q in root_set or len(dropped) >= DROP_MAX_CLASSES:
                    return False
                else:
                    dropped.append(q)
                    dset.add(q)
        if not switch or any(any(k in dset for k in kids[j]) for j in switch.values()):
            return False
        undo: list = []
        old = {q: pick[q] for q in switch}
        delta = 0.0
        for q, j in switch.items():
            cur = pick[q]
            if refs[q] == 0:  # unused now: a switch before released it (its e-node's refs are gone already)
                continue
            delta += cost[j] - cost[cur]
            for k in kids[j]:
                delta += acquire(k, undo)
            pick[q] = j
            for k in kids[cur]:
                delta -= release(k, undo)
        keep = delta < -1e-9 and not any(cyclic[q] and reaches(kids[pick[q]], q) for q in switch)
        return settle(keep, undo, list(old.items()))

    def compound(s: int) -> bool:
        """Two moves as one: switch the used classes that have an e-node reading the unused class ``s`` to it
        (members that change nothing alone are kept too), then every used class with an unchosen e-node that
        reads a class this first step newly uses (or an unused class whose chosen e-node reads one: a view of
        a new GEMM) switches to the cheapest such e-node when that lowers the cost; kept if the whole lowers
        the DAG cost. The union of a horizontal round's groups needs it: moving the ``V`` linears to the
        union's narrows costs a little, and only then can the gates leave their own group GEMM. Work: the
        classes acquired and released (the affected sub-DAG) and their readers, at most
        ``COMPOUND_MAX_CLASSES`` classes followed up."""
        best: dict[int, int] = {}
        for i in user_nodes[user_ptr[s]:user_ptr[s + 1]].tolist():
            q = ncls[i]
            if refs[q] > 0 and pick[q] != i and (q not in best or cost[i] < cost[best[q]]):
                best[q] = i
        if not best:
            return False
        undo: list = []
        switched: list[tuple[int, int]] = []

        def switch(q: int, i: int, keep_zero: bool) -> float:
            cur = pick[q]
            if refs[q] == 0 or (cyclic[q] and reaches(kids[i], q)):  # unused now: a switch before released it
                return 0.0
            mark = len(undo)
            d = cost[i] - cost[cur]
            for k in kids[i]:
                d += acquire(k, undo)
            for k in kids[cur]:
                d -= release(k, undo)
            if d < -1e-9 or (keep_zero and d <= 1e-9):
                pick[q] = i
                switched.append((q, cur))
                return d
            for x, dd in reversed(undo[mark:]):
                refs[x] += dd
            del undo[mark:]
            return 0.0

        delta = acquire(s, undo)  # a temporary reference: s is paid once, up front
        for q, i in best.items():
            delta += switch(q, i, True)
        if switched:
            # classes the first step uses (acquired), and unused classes whose chosen e-node reads one
            # (in the order acquired: nearest the switched classes first; a view found is followed next)
            frontier = deque(dict.fromkeys(x for x, d in undo if d == -1 and refs[x] > 0))
            seen = set(frontier)
            n = 0
            while frontier and n < COMPOUND_MAX_CLASSES:
                x = frontier.popleft()
                n += 1
                alt: dict[int, int] = {}
                for i in user_nodes[user_ptr[x]:user_ptr[x + 1]].tolist():
                    q = ncls[i]
                    if refs[q] == 0:
                        if pick[q] == i and q not in seen:
                            seen.add(q)
                            frontier.appendleft(q)
                    elif pick[q] != i and (q not in alt or cost[i] < cost[alt[q]]):
                        alt[q] = i
                for q, i in alt.items():
                    if refs[q] > 0 and pick[q] != i:
                        delta += switch(q, i, False)
        delta -= release(s, undo)
        return settle(switched and delta < -1e-9, undo, switched)

    ncls = p.ncls
    moves = 0
    for _ in range(passes):
        improved = False
        for c in candidates:
            if time.perf_counter() > deadline:
                return moves
            if refs[c] > 0 and single(c):
                moves += 1
                improved = True
        shared = np.flatnonzero(prep.reach & (np.diff(user_ptr) > 1)).tolist()
        for s_cls in shared:
            if time.perf_counter() > deadline:
                return moves
            if refs[s_cls] == 0 and group(s_cls):
                moves += 1
                improved = True
        if not improved:
            # kernels read by several classes: try to leave them all at once (drop)
            for s_cls in shared:
                if time.perf_counter() > deadline:
                    return moves
                if refs[s_cls] > 0 and s_cls not in root_set and cost[pick[s_cls]] >= DROP_MIN_COST \
                        and drop(s_cls):
                    moves += 1
                    improved = True
        if not improved:
            # a group move that pays only once the readers of what it newly uses follow it (compound)
            for s_cls in shared:
                if time.perf_counter() > deadline:
                    return moves
                if refs[s_cls] == 0 and compound(s_cls):
                    moves += 1
                    improved = True
        if not improved:
            break
    return moves
