"""``Report.patterns_fired``: the rewrites present in the extracted plan, counted the same way for every
strategy, so that greedy's and eqsat's figures compare.

egglog's match counts (``Report.rule_matches``) are not that: eqsat's rules add alternatives that extraction
may not choose, and a rule matches again in later iterations, so its counts grow with the search, not with
the plan. Here the counts are read off the plan itself:

- a horizontal pattern: the groups it fused that the plan uses (a group eqsat offered and extraction did not
  choose is not counted);
- a vertical pattern: the plan's e-classes where an input op is computed another way
  (``optimus_bridge.provenance.rewritten_classes``), each credited to one pattern by the shape of its rules:
  the first pattern in pass order with a rule whose left-hand side is rooted at the input op's constructor
  and whose right-hand side is rooted at the plan's constructor (or is a bare variable: the op folds into
  its argument), an exact root match preferred. A function of the input and the plan only, so two
  strategies that reach the same plan report the same counts. It is a cheap credit, not a derivation:
  ``optimus-eq explain``'s leave-one-out credits say exactly which pattern a plan needs;
- a canonical pattern (the translator's normalization): the ops the translator normalized, as before.

A change with no rule of that shape (a rewrite inside a cat's list, a form the lowering makes) is counted
under no pattern.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Mapping

from optimus_eq.registry import Pattern


def _root(term: str) -> str | None:
    """The constructor at the root of an egglog term's text, or None for a bare variable or literal."""
    term = term.strip()
    if not term.startswith("("):
        return None
    return term[1:].split(None, 1)[0].rstrip(")")


def rule_shapes(patterns: Iterable[Pattern]) -> list[tuple[str, str, str | None]]:
    """``(pattern name, left-hand root, right-hand root or None)`` per rule of the vertical patterns, in
    pass order."""
    out = []
    for p in patterns:
        if p.kind != "vertical":
            continue
        for r in p.rules:
            lhs = _root(r.lhs)
            if lhs is not None:
                out.append((p.name, lhs, _root(r.rhs)))
    return out


def credit_rewrites(changes: Mapping, patterns: Iterable[Pattern]) -> Counter:
    """Pattern name -> plan e-classes credited to it.

    Args:
        changes: e-class -> ``(input constructor, plan constructor)``
            (``optimus_bridge.provenance.rewritten_classes``).
        patterns: the patterns that ran, in pass order.
    """
    first: dict[tuple[str, str | None], str] = {}  # (left root, right root or None) -> first pattern in pass order
    for name, lhs, rhs in rule_shapes(patterns):
        first.setdefault((lhs, rhs), name)
    out: Counter = Counter()
    for ctor, chosen in changes.values():
        name = first.get((ctor, chosen)) or first.get((ctor, None))
        if name is not None:
            out[name] += 1
    return out


def groups_in_plan(groups: Iterable[tuple[str, list, list, set]], node_of: Mapping, nodes: Mapping,
                   choice: Mapping) -> Counter:
    """Pattern name -> horizontal groups the plan uses.

    Args:
        groups: ``(pattern name, handles of the ops its build made, handles of the terms it unioned into the
            members, {(constructor, op key)} of the members)`` per group fused (``HorizontalContext.groups``).
        node_of: term handle -> e-class; ``nodes``: e-node id -> e-node (``op``, ``literals``); ``choice``: the
            plan's e-class -> chosen e-node id.
    A group is used when the plan computes its batched op, or computes a member's e-class by an e-node other
    than a member's own op. A group eqsat offered and extraction passed over does neither.
    """
    out: Counter = Counter()
    for name, made, joined, own in groups:
        if any(node_of.get(h) in choice for h in made):
            out[name] += 1
            continue
        for h in joined:
            cls = node_of.get(h)
            if cls is None or cls not in choice:
                continue
            en = nodes[choice[cls]]
            if not any(en.op == op and en.literals and en.literals[0] == key for op, key in own):
                out[name] += 1
                break
    return out
