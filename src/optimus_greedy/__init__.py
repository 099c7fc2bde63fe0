"""The ``greedy`` strategy: Optimus' algorithm over optimus_eq's pattern set."""

from optimus_greedy.search import SUBSUME, search

__all__ = ["SUBSUME", "search"]
