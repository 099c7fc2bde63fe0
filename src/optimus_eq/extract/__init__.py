"""Extraction: choose one e-node per needed e-class, minimizing the cost model.

Modules, one job each: :mod:`.view` (read the e-graph: :class:`EGraphView`), :mod:`.plan` (a plan's DAG cost
and cycles, :class:`Extraction`, :func:`input_cost`), :mod:`.tree` (the e-graph as dense integers and the
tree-cost extractor), :mod:`.prune` (pruning, reachability, strongly connected components), :mod:`.ilp` (the
ILP with cycle cuts), :mod:`.refine` (local search), :mod:`.driver` (the :func:`extract` entry).

One entry point, :func:`extract`, with three methods:

* ``"tree"``: bottom-up tree cost with a priority queue (Knuth's generalization of Dijkstra to superior
  functions; egg's ``Extractor``). O(E log E), but a node shared by N users is paid N times; on deep
  residual graphs tree costs grow like 2^depth and stop telling plans apart.
* ``"ilp"``: DAG-aware 0-1 ILP (HiGHS, the solver inside scipy): one binary per e-node, each root class
  covered, a chosen e-node requires one chosen e-node in each child class; a shared e-node is paid once
  (../shared/EGGLOG_NOTES.md; TENSAT, MLSys 2021).
* ``"auto"`` (default): the ILP on every independent component up to ``ilp_max_nodes`` e-nodes, the local
  search below for the rest; the plan is kept only if it is acyclic and no dearer than the tree plan.

The ILP is made small before it is solved:

1. e-nodes that can be in no acyclic plan are dropped: those with a child class that has no acyclic
   derivation, the other e-nodes of a class whose opaque e-node is forced, and those whose every
   derivation needs their own class (:func:`.prune._prune_cycles`; on split/cat graphs this removes every cycle
   we have seen: ``x = view(stack(unbind(view(x))))`` can only be computed from ``x``);
2. *fixed* classes (needed by every plan, one possible e-node) get no variable, and a class needed by every
   plan needs no "is it covered" row in its users;
3. the rest falls apart into independent components (e-nodes linked through their class and the non-fixed
   classes they need; the classes of one strongly connected component of the class graph kept together, so
   that every cycle lies inside one component). Small components are solved together, a few hundred
   e-nodes per HiGHS call, LP relaxation first: it was integral on every batch we measured, and then it is
   the ILP's optimum (4x faster than the MIP solver, which runs only when it is not).

Cycles that survive the pruning are cut lazily: solve, find EVERY cycle of the chosen plan (each back edge
of one depth-first search), forbid each one, solve again; a strongly connected component that keeps
producing cycles gets topological-order variables (``t_c >= t_k + 1`` whenever a chosen e-node of ``c``
needs ``k``), which rule out all of its cycles at once.

The local search (:func:`.refine._refine`, for components over ``ilp_max_nodes`` or when the ILP fails or runs out
of time) starts from the tree choice and applies moves while they lower the exact DAG cost, computed with
reference counts (e-nodes left unused are saved, classes newly used are paid once): re-choose one class;
or make every used class that can use one unused class ``s`` switch to it at once (one shared fused node
instead of many small ones, which no single move finds). Moves keep the plan acyclic.

Measured on the synthetic recommendation graphs (bench/scale.py), 50k FX nodes, 125k e-nodes: about 1 s,
the ILP optimum (cost 5424 against 86574 for the tree plan); the local search alone reaches the same cost.
"""

from __future__ import annotations

from optimus_eq.extract.driver import NoAcyclicTerm, extract
from optimus_eq.extract.plan import Extraction, dag_cost, find_cycle, input_cost
from optimus_eq.extract.view import EGraphView, ENode, no_gc

__all__ = ["EGraphView", "ENode", "Extraction", "NoAcyclicTerm", "dag_cost", "extract", "find_cycle", "input_cost", "no_gc"]
