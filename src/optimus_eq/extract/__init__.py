"""Extraction: choose one e-node per needed e-class, minimizing the cost model.

Modules, one job each: :mod:`.view` (read the e-graph: :class:`EGraphView`), :mod:`.plan` (a plan's DAG cost
and cycles, :class:`Extraction`, :func:`input_cost`), :mod:`.tree` (the e-graph as dense integers and the
tree-cost extractor), :mod:`.prune` (pruning, reachability, strongly connected components), :mod:`.bound` (a
lower bound per component), :mod:`.ilp` (the ILP with cycle cuts), :mod:`.cycles` (its hub rows), :mod:`.refine`
(local search), :mod:`.driver` (the :func:`extract` entry).

One entry point, :func:`extract`, with four methods:

* ``"tree"``: bottom-up tree cost with a priority queue (Knuth's generalization of Dijkstra to superior
  functions; egg's ``Extractor``). O(E log E), but a node shared by N users is paid N times; on deep
  residual graphs tree costs grow like 2^depth and stop telling plans apart.
* ``"auto"`` (default): the *fast plan*, then the *exact components*:

  1. the fast plan is the tree plan improved by a DAG-aware local search (:func:`.refine._refine`): moves
     apply while they lower the exact DAG cost, computed with reference counts (e-nodes left unused are
     saved, classes newly used are paid once): re-choose one class; or make every used class that can use
     one unused class ``s`` switch to it at once (one shared fused node instead of many small ones, which no
     single move finds). Moves keep the plan acyclic. It runs on the whole e-graph in well under a second
     at 10^5 e-nodes.
  2. the problem is reduced to its *choice core*: e-nodes that can be in no acyclic plan are dropped, classes
     with one possible e-node that every plan needs are fixed, and the rest falls apart into independent
     components (below). A component whose fast plan meets its lower bound (:mod:`.bound`: each class's
     cost shared among the classes that may use it) is proven optimal there and solved no further. Each
     other component of at most ``ilp_max_nodes`` e-nodes (4,000) goes to the DAG-aware
     0-1 ILP (HiGHS, the solver inside scipy: one binary per e-node, each root class covered, a chosen e-node
     requires one chosen e-node in each child class; a shared e-node is paid once; TENSAT, MLSys 2021),
     warm-started from the fast plan, with a time budget of 0.05 s plus 1 ms per e-node. The ILP's plan
     replaces the fast plan on the component when it is acyclic and no dearer; a solve that stops at its
     budget gives its incumbent (never dearer than the warm start) and its gap; a solve that gives nothing
     leaves the fast plan. Larger components keep the fast plan.
* ``"ilp"``: the same, with every component solved exactly, each with the whole remaining budget.
* ``"fast"``: ``"auto"`` up to its exact stage (the fast plan): ``optimize`` extracts the plan that seeds a
  horizontal round this way (the round only reads it); when the round changed nothing, the final ``"auto"``
  extraction resumes from it (``extract(resume=)``) and runs only the exact stage.

Components are solved in order of size, small ones several at a time (up to 1,500 e-nodes per HiGHS call);
a batch whose LP relaxation is fractional is halved, down to single components, each then solved with the MIP
(HiGHS's branch and bound on a batch of independent components took 5x the sum of their separate solves on
DLRM, and stopped at its budget). A component with a cycle is solved alone and straight with the MIP: with hub
rows its relaxation is almost never integral (DLRM's batch of its two cyclic components was always halved).
``driver.EXACT_MAX_CYCLIC_NODES`` (2,000) caps the size of the cyclic components solved; a larger one keeps the fast plan.
Costs of independent components add up, so keeping the cheaper plan per component is exact. A ``deadline``
(the caller's whole-call limit, ``Limits.seconds``) stops the exact part: components it leaves keep the fast
plan. ``Extraction.stats`` says how the plan was found.

The reduction, before any solver runs:

1. e-nodes that can be in no acyclic plan are dropped: those with a child class that has no acyclic
   derivation, the other e-nodes of a class whose opaque e-node is forced, and those whose every
   derivation needs their own class (:func:`.prune._prune_cycles`; on split/cat graphs this removes every cycle
   we have seen: ``x = view(stack(unbind(view(x))))`` can only be computed from ``x``). The last step costs
   O(size^2) per strongly connected component, so ``"auto"`` runs it only in components small enough for
   the exact solver;
2. *fixed* classes (needed by every plan, one possible e-node) get no variable, and a class needed by every
   plan needs no "is it covered" row in its users;
3. the rest falls apart into independent components (e-nodes linked through their class and the non-fixed
   classes they need; the classes of one strongly connected component of the class graph kept together, so
   that every cycle lies inside one component). LP relaxation first: when it is integral it is the ILP's
   optimum (4x faster than the MIP solver, which runs only when it is not).

Cycles that survive the pruning are ruled out in the first solve: two e-nodes that need each other's class are
forbidden together (``x = cat([x, <empty>])``), and every cyclic strongly connected component gets *hub rows*
(:func:`.cycles.hub_rows`): a small feedback set of its classes (:func:`.cycles.feedback_classes`, greedy; every
cycle passes through one) and per hub ``h`` and class ``c`` a reach variable ``d[h, c]`` in [0, 1], forced to 1
back along chosen e-nodes that lead to ``h`` (``d[h, c] >= x_i + d[h, k] - 1``), with ``x_i + d[h, k] <= 1`` for
the hub's own e-nodes. No big-M: the topological-order variables used before (``t_c >= t_k + 1 - n (1 - x_i)``,
added after two rounds of lazy cuts) gave HiGHS a weak relaxation: DLRM's cat/narrow cycles (one 421-e-node
component, 78 cyclic classes, one hub) took 0.57 s with them and 0.04 s with hub rows; launch_bound's
783-e-node component 3.2 s -> 0.34 s; its gpu preset's 3,041 e-nodes 0.7 s. An SCC whose feedback set has
more than ``cycles.MAX_HUBS`` (8) classes gets the order variables instead (hub rows grow with hubs x e-nodes).
A plan that still cycles (with ``ORDER_AFTER > 0``, tests) gets class-cycle cuts: at most ``m - 1`` of the
cycle's ``m`` classes may choose an e-node that needs the next class (every e-node sequence through those
classes at once). Cuts and hub rows forbid only cyclic plans, so the optimum over acyclic plans is kept.

On the bench graphs (bench/results/extract_cpu_2026-12-01), the fast plan equals the ILP optimum wherever
the ILP finishes. A component over ``ilp_max_nodes`` keeps the fast plan (128 parallel branches x 2 layers: one of
12k e-nodes, proven optimal in 3.5 CPU s when solved, 8x the whole call; bench/results/scale_cpu_2026-12-02g).
"""

from __future__ import annotations

from optimus_eq.extract.driver import NoAcyclicTerm, extract, limit_notes
from optimus_eq.extract.plan import Extraction, dag_cost, find_cycle, input_cost
from optimus_eq.extract.view import EGraphView, ENode, no_gc

__all__ = ["EGraphView", "ENode", "Extraction", "NoAcyclicTerm", "dag_cost", "extract", "find_cycle", "input_cost", "limit_notes", "no_gc"]
