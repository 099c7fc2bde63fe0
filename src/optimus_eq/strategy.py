"""The search strategies, declared as records in one table: what ``optimize`` needs of each (its search
function, whether its rules are destructive, the options its search takes, the extractor it names, whether it
ranks graphs by an objective). A new strategy is one more row here and a module with its ``search``.

Every ``search(egraph, patterns, limits, **options, horizontal=...) -> SearchResult`` runs on an
:class:`optimus_eq.egraph.EGraph` made with ``subsume=destructive``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import optimus_greedy
from optimus_eq import saturate
from optimus_eq.ablation import taso, tensat


@dataclass(frozen=True)
class Strategy:
    """One search strategy.

    Attributes:
        name: what ``optimize(strategy=...)`` takes.
        search: its search function (None for ``"none"``: the graph is left as it is).
        destructive: its rules remove their left-hand side (egglog ``:subsume``), as Optimus' passes do.
        options: the keyword options of ``search`` a user may pass as ``strategy_options``.
        extractor: the extractor it names, used when the caller leaves ``extractor="auto"`` (None: auto).
        needs_objective: ``search`` ranks graphs with ``objective(egraph) -> (cost, fingerprint)``, which
            ``optimize`` builds from the translation and the cost model.
        by_cost: it picks its plan by the cost model (eqsat, taso, tensat; greedy applies every rewrite, as
            Optimus does): a plan the model prices above the input graph gives way to the input
            (``plan_check.dearer_than_input``). Not ``not destructive``: taso's steps are destructive, and its search
            keeps the cheapest graph it saw, the input among them.
    """

    name: str
    search: Callable | None
    destructive: bool = False
    options: tuple[str, ...] = ()
    extractor: str | None = None
    needs_objective: bool = False
    by_cost: bool = False


#: name -> Strategy, in the order ``optimus_eq.STRATEGIES`` lists them.
TABLE: dict[str, Strategy] = {s.name: s for s in (
    Strategy("none", None),
    Strategy("greedy", optimus_greedy.search, destructive=optimus_greedy.SUBSUME),
    Strategy("eqsat", saturate.search, destructive=saturate.SUBSUME, by_cost=True),
    Strategy("taso", taso.search, destructive=taso.SUBSUME, options=("alpha",), needs_objective=True, by_cost=True),
    Strategy("tensat", tensat.search, destructive=tensat.SUBSUME, options=("k_multi",), extractor=tensat.EXTRACTOR,
             by_cost=True),
)}


def get(name: str) -> Strategy:
    """The strategy named ``name``.

    Raises:
        ValueError: for an unknown name (the message lists the valid ones).
    """
    if name not in TABLE:
        raise ValueError(f"unknown strategy {name!r}; valid: {tuple(TABLE)}")
    return TABLE[name]
