"""eqsat's schedule leaves out alias rulesets (``saturate.distinct_rulesets``) without losing a rewrite."""

import random

import optimus_eq
from optimus_eq.saturate import distinct_rulesets


def _bodies(patterns):
    return {(r.lhs, r.rhs, r.when) for p in patterns for r in p.rules}


def test_every_rule_body_still_runs_for_any_selection():
    registry = [p for p in optimus_eq.DEFAULT_REGISTRY if p.rules]
    rng = random.Random(0)
    for _ in range(200):
        chosen = rng.sample(registry, rng.randint(1, len(registry)))
        kept = distinct_rulesets(chosen)
        assert _bodies(kept) == _bodies(chosen)
        assert [p for p in chosen if p in kept] == kept  # a subsequence: the pass order is kept


def test_the_run_algebra_alias_runs_only_without_the_patterns_it_copies():
    reg = optimus_eq.DEFAULT_REGISTRY
    alias = reg["split_cat_to_slices_pass"]
    copied = [reg[n] for n in ("split_cat_pass", "merge_getitem_cat_pass", "mutate_cat_pass")]
    assert distinct_rulesets([*copied, alias]) == copied
    assert distinct_rulesets([alias, *copied]) == copied
    assert distinct_rulesets([alias]) == [alias]
    assert distinct_rulesets([alias, copied[1]]) == [alias, copied[1]]  # the full run and the single input
