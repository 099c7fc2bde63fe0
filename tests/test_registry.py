"""The pattern registry: declared once, checked at registration, listed for users, and honoured by both
strategies when a user registers a pattern of their own."""

from __future__ import annotations

import pytest
import torch

import optimus_eq
from conftest import check, rand
from optimus_eq import DEFAULT_REGISTRY, Pattern, Rule
from optimus_eq.patterns import PatternRegistry


def _pattern(name="my_pattern", rules=(), kind="vertical", levels=("pre_grad",)):
    return Pattern(name=name, levels=levels, kind=kind, rules=tuple(rules), doc="test pattern\n\n    a => b\n")


GOOD = Rule("test/full_narrow", "(Narrow x d 0 n n)", "x", ("(= sh (shape x))",))


def test_duplicate_pattern_name_raises():
    reg = PatternRegistry()
    reg.register(_pattern("p1"))
    with pytest.raises(ValueError, match="p1"):
        reg.register(_pattern("p1"))


def test_duplicate_pattern_name_in_default_registry_raises_and_leaves_it_intact():
    before = DEFAULT_REGISTRY.names()
    with pytest.raises(ValueError, match="split_cat_pass"):
        DEFAULT_REGISTRY.register(_pattern("split_cat_pass"))
    assert DEFAULT_REGISTRY.names() == before


def test_duplicate_rule_name_raises():
    reg = PatternRegistry()
    reg.register(_pattern("p1", [GOOD]))
    with pytest.raises(ValueError, match="test/full_narrow"):
        reg.register(_pattern("p2", [GOOD]))
    assert "p2" not in reg


@pytest.mark.parametrize("rule", [
    Rule("bad/unbound_rhs", "(Unary f x)", "(Unary f y)"),
    Rule("bad/unbound_guard", "(Unary f x)", "x", ("(= sh (shape y))", "(> k 0)")),
    Rule("bad/unknown_constructor", "(Frobnicate x)", "x"),
    Rule("bad/unknown_constructor_rhs", "(Unary f x)", "(Frobnicate x)"),
    Rule("bad/arity", "(Narrow x d)", "x"),
    Rule("bad/sort", "(Narrow x d s l n)", "d"),
    Rule("bad/syntax", "(Narrow x d s l n", "x"),
], ids=lambda r: r.name)
def test_invalid_rule_raises_at_registration(rule):
    reg = PatternRegistry()
    with pytest.raises(ValueError) as info:
        reg.register(_pattern("bad", [rule]))
    assert rule.name in str(info.value)
    assert "bad" not in reg


@pytest.mark.parametrize("kwargs", [{"kind": "sideways"}, {"levels": ("mid_grad",)}, {"levels": ()}])
def test_invalid_kind_or_level_raises(kwargs):
    with pytest.raises(ValueError):
        PatternRegistry().register(_pattern("p", **kwargs))


def test_list_patterns_names_levels_kinds():
    listed = optimus_eq.list_patterns()
    assert listed, "no patterns registered"
    names = [n for n, _, _ in listed]
    assert names == DEFAULT_REGISTRY.names()  # greedy pass order
    assert len(set(names)) == len(names)
    for name, levels, kind in listed:
        assert isinstance(name, str) and name
        assert isinstance(levels, tuple) and levels and set(levels) <= {"pre_grad", "post_grad"}
        assert kind in ("vertical", "horizontal", "canonical")
    # the Optimus names users map options from
    for optimus_name in ("normalization_pass", "merge_splits_pass", "split_cat_pass", "unbind_stack_pass",
                         "merge_getitem_cat_pass", "mutate_cat_pass", "remove_split_with_size_one_pass"):
        assert optimus_name in names


def test_every_pattern_is_documented_with_an_example():
    for p in DEFAULT_REGISTRY:
        assert p.doc and "=>" in p.doc, f"{p.name}: the docstring needs a tiny before => after example"
        assert p.kind in ("canonical", "horizontal") or p.rules, f"{p.name}: a non-canonical pattern without rules"


def test_rule_names_are_owned_by_their_pattern():
    for p in DEFAULT_REGISTRY:
        for r in p.rules:
            assert DEFAULT_REGISTRY.owner_of(r.name) == p.name


def test_select_keeps_registry_order():
    names = DEFAULT_REGISTRY.names()
    picked = DEFAULT_REGISTRY.select(list(reversed(names[:3])))
    assert [p.name for p in picked] == names[:3]


@pytest.fixture
def user_registry():
    """A registry holding only a user's own copy of the split -> cat fold, under new names."""
    from optimus_eq.patterns import split_cat

    src = split_cat.split_cat_pass
    reg = PatternRegistry()
    reg.register(split_cat.normalization_pass)
    reg.register(Pattern(name="my_split_cat", levels=("pre_grad",), kind="vertical",
                         rules=tuple(Rule("my/" + r.name, r.lhs, r.rhs, r.when) for r in src.rules),
                         doc="user copy of split_cat_pass\n\n    cat(split(x)) => x\n"))
    return reg


def test_user_registered_pattern_is_used_by_both_strategies(user_registry, strategy):
    def f(x, y):
        a, b, c = torch.split(x, [1, 2, 1], 1)
        return torch.cat([y, a, b, c], 1) * 2

    r = check(f, [rand(3, 4), rand(3, 2)], strategy, source="fx", registry=user_registry).report
    assert r.rule_matches["my_split_cat"] > 0
    assert r.ops_after.get("split", 0) == 0 and r.ops_after.get("getitem", 0) == 0
    assert "split_cat_pass" not in r.rule_matches
