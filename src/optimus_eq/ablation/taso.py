"""The ``taso`` ablation strategy: cost-based backtracking search over substitution steps.

After TASO (Jia et al., "TASO: Optimizing Deep Learning Computation with Automatic Generation of Graph
Substitutions", SOSP 2019, Algorithm 2): keep a priority queue of graphs ordered by cost; pop the
cheapest, apply every substitution to it, and queue each new graph whose cost is below ``alpha`` times the
best cost seen so far (``alpha > 1`` lets the search pass through graphs that are a little dearer, which a
greedy search never does); stop when the queue is empty or the expansion budget is spent; return the best
graph seen.

What a "substitution" is here: one pattern of the registry applied destructively at every match it has
in the current graph (one egglog iteration of its ruleset, added with ``:subsume``, after the analyses).
TASO applies one match at a time; egglog applies a ruleset's matches together, so a step here is
coarser, and the search explores the order and interleaving of patterns (which greedy fixes) rather
than of single matches. The cost of a graph is the DAG cost of its extraction under the same cost model
as eqsat's (``objective``); graphs are deduplicated by a structural hash of that extraction.

Each state is a sequence of steps from the input graph. To expand a state the e-graph goes back to the
input graph (egglog ``pop``/``push``) and replays the sequence; each child is tried between a ``push``
and a ``pop``. This costs one replay per expansion, which is fine for an ablation on the graph sizes it
is meant for; the limits (``Limits.iterations``: expansions, ``Limits.seconds``) bound it.
"""

from __future__ import annotations

import heapq
import itertools
import time
from typing import Callable, Hashable, Sequence

from optimus_eq.egraph import ITERATION_LIMIT, SATURATED, TIME_LIMIT, EGraph, Limits, SearchResult, ruleset_name
from optimus_eq.extract.driver import NoAcyclicTerm
from optimus_eq.registry import Pattern
from optimus_eq.schedule import ANALYSES, run

SUBSUME = True
NEEDS_OBJECTIVE = True

#: TASO's relaxation factor: a graph up to 5% dearer than the best one is still expanded (the paper's value).
ALPHA = 1.05

Objective = Callable[[EGraph], "tuple[float, Hashable]"]


def _step(egraph: EGraph, pattern: Pattern, result: SearchResult, horizontal) -> bool:
    """Apply ``pattern`` once at all its current matches (a horizontal pattern: fuse every group it finds
    on the current graph, destructively); True if the e-graph changed."""
    egraph.run(ANALYSES, SearchResult())
    if pattern.kind == "horizontal":
        return bool(horizontal(egraph, [pattern], True))
    return egraph.run(run(ruleset_name(pattern)), result)


def _replay(egraph: EGraph, seq: Sequence[Pattern], result: SearchResult, horizontal) -> None:
    """Return the e-graph to the input graph (kept below one ``push``) and apply ``seq``."""
    egraph.pop()
    egraph.push()
    for p in seq:
        _step(egraph, p, result, horizontal)


def search(egraph: EGraph, patterns: Sequence[Pattern], limits: Limits, objective: Objective,
           alpha: float = ALPHA, horizontal=None) -> SearchResult:
    """Backtracking search from the graph in ``egraph``; leaves ``egraph`` holding the best graph found.

    Args:
        egraph: holds the input graph (rules added with ``subsume=True``).
        patterns: the substitutions (those with rules).
        limits: ``iterations`` bounds the expansions (states whose children are generated), ``seconds``
            the wall-clock time; ``nodes`` is not used (each state is one graph, it does not grow).
        objective: ``egraph -> (cost in microseconds, fingerprint)`` of the graph the e-graph holds now.
        alpha: relaxation factor (>= 1); 1 makes the search greedy-by-cost with backtracking.
        horizontal: ``(egraph, [pattern], destructive) -> groups`` (:func:`optimus_eq.horizontal.fuse_round`);
            each horizontal pattern is then one more substitution (fuse every group it finds).

    Returns:
        The :class:`SearchResult`: ``iterations`` = expansions, ``stop_reason``, and ``rule_matches`` of
        the best graph's steps only (what the chosen graph is made of, not everything that was tried).

    Raises:
        ValueError: if ``alpha < 1``.
    """
    if alpha < 1:
        raise ValueError(f"alpha must be >= 1, got {alpha}")
    steps = [p for p in patterns if p.rules or (p.kind == "horizontal" and horizontal is not None)]
    start = time.perf_counter()
    scratch = SearchResult()
    egraph.run(ANALYSES, scratch)
    egraph.push()  # the input graph stays below this snapshot
    egraph.push()
    best_cost, fingerprint = objective(egraph)
    best: tuple = ()
    seen = {fingerprint}
    tie = itertools.count()
    queue = [(best_cost, next(tie), ())]
    expansions = 0
    stop = SATURATED
    while queue:
        if expansions >= limits.iterations:
            stop = ITERATION_LIMIT
            break
        if time.perf_counter() - start > limits.seconds or egraph.past_deadline():
            stop = TIME_LIMIT
            break
        cost, _, seq = heapq.heappop(queue)
        if cost > alpha * best_cost:
            continue
        expansions += 1
        _replay(egraph, seq, scratch, horizontal)
        for p in steps:
            egraph.push()
            if _step(egraph, p, scratch, horizontal):
                try:
                    c, fp = objective(egraph)
                except NoAcyclicTerm:
                    # destructive steps in this order subsumed every e-node of some class (relu(narrow(x))
                    # rewritten to narrow(relu(x)), then the full narrow(x) to x: the subsumed relu(narrow(x))
                    # is now relu(x) itself); greedy's fixed order never gets here. Not a graph: dropped.
                    egraph.pop()
                    continue
                if fp not in seen:
                    seen.add(fp)
                    child = seq + (p,)
                    if c < best_cost:
                        best_cost, best = c, child
                    if c < alpha * best_cost:
                        heapq.heappush(queue, (c, next(tie), child))
            egraph.pop()
    result = SearchResult(iterations=expansions, stop_reason=stop)
    if horizontal is not None and hasattr(horizontal, "reset"):
        horizontal.reset()  # count what the best graph's steps fuse, not everything tried
    _replay(egraph, best, result, horizontal)
    egraph.run(ANALYSES, SearchResult())
    return result


def fingerprint(view, roots: Sequence, choice: dict) -> Hashable:
    """A structural hash of an extracted plan: equal for equal term DAGs, whatever the e-class ids.

    Each class is hashed from its chosen e-node's op, literals and children's hashes (a Merkle hash), so
    two states that reach the same graph by different step orders are one state of the search.
    """
    memo: dict = {}
    for root in roots:
        stack = [root]
        while stack:
            c = stack[-1]
            if c in memo:
                stack.pop()
                continue
            node = view.nodes[choice[c]]
            todo = [k for k in node.children if k not in memo]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            memo[c] = hash((node.op, tuple(tuple(x) if isinstance(x, (list, tuple)) else x for x in node.literals),
                            tuple(memo[k] for k in node.children)))
    return tuple(memo[r] for r in roots)
