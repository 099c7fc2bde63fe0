"""Optimus' greedy independent subsets: which candidates of one group key are fused together.

The rule is upstream's ``find_independent_subset_greedy`` (torch/_inductor/fx_passes/group_batch_fusion.py;
read for the rule, our own code): walk the candidates in order; a candidate joins the current subset
when no member depends on it and it depends on no member (no path either way), until the subset has
``max_fuse_set_size`` members; the subset is used when it has at least ``min_fuse_set_size`` members;
the candidates not taken are walked again, in the same order, for the next subset.

Dependencies are ancestor bitsets (Python ints, bit ``i`` for the ``i``-th remaining candidate), so
one round costs one pass over the graph instead of one search per candidate.

* :func:`greedy_round`: one subset from candidates and their ancestor bitsets;
* :func:`greedy_subsets`: the whole walk, one round per subset, over a graph the caller describes by
  its walk order and ancestor bitsets (:class:`optimus_eq.horizontal.plan.PlanGraph` walks its
  candidates in topological order and adds each fused op to its graph between rounds);
* :func:`find_independent_subset_greedy`: the whole walk on the nodes of a plain ``torch.fx.Graph``,
  with upstream's signature;
* :class:`GroupOverlap`: the groups a non-destructive search yielded, to offer their unions too.
"""

from __future__ import annotations

from typing import Callable, Container, Iterable, Iterator, Sequence

import torch


def greedy_round(cands: Sequence, anc: Sequence[int], max_size: int) -> tuple[list, list]:
    """One greedy subset.

    Args:
        cands: the remaining candidates, in the order to walk them.
        anc: ``anc[i]`` is the bitset of the candidates (bit ``j`` for ``cands[j]``) that ``cands[i]``
            depends on, directly or through other nodes.
        max_size: at most this many members (``max_fuse_set_size``).

    Returns:
        ``(subset, rest)``: the members, in walk order, and the candidates not taken, in walk order.
    """
    subset, rest = [], []
    taken = 0   # bits of the members
    below = 0   # bits of the candidates some member depends on
    for i, c in enumerate(cands):
        if len(subset) < max_size and not (anc[i] & taken) and not (below >> i) & 1:
            subset.append(c)
            taken |= 1 << i
            below |= anc[i]
        else:
            rest.append(c)
    return subset, rest


def fx_ancestor_bits(cands: Sequence[torch.fx.Node]) -> list[int]:
    """For each FX node in ``cands`` (all of one graph), the bitset of the others it depends on.

    Raises:
        ValueError: when the nodes are not all in one graph.
    """
    if not cands:
        return []
    graph = cands[0].graph
    if any(c.graph is not graph for c in cands):
        raise ValueError("candidates from more than one graph")
    bit = {c: 1 << i for i, c in enumerate(cands)}
    anc: dict = {}
    for n in graph.nodes:  # an FX graph lists its nodes in topological order
        a = 0
        for u in n.all_input_nodes:
            a |= anc.get(u, 0) | bit.get(u, 0)
        anc[n] = a
    return [anc[c] for c in cands]


def find_independent_subset_greedy(nodes: Iterable[torch.fx.Node], options: dict) -> Iterator[list[torch.fx.Node]]:
    """Optimus' greedy independent subsets of FX nodes (module docstring), upstream's signature.

    Args:
        nodes: candidate nodes of one ``torch.fx.Graph``, in the order to walk them (duplicates are
            dropped).
        options: ``min_fuse_set_size`` and ``max_fuse_set_size`` (upstream's option names).

    Yields:
        Lists of mutually independent nodes, each in walk order, of ``min_fuse_set_size`` to
        ``max_fuse_set_size`` members. Nothing is yielded when ``max_fuse_set_size < 1``. The graph is
        read once per subset: a caller may fuse a yielded subset before asking for the next one.

    Raises:
        KeyError: when an option is missing. ValueError: nodes from more than one graph.
    """
    return greedy_subsets(nodes, options, lambda remaining: (remaining, fx_ancestor_bits(remaining)))


def greedy_subsets(cands: Iterable, options: dict, walk: Callable[[list], tuple[list, Sequence[int]]],
                   taken: Container = frozenset()) -> Iterator[list]:
    """The greedy walk (module docstring) over any graph: one :func:`greedy_round` per subset.

    Args:
        cands: the candidates (duplicates are dropped).
        options: ``min_fuse_set_size`` and ``max_fuse_set_size``.
        walk: ``walk(remaining) -> (remaining in walk order, their ancestor bitsets)``, called once per
            round, after the caller has used the previous subset (it may have changed the graph).
        taken: candidates to leave out, read again after each subset (the caller may add to it).

    Yields:
        Lists of candidates, each in walk order, of ``min_fuse_set_size`` to ``max_fuse_set_size`` members;
        nothing when ``max_fuse_set_size < 1``.

    Raises:
        KeyError: when an option is missing.
    """
    lo, hi = options["min_fuse_set_size"], options["max_fuse_set_size"]
    remaining = [c for c in dict.fromkeys(cands) if c not in taken]
    if hi < 1:
        return
    while remaining and len(remaining) >= lo:
        remaining, anc = walk(remaining)
        subset, rest = greedy_round(remaining, anc, hi)
        if len(subset) >= lo:
            yield subset
        remaining = [c for c in rest if c not in taken]


class GroupOverlap:
    """The groups one :meth:`optimus_eq.horizontal.plan.PlanGraph.groups` call yielded with ``overlap``: which
    of them holds each member."""

    def __init__(self) -> None:
        self.group_of: dict = {}   # member class -> sizes of the groups of this call that hold it

    def wider(self, classes) -> bool:
        """Whether ``classes`` (a group or a candidate list) is larger than every group of this call that shares a
        member with it: an alternative none of them gives (a superset, not a re-split of one)."""
        n = len(set(classes))
        return all(size < n for c in classes for size in self.group_of.get(c, ()))

    def add(self, classes) -> None:
        """Record a yielded group."""
        n = len(classes)
        for c in classes:
            self.group_of.setdefault(c, []).append(n)
