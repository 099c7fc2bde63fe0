"""Horizontal fusion: many independent identical ops -> one batched op (the starting design's principle 3).

* :mod:`.subsets`: Optimus' greedy independent subsets (``find_independent_subset_greedy``);
* :mod:`.plan`: group analysis on an extracted plan (networkx; same op, attributes, shapes, dtypes and
  devices; mutually independent; Optimus' greedy independent subsets, fuse-set sizes and search depth);
* :mod:`.builders`: group keys and the fused alternative of each pattern, in the term language;
* :mod:`.rows`: the rows that insert fused alternatives into the e-graph and join them to the members;
* :mod:`.driver`: one round (plan -> groups -> rows), used by both strategies;
* :mod:`.patterns`: the registered patterns in greedy's order (each declared in its family's module).

A user registers a horizontal pattern of their own with a :class:`HorizontalPattern` (a group key and a
builder) through the same ``register`` call as a vertical one; both strategies use it.
"""

from optimus_eq.horizontal.driver import DEFAULT_OPTIONS, HorizontalContext, fuse_round
from optimus_eq.horizontal.plan import Member, PlanGraph
from optimus_eq.horizontal.rows import RowWriter
from optimus_eq.horizontal.subsets import find_independent_subset_greedy
from optimus_eq.registry import HorizontalPattern

__all__ = ["DEFAULT_OPTIONS", "HorizontalContext", "HorizontalPattern", "Member", "PlanGraph", "RowWriter",
           "find_independent_subset_greedy", "fuse_round"]
