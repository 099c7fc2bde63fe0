"""The pattern registry: one declaration per pattern, read by every search strategy.

A :class:`Pattern` is data: a name (the Optimus option name where one exists), its IR level, its kind,
its rules, and a docstring with a tiny before/after example. A :class:`Rule` is one egglog rewrite
(``lhs => rhs`` with optional ``:when`` guards that may query the analyses of :mod:`optimus_eq.terms`).

The eqsat strategy adds every rule as a plain rewrite (both sides stay in the e-graph); the greedy
strategy adds the same rewrite with ``:subsume`` (the left-hand side is removed: destructive
replacement, as Optimus does). Rules are checked against the term language when registered, so a
typo, an unbound variable or a wrong arity fails at import time, not in a user's compile.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

from optimus_eq.egglog_bindings import bindings

from optimus_eq.terms import ANALYSIS_RULES, SCHEMA

KINDS = ("vertical", "horizontal", "canonical")
LEVELS = ("pre_grad", "post_grad")


@dataclass(frozen=True)
class Rule:
    """One egglog rewrite ``lhs => rhs`` under the guards ``when`` (egglog facts).

    ``name`` is unique across the registry; firings are reported under the owning pattern's name.
    """

    name: str
    lhs: str
    rhs: str
    when: tuple[str, ...] = ()

    def to_egglog(self, ruleset: str, subsume: bool) -> str:
        """The rule as egglog text in ``ruleset``; ``subsume`` makes it destructive (greedy)."""
        when = f" :when ({' '.join(self.when)})" if self.when else ""
        sub = " :subsume" if subsume else ""
        return f'(rewrite {self.lhs} {self.rhs}{when}{sub} :ruleset {ruleset} :name "{self.name}")'


def renamed(prefix: str, rules: Iterable[Rule]) -> tuple[Rule, ...]:
    """``rules`` under the names ``<prefix>/<rule name>``, for a pattern that reuses another pattern's
    rules (rule names are unique in a registry; firings count for the pattern that holds the rule)."""
    return tuple(replace(r, name=f"{prefix}/{r.name}") for r in rules)


@dataclass(frozen=True)
class Pattern:
    """A named rewrite pattern.

    Everything about one pattern is declared here, in the module of its family, so that a pattern name
    occurs in one module of the project (tests/test_house.py): the tables that other modules need (the
    built-in option names, what a built-in pass also selects, explain's batchable ops) are read off these
    fields.

    Attributes:
        name: the Optimus option name where one exists (as in ``pre_grad_fusion_options``).
        levels: IR levels it applies to, a subset of ``("pre_grad", "post_grad")``.
        kind: ``"vertical"`` (rewrites a chain), ``"horizontal"`` (fuses independent ops) or
            ``"canonical"`` (realized by the bridge's canonical forms: the translator or the lowering).
        rules: the egglog rewrites; empty for canonical patterns.
        doc: what it does, with a tiny before/after example.
        options: its option dictionary (Optimus' option names), as selected.
        builtin: the levels at which the built-in Optimus (torch 2.13) accepts this name in its option
            dictionary; ``()`` for a pattern of ours only.
        builtin_optimus: False when the built-in lists the name with its passes but it is not an Optimus pass
            (left out of :func:`optimus_eq.options.optimus_fusion_options`).
        also: for a built-in pass, the names of our patterns that do part of its job and are selected with
            it by its option name (:data:`optimus_eq.options.UPSTREAM_SCOPE`).
        aliases: built-in option names this pattern stands in for -> the note :func:`optimus_eq.options.
            option_notes` gives when one is selected.
    """

    name: str
    levels: tuple[str, ...]
    kind: str
    rules: tuple[Rule, ...]
    doc: str
    options: dict = field(default_factory=dict, compare=False)
    builtin: tuple[str, ...] = ()
    builtin_optimus: bool = True
    also: tuple[str, ...] = ()
    aliases: dict = field(default_factory=dict, compare=False)


#: the ``levels`` of a pattern: Torch-IR only, Aten-IR only, or both
PRE_GRAD, POST_GRAD, BOTH_LEVELS = ("pre_grad",), ("post_grad",), ("pre_grad", "post_grad")


def vertical(name: str, levels: tuple[str, ...], rules: Iterable[Rule], doc: str, **fields) -> Pattern:
    """A vertical pattern (kind ``"vertical"``): ``rules`` rewrite a chain of ops; ``doc`` and ``fields``
    (``builtin``, ``also``, ...) as in :class:`Pattern`."""
    return Pattern(name=name, levels=levels, kind="vertical", rules=tuple(rules), doc=doc, **fields)


def canonical(name: str, levels: tuple[str, ...], doc: str, **fields) -> Pattern:
    """A canonical pattern (kind ``"canonical"``, no rules): realized by the bridge's canonical forms."""
    return Pattern(name=name, levels=levels, kind="canonical", rules=(), doc=doc, **fields)


@dataclass(frozen=True)
class HorizontalPattern(Pattern):
    """A horizontal fusion: many independent identical ops -> one batched op (kind ``"horizontal"``).

    It has no rewrite rules: :mod:`optimus_eq.horizontal` finds groups on a plan extracted from the
    e-graph and asks the pattern to build one fused alternative per group.

    Attributes:
        group_key: ``group_key(member) -> hashable | None`` for a :class:`optimus_eq.horizontal.Member`
            (one op of the plan); members with equal non-None keys may be fused together. The key must
            hold everything the fused op depends on (op, constant arguments, shapes, dtypes, devices).
        build: ``build(writer, members) -> None`` adds the fused op through a
            :class:`optimus_eq.horizontal.RowWriter` and calls ``writer.union(member, term)`` once per
            member with the term that equals it.
        options: ``min_fuse_set_size``, ``max_fuse_set_size``, ``max_fuse_search_depth`` (Optimus'
            names; defaults in :data:`optimus_eq.horizontal.DEFAULT_OPTIONS`).
        batches: the op kinds (``Report.ops_before``'s) it batches, where not the name after ``batch_``:
            ``optimus-eq explain`` lists such ops left unbatched.
        shared_input: the key names the one input all members read; members are then also gathered by
            that input, wherever their users join (:meth:`optimus_eq.horizontal.PlanGraph.groups`).
        any_strides: members whose eager value is not contiguous are offered to the key too (the builder
            gives them eager's strides).
        wants_options: ``group_key(member, options)`` is called with the pattern's options.
        option_defaults: option names of its own (beyond Optimus') with their defaults.
        regroups: names of patterns whose members, fused by them earlier in the same horizontal round, stay
            candidates of this one in a round that only adds alternatives (eqsat): its groups may take those
            members with others (the same-input GEMM batching takes the linear-lhs batching's linears with
            a matmul of the same input, patterns/gemm_lhs.py), and extraction chooses. A group with exactly
            the members of such a group is not added again. Greedy's rounds commit each group, so there a
            fused member is gone.
    """

    kind: str = "horizontal"
    rules: tuple[Rule, ...] = ()
    doc: str = ""
    group_key: Callable | None = field(default=None, compare=False)
    build: Callable | None = field(default=None, compare=False)
    batches: tuple[str, ...] = ()
    shared_input: bool = False
    any_strides: bool = False
    wants_options: bool = False
    option_defaults: dict = field(default_factory=dict, compare=False)
    regroups: tuple[str, ...] = ()


def horizontal(name: str, levels: tuple[str, ...], group_key: Callable, build: Callable, doc: str,
               **fields) -> HorizontalPattern:
    """A horizontal pattern: ``group_key`` and ``build`` as in :class:`HorizontalPattern`, ``fields``
    (``options``, ``builtin``, ``batches``, ...) as there."""
    return HorizontalPattern(name=name, levels=levels, group_key=group_key, build=build, doc=doc, **fields)


class PatternRegistry:
    """An ordered collection of patterns; the order is the greedy strategy's pass order.

    Raises:
        ValueError: on a duplicate pattern or rule name, an unknown kind or level, or a rule that egglog
            rejects against the term language (unbound variable, wrong arity, unknown constructor).
    """

    def __init__(self) -> None:
        self._patterns: dict[str, Pattern] = {}
        self._rule_owner: dict[str, str] = {}

    def register(self, pattern: Pattern) -> Pattern:
        if pattern.name in self._patterns:
            raise ValueError(f"pattern {pattern.name!r} is already registered")
        if pattern.kind not in KINDS:
            raise ValueError(f"pattern {pattern.name!r}: kind must be one of {KINDS}, got {pattern.kind!r}")
        bad = [lv for lv in pattern.levels if lv not in LEVELS]
        if bad or not pattern.levels:
            raise ValueError(f"pattern {pattern.name!r}: levels must be a non-empty subset of {LEVELS}")
        if pattern.kind == "horizontal" and not (callable(getattr(pattern, "group_key", None))
                                                 and callable(getattr(pattern, "build", None))):
            raise ValueError(f"horizontal pattern {pattern.name!r} needs a group_key and a build function "
                             "(use HorizontalPattern)")
        for rule in pattern.rules:
            if rule.name in self._rule_owner:
                raise ValueError(f"rule name {rule.name!r} is already used by {self._rule_owner[rule.name]!r}")
        _check_rules(pattern.rules)
        self._patterns[pattern.name] = pattern
        for rule in pattern.rules:
            self._rule_owner[rule.name] = pattern.name
        return pattern

    def __getitem__(self, name: str) -> Pattern:
        return self._patterns[name]

    def __contains__(self, name: str) -> bool:
        return name in self._patterns

    def __iter__(self):
        return iter(self._patterns.values())

    def names(self) -> list[str]:
        return list(self._patterns)

    def owner_of(self, rule_name: str) -> str | None:
        """The pattern that owns ``rule_name``, or None for analysis rules."""
        return self._rule_owner.get(rule_name)

    def select(self, names: Iterable[str] | None, level: str = "pre_grad") -> list[Pattern]:
        """The patterns named (all of ``level`` when ``names`` is None), in registry order.

        Raises:
            ValueError: if a name is not registered; the message lists the valid names.
        """
        if names is None:
            return [p for p in self if level in p.levels]
        names = list(names)
        unknown = [n for n in names if n not in self._patterns]
        if unknown:
            raise ValueError(f"unknown pattern(s) {unknown}; valid names: {sorted(self._patterns)}")
        return [p for p in self if p.name in names]



class _Scratch:
    """One thread's scratch e-graph holding the term language, for :func:`_check_rules` (an egglog e-graph is
    unsendable: it belongs to the thread that made it). Declaring the term language costs ~12 ms; once per
    pattern it was 0.2 s of every process's ``import optimus_eq.patterns`` (18 patterns with rules), once per
    thread it is one."""

    def __init__(self) -> None:
        self.owner = threading.get_ident()
        self.egraph = bindings.EGraph()
        self.egraph.run_program(*self.egraph.parse_program(SCHEMA + ANALYSIS_RULES))
        self.calls = 0
        _ALL_SCRATCH.add(self)


_LOCAL = threading.local()
_ALL_SCRATCH: "weakref.WeakSet[_Scratch]" = weakref.WeakSet()


@atexit.register
def _keep_foreign_scratch_at_exit() -> None:
    """As :func:`optimus_eq.egraph._keep_foreign_templates_at_exit`: a scratch e-graph of a thread still running
    at exit (a daemon thread that imported the patterns) is never dropped by the exiting thread, where pyo3
    would print "EGraph is unsendable, but is being dropped on another thread"."""
    import ctypes

    me = threading.get_ident()
    for scratch in list(_ALL_SCRATCH):
        if scratch.owner != me:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(scratch.egraph))


def _check_rules(rules: tuple[Rule, ...]) -> None:
    """Compile each rule into a scratch e-graph that holds the term language; egglog type-checks it. Each
    call adds its rules under a ruleset (and rule names) of its own, so the checks of two registries that
    hold the same rule names never meet."""
    if not rules:
        return
    scratch = getattr(_LOCAL, "scratch", None)
    if scratch is None:
        scratch = _LOCAL.scratch = _Scratch()
    scratch.calls += 1
    egraph, ruleset = scratch.egraph, f"check{scratch.calls}"
    egraph.run_program(*egraph.parse_program(f"(ruleset {ruleset})"))
    for rule in rules:
        try:
            text = replace(rule, name=f"{ruleset}/{rule.name}").to_egglog(ruleset, subsume=False)
            egraph.run_program(*egraph.parse_program(text))
        except Exception as exc:  # egglog raises EggSmolError
            raise ValueError(f"rule {rule.name!r} is not valid egglog over the term language: {exc}") from exc
