"""Search strategies for ablation studies against ``greedy`` and ``eqsat``: ``taso`` and ``tensat``.

They use the same pattern registry, e-graph, cost model and extractors as the product strategies and are
selected with the same ``strategy=`` flag.
"""
