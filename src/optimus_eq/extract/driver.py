"""The :func:`extract` entry: cost the e-nodes, take the tree plan, prune, improve it by local search (the
fast plan), then solve the small components of the choice core exactly (HiGHS, warm-started from the fast
plan, a time budget per component that grows with its size, in CPU seconds: stretched to wall time by the
machine's load per core) and keep, per component, the cheaper plan.
"""

from __future__ import annotations

import os
import time
from collections import Counter


from optimus_eq.cost import GPUCostModel
from optimus_eq.extract.bound import component_bound
from optimus_eq.extract.ilp import _ILP, BATCH, FRACTIONAL, _plan_cycles, load_solver
from optimus_eq.extract.plan import Extraction
from optimus_eq.extract.prune import _prepare
from optimus_eq.extract.refine import _refine
from optimus_eq.extract.tree import _Problem
from optimus_eq.extract.view import EGraphView, no_gc

#: ``"auto"``: components of the choice core up to this many e-nodes are solved exactly.
EXACT_MAX_NODES = 4_000
#: ``"auto"``: components with a cycle (no lower bound: :mod:`.bound` needs an acyclic component) are solved
#: exactly up to this many e-nodes (half the acyclic limit): their LP bound is weak (the relaxation shares a
#: batched result between the batched and unbatched alternatives), so HiGHS spends its time proving, not improving.
#: launch_bound's gpu-preset component after the horizontal round (3,053 e-nodes, 0.3 s of HiGHS to prove the fast
#: plan optimal; LP bound 58 against 399 us) keeps the fast plan, unproven, and says so in ``Report.limits``:
#: eqsat's call 4.3x -> 1.4x greedy's there, same plans on every bench model (bench/results/eqsat_speed_cpu_2026-12-02b).
EXACT_MAX_CYCLIC_NODES = 2_000
#: Time budget of one exact solve (a batch of components): this many seconds, plus ...
EXACT_BASE_S = 0.05
#: ... this many per e-node of the batch (2,000 e-nodes: 2.05 s; a batch whose relaxation is fractional is halved).
EXACT_PER_NODE_S = 1e-3
#: The exact budgets (CPU seconds) are stretched to wall time by the load per core, at most this much.
MAX_LOAD_SHARE = 8.0
#: Components of at least this many e-nodes are compared with the others of their size (solved once per
#: distinct problem); smaller ones are solved together, a few hundred per HiGHS call.
DEDUP_MIN_NODES = 100
#: The fast plan is optimal on a component when its cost is within this of the component's lower bound
#: (:mod:`optimus_eq.extract.bound`): relative, plus absolute microseconds (float sums in another order).
BOUND_RTOL, BOUND_ATOL = 1e-9, 1e-9
#: The local search runs at least this long even when the caller's deadline has passed (a plan is needed).
REFINE_MIN_S = 1.0


def wall_per_cpu_second() -> float:
    """Wall seconds per CPU second this process can expect now: the 1-minute load average per core, at least 1,
    at most ``MAX_LOAD_SHARE``. The exact solves' budgets are CPU seconds (what the bench and the speed
    targets measure); HiGHS takes a wall-clock limit, so each budget is scaled by this. On the 2-core machine
    at load 9, launch_bound's 3,039-e-node component needs ~0.5 CPU s, which a 3 s wall budget did not give it."""
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except (AttributeError, OSError):  # no load average on this platform
        return 1.0
    return min(max(load, 1.0), MAX_LOAD_SHARE)


class NoAcyclicTerm(RuntimeError):
    """Some root e-class has no acyclic derivation with the forced e-nodes (a RuntimeError)."""


def extract(view: EGraphView, roots: list, forced_nodes: set, model: GPUCostModel | None = None,
            method: str = "auto", seconds: float = 10.0, ilp_max_nodes: int = EXACT_MAX_NODES,
            max_rounds: int = 20, deadline: float | None = None, resume: Extraction | None = None) -> Extraction:
    """Choose one e-node for every e-class needed by ``roots``.

    Args:
        view: the parsed e-graph.
        roots: e-classes that must be computed (graph outputs, opaque terms).
        forced_nodes: e-node ids that must be chosen in their class (opaque ops kept verbatim); a class
            whose forced e-node is a self loop (``EGraphView.self_loops``) has no plan. Ids that are not
            e-nodes of ``view`` are ignored.
        method: ``"tree"`` (the tree plan only), ``"fast"`` (``"auto"`` without its exact stage: the fast
            plan, for plans that only seed a search, e.g. the horizontal round's; see ``resume``),
            ``"ilp"`` (the fast plan, then every component of the
            choice core exactly, each with the whole remaining budget) or ``"auto"`` (the fast plan, then
            components up to ``ilp_max_nodes`` e-nodes exactly, each with a budget that grows with its
            size); see the module docstring of :mod:`optimus_eq.extract`.
        seconds: time budget of the exact solver (all components together), seconds; the local search
            gets the same budget (at least ``REFINE_MIN_S``), wall-clock.
        ilp_max_nodes: ``"auto"`` leaves a component of the choice core with more e-nodes than this to the
            fast plan.
        max_rounds: ILP solves per batch of components (each adds cuts for the cycles of the last plan).
        deadline: a ``time.perf_counter()`` instant (the caller's whole-call limit): no exact solve starts
            or runs past it, and the local search stops there (but gets at least ``REFINE_MIN_S``).
        resume: an earlier ``"fast"`` extraction of this same ``view`` (same forced e-nodes, model and
            ``ilp_max_nodes``): ``"auto"`` then runs only its exact stage on that fast plan (the result is what
            ``"auto"`` from scratch gives). Ignored for another view or method.

    Returns:
        An :class:`Extraction`; its ``stats`` say how the plan was found (tree, fast and final costs, the
        choice core, the components solved exactly, their sizes and gaps, what a limit stopped).

    Raises:
        NoAcyclicTerm: (a RuntimeError) when some root has no acyclic derivation with the forced e-nodes (a
            bug in the rules or the bridge, or destructive rewrites applied in an order that subsumed every
            e-node of a class: the ``taso`` search meets such states and drops them).
        ValueError: for an unknown ``method``.
    """
    if method not in ("tree", "fast", "ilp", "auto"):
        raise ValueError(f"unknown extraction method {method!r}; valid: 'tree', 'fast', 'ilp', 'auto'")
    with no_gc():
        return _extract(view, roots, forced_nodes, model or GPUCostModel(), method, seconds, ilp_max_nodes,
                        max_rounds, deadline, resume)


def _extract(view, roots, forced_nodes, model, method, seconds, ilp_max_nodes, max_rounds, deadline,
             resume=None) -> Extraction:
    start = time.perf_counter()
    clock = [time.process_time()]
    st = resume.resume if resume is not None else None
    if st is not None and (st["view"] is not view or method != "auto" or st["ilp_max_nodes"] != ilp_max_nodes):
        st = None  # another e-graph, or another pruning: extract from scratch
    stage_s: dict[str, float] = dict(st["stats"]["stage_s"]) if st is not None else {}

    def lap(name: str) -> None:  # CPU seconds per stage, for Extraction.stats["stage_s"]
        now = time.process_time()
        stage_s[name] = stage_s.get(name, 0.0) + now - clock[0]
        clock[0] = now

    if st is None:
        view.assign_costs(model, forced_nodes)
        p = _Problem(view, forced_nodes)
        lap("costs")
        if len(view.nodes) == len(view.classes):  # one e-node per class (greedy's e-graph): nothing to choose
            return _unique(view, p, roots, start)
        tree_pick = p.tree()
        lap("tree")
        missing = [r for r in roots if not p.has(r) or tree_pick[p.cid[r]] < 0]
        if missing:
            raise NoAcyclicTerm(f"no acyclic term for e-classes {missing[:5]}")
        rroots = list(dict.fromkeys(p.cid[r] for r in roots))
        pick = list(tree_pick)
        notes: list[str] = []
        prep = _prepare(p, tree_pick, rroots, ilp_max_nodes if method in ("auto", "fast") else None)
        lap("prepare")
        # the classes a plan needs: one walk per plan (4 walks before, 0.15 s each at 287k e-nodes)
        tree_needed = p.plan_classes(tree_pick, rroots)
        tree_cost = sum(p.cost[tree_pick[c]] for c in tree_needed)
        choice = prep.reach & (prep.nvalid > 1)
        stats: dict = {"e_nodes": len(p.kids), "e_classes": len(p.cids), "choice_classes": int(choice.sum()),
                       "tree_cost": tree_cost, "stage_s": stage_s}
        method_used = "tree"
        fast, fast_needed = pick, tree_needed
        if not choice.any():
            notes.append("no choice")
        elif method != "tree":
            t0 = time.perf_counter()
            # the whole exact budget, not a share of it: at 50k FX nodes (split/cat tangle, loaded machine) a
            # quarter of 10 s ran out before the first move, and the tree plan (54x dearer) was kept
            refine_end = t0 + max(REFINE_MIN_S, seconds)
            if deadline is not None:
                refine_end = min(refine_end, max(deadline, t0 + REFINE_MIN_S))
            moves = _refine(p, pick, rroots, prep, refine_end, needed=tree_needed)
            fast = list(pick)
            fast_needed = p.plan_classes(fast, rroots) if moves else tree_needed
            fast_cost = sum(p.cost[fast[c]] for c in fast_needed)
            stats.update(refine_moves=moves, fast_cost=fast_cost, fast_s=time.perf_counter() - t0)
            notes.append(f"fast plan: tree extraction ({tree_cost:.6g} us) + local search, {moves} moves "
                         f"({fast_cost:.6g} us); {int(choice.sum())} choice classes")
            lap("refine")
            if moves:
                method_used = "tree+refine"
    else:  # the fast stage of an earlier "fast" extraction of this view: only the exact stage is left
        p, tree_pick, rroots, prep = st["p"], st["tree_pick"], st["rroots"], st["prep"]
        tree_needed, fast, fast_needed, method_used = st["tree_needed"], st["fast"], st["fast_needed"], st["method"]
        choice = prep.reach & (prep.nvalid > 1)
        pick, notes, stats = list(fast), list(st["notes"]), dict(st["stats"], stage_s=stage_s)
        tree_cost = stats["tree_cost"]
    rounds = 0
    end = start + seconds if deadline is None else min(start + seconds, deadline)
    resumable = None
    if method == "fast":
        resumable = {"view": view, "ilp_max_nodes": ilp_max_nodes, "p": p, "tree_pick": tree_pick, "rroots": rroots,
                     "prep": prep, "tree_needed": tree_needed, "fast": list(fast), "fast_needed": fast_needed,
                     "method": method_used, "notes": list(notes), "stats": dict(stats, stage_s=dict(stage_s))}
    elif method != "tree" and choice.any():
        method_used, rounds = _exact(p, prep, method, ilp_max_nodes, max_rounds, end, fast, set(fast_needed),
                                     pick, stats, notes, method_used)
        lap("exact")
    if prep.pruned:
        notes.append(f"{prep.pruned} cyclic e-nodes pruned")

    if pick == tree_pick:
        needed = tree_needed
    elif "fast_cost" in stats and pick == fast:
        needed = fast_needed
    else:
        needed = p.plan_classes(pick, rroots)
    cost = sum(p.cost[pick[c]] for c in needed)
    if method_used != "tree":  # safety net: an acyclic plan, and no dearer than the fast (or tree) plan
        safe = stats.get("fast_cost", tree_cost)
        if _plan_cycles(needed, {c: pick[c] for c in needed}, p.kids) or cost > safe * (1 + 1e-9) + 1e-9:
            notes.append("exact plan rejected (cyclic or dearer than the fast plan)")
            pick = fast if "fast_cost" in stats else tree_pick
            method_used = "tree+refine" if stats.get("refine_moves") else "tree"
            needed = p.plan_classes(pick, rroots)
            cost = sum(p.cost[pick[c]] for c in needed)
    stats["cost"] = cost
    lap("check")
    cids, nids = p.cids, p.nids
    chosen = {cids[c]: nids[pick[c]] for c in needed}
    return Extraction(chosen, cost, method_used, time.perf_counter() - start, rounds, "; ".join(notes), stats,
                      resumable)


def _signature(p, prep, ilp, g: list[int]) -> tuple:
    """The ILP of component ``g`` up to renaming its classes and e-nodes: two components with one signature
    pose the same problem, so one solution serves both (DHEN's layers, a model's repeated blocks).

    Classes are put in a canonical order (labels refined from their e-nodes' costs and their children's
    labels, three rounds, ties by id); e-nodes keep their order in the class; children outside the
    component are needed by every plan (-1). Equal signatures are equal problems under the renaming
    whatever the order; a less than canonical order only misses copies. Returns ``(signature, order)``."""
    cost, kids, fixed, mandatory, cyclic = p.cost, p.kids, ilp.fixed, ilp.mandatory, ilp.cyclic
    vn = {c: prep.vnodes(c) for c in g}
    ch = {c: [kids[i] for i in vn[c]] for c in g}
    local = {c: (fixed[c], mandatory[c], cyclic[c], tuple([cost[i] for i in vn[c]])) for c in g}
    label = {c: hash(local[c]) for c in g}
    for _ in range(3):
        get = label.get
        label = {c: hash((local[c], tuple([tuple([get(k, 0) for k in ks]) for ks in ch[c]]))) for c in g}
    order = sorted(g, key=lambda c: (label[c], c))
    pos = {c: k for k, c in enumerate(order)}
    get = pos.get
    sccs: dict = {}
    sig = tuple((local[c], sccs.setdefault(ilp.scc[c], len(sccs)) if cyclic[c] else -1,
                 tuple([tuple([get(k, -1) for k in ks]) for ks in ch[c]]))
                for c in order)
    return sig, order


def _exact(p, prep, method, ilp_max_nodes, max_rounds, end, fast, used, pick, stats, notes, method_used):
    """Solve the components of the choice core exactly, warm-started from ``fast``; write the cheaper plan of
    each component into ``pick``. Components that pose the same ILP are solved once. Returns ``(method, ILP
    rounds)``."""
    ilp = _ILP(p, prep)
    fixed = ilp.fixed
    limit = None if method == "ilp" else ilp_max_nodes
    groups = sorted(ilp.groups, key=lambda sg: sg[0])
    sizes = [n for n, _ in groups]
    stats.update(components=len(groups), largest_component=max(sizes, default=0))
    copies: dict[tuple, list[list[int]]] = {}  # signature -> components in canonical order (first: solved)
    firsts: list[tuple[int, list[int]]] = []
    shared = Counter(n for n, _ in groups)
    kids, cost, mandatory, cyclic = p.kids, p.cost, ilp.mandatory, ilp.cyclic
    closed: set[int] = set()  # ids of components where the fast plan meets the lower bound: optimal, no solve
    fast_gaps: list[float] = []  # relative gaps of the fast plan on components left to it (over the limit)
    over: list[int] = []  # sizes of the components left to the fast plan by their size
    for n, g in groups:
        # the fast plan's cost on the component, against a lower bound of every plan's (extract.bound)
        lb = component_bound(g, prep.vnodes, kids, cost, fixed, mandatory, cyclic)
        lim = limit
        if lb is None and limit is not None and any(cyclic[c] for c in g):
            lim = min(limit, EXACT_MAX_CYCLIC_NODES)
        if lb is not None:
            mine = sum(cost[fast[c]] for c in g if not fixed[c] and c in used)
            if mine <= lb * (1 + BOUND_RTOL) + BOUND_ATOL:
                closed.add(id(g))
                continue
            if lim is not None and n > lim:
                fast_gaps.append((mine - lb) / mine if mine > 0 else 0.0)
        elif lim is not None and n > lim:
            fast_gaps.append(float("inf"))
        if lim is not None and n > lim:
            over.append(n)
        else:
            # small components share a HiGHS call anyway (BATCH e-nodes per call): not worth a signature
            sig, order = (_signature(p, prep, ilp, g) if n >= DEDUP_MIN_NODES and shared[n] > 1 else (id(g), g))
            same = copies.setdefault(sig, [])
            same.append(order)
            if len(same) == 1:
                firsts.append((n, order))
    batches: list[tuple[int, list[list[int]]]] = []  # (e-nodes, distinct components)
    alone = False  # a component with a cycle is solved alone (its LP relaxation is almost never integral:
    for n, g in firsts:  # in a batch it costs an LP solve that is then halved)
        cyc = any(cyclic[c] for c in g)
        if batches and not (cyc or alone) and batches[-1][0] + n <= BATCH:
            batches[-1] = (batches[-1][0] + n, batches[-1][1] + [g])
        else:
            batches.append((n, [g]))
        alone = cyc
    by_first = {id(gs[0]): gs for gs in copies.values()}
    size_of = {id(g): n for n, g in firsts}
    if batches:
        load_solver()  # before any solve's clock starts (the first call of a process imports HiGHS)
    share = wall_per_cpu_second()
    solved = optimal = improved = failed = skipped = 0
    gaps: list[float] = []
    why: list[str] = []
    rounds = 0
    exact_s = 0.0
    vnodes = prep.vnodes
    split = 0  # batches whose LP relaxation was fractional: their components solved one by one
    todo = batches[::-1]
    while todo:
        n, comps = todo.pop()
        members = sum((by_first[id(g)] for g in comps), [])
        t0 = time.perf_counter()
        left = end - t0
        if left <= 0:
            skipped += len(members)
            continue
        budget = left if limit is None else min(left, (EXACT_BASE_S + EXACT_PER_NODE_S * n) * share)
        got, rnd, reason = ilp.solve([c for g in comps for c in g], budget, max_rounds, fast, used,
                                     lp_only=len(comps) > 1)
        exact_s += time.perf_counter() - t0
        rounds = max(rounds, rnd)
        if got is None and reason == FRACTIONAL:  # halve the batch (one component alone gets the MIP)
            split += 1
            sizes = [size_of[id(g)] for g in comps]
            half, acc = 1, sizes[0]
            while half < len(comps) - 1 and 2 * (acc + sizes[half]) <= n:
                acc += sizes[half]
                half += 1
            todo.append((n - acc, comps[half:]))
            todo.append((acc, comps[:half]))
            continue
        if got is None:
            failed += 1
            why.append(reason)
            continue
        solved += len(members)
        optimal += len(members) if got.optimal else 0
        if not got.optimal:
            gaps.append(got.gap)
        for g in comps:  # the solution as (position of the class, position of the e-node in its class)
            rel = [(k, vnodes(c).index(got.pick[c])) for k, c in enumerate(g) if not fixed[c] and c in got.pick]
            for h in by_first[id(g)]:  # the component and its copies: keep the cheaper plan of each
                mine = {h[k]: vnodes(h[k])[j] for k, j in rel}
                before = sum(p.cost[fast[c]] for c in h if not fixed[c] and c in used)
                after = sum(p.cost[i] for i in mine.values())
                if after <= before + 1e-9:
                    improved += after < before - 1e-9
                    for c, i in mine.items():
                        pick[c] = i
    stats.update(exact_components=solved, exact_optimal=optimal, exact_improved=improved, bound_closed=len(closed),
                 fast_max_gap=max(fast_gaps, default=0.0),
                 exact_distinct=sum(len(c) for _, c in batches), exact_max_gap=max(gaps, default=0.0),
                 exact_s=exact_s, over_limit=over, deadline_skipped=skipped, exact_failed=why, exact_split=split,
                 cyclic_limit=min(ilp_max_nodes, EXACT_MAX_CYCLIC_NODES) if limit is not None else None)
    if over:
        cyc = f" ({EXACT_MAX_CYCLIC_NODES} with a cycle)" if EXACT_MAX_CYCLIC_NODES < limit else ""
        notes.append(f"{len(over)} ilp components over the size limit, {limit} e-nodes{cyc} (largest {max(over)}), "
                     "left to the fast plan")
    if failed:
        notes.append(f"{failed} ilp batches failed ({why[0]}); the fast plan kept there")
    if skipped:
        notes.append(f"time limit: {skipped} components left to the fast plan")
    if gaps:
        worst = max(gaps)
        gap = f"gap up to {100 * worst:.2g}%" if worst < float("inf") else "no lower bound yet"
        notes.append(f"{len(gaps)} ilp batches stopped at their time budget with the best plan found ({gap})")
    if closed:
        notes.append(f"fast plan proven optimal by its lower bound on {len(closed)}/{len(groups)} components")
    if fast_gaps:
        worst = max(fast_gaps)
        notes.append("fast plan within " + (f"{100 * worst:.2g}%" if worst < float("inf") else "an unknown gap")
                     + " of the optimum on the components over the limit (lower bound)")
    if split:
        notes.append(f"{split} batches with a fractional LP relaxation halved (their components solved apart)")
    if solved:
        notes.append(f"exact: {solved}/{len(groups)} components ({stats['exact_distinct']} distinct, up to "
                     f"{max(n for n, _ in firsts)} e-nodes), {optimal} proven optimal, {improved} improved on the "
                     f"fast plan")
    if groups and optimal == solved and solved + len(closed) == len(groups):  # every component proven optimal
        return "ilp", rounds
    if solved:
        return method_used + "+ilp", rounds
    return method_used, rounds


def _unique(view: EGraphView, p: _Problem, roots: list, start: float) -> Extraction:
    """The only plan of an e-graph with one e-node per class, if it is complete and acyclic."""
    bad = [r for r in roots if not p.has(r) or not p.cnodes[p.cid[r]]]
    pick = [ns[0] if ns else -1 for ns in p.cnodes]
    needed: list[int] = []
    if not bad:
        rroots = list(dict.fromkeys(p.cid[r] for r in roots))
        seen = set(rroots)
        needed = list(rroots)
        k = 0
        while k < len(needed) and not bad:
            i = pick[needed[k]]
            if i < 0 or p.forced.get(needed[k], i) != i:
                bad.append(p.cids[needed[k]])
                break
            for x in p.kids[i]:
                if x not in seen:
                    seen.add(x)
                    needed.append(x)
            k += 1
        if not bad and _plan_cycles(needed, pick, p.kids):
            bad = list(roots)
    if bad:
        raise NoAcyclicTerm(f"no acyclic term for e-classes {bad[:5]}")
    cids, nids = p.cids, p.nids
    choice = {cids[c]: nids[pick[c]] for c in needed}
    cost = sum(p.cost[pick[c]] for c in needed)
    return Extraction(choice, cost, "tree", time.perf_counter() - start, 0, "no choice",
                      {"e_nodes": len(p.kids), "e_classes": len(p.cids), "choice_classes": 0, "cost": cost})


def limit_notes(stats: dict, ilp_max_nodes: int, ilp_seconds: float) -> list[str]:
    """What a limit did to an extraction, from its ``Extraction.stats``: one line each for ``Report.limits``
    (components over the exact stage's size limit, over its time limit, stopped at their budget, failed)."""
    out = []
    if stats.get("over_limit"):
        over = stats["over_limit"]
        cyc = stats.get("cyclic_limit")
        cyc = (f"; {cyc} for a component with a cycle, extract.driver.EXACT_MAX_CYCLIC_NODES"
               if cyc is not None and cyc < ilp_max_nodes else "")
        out.append(f"extract: {len(over)} components over the exact stage's size limit (ilp_max_nodes = "
                   f"{ilp_max_nodes} e-nodes{cyc}; largest {max(over)}) kept the fast plan, unproven")
    if stats.get("deadline_skipped"):
        out.append(f"extract: {stats['deadline_skipped']} components kept the fast plan: the time limit "
                   f"(Limits.seconds, or ilp_seconds = {ilp_seconds:g} s) had passed")
    gap = stats.get("exact_max_gap", 0.0)
    if stats.get("exact_components", 0) > stats.get("exact_optimal", 0):
        bound = f"gap up to {100 * gap:.2g}%" if gap < float("inf") else "no lower bound yet"
        out.append(f"extract: exact solves stopped at their time budget with the best plan found ({bound})")
    if stats.get("exact_failed"):
        out.append(f"extract: {len(stats['exact_failed'])} exact solves gave no plan "
                   f"({stats['exact_failed'][0]}); the fast plan kept there")
    return out
