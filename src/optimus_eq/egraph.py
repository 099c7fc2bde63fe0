"""One egglog e-graph holding the term language, the analyses and a chosen pattern set, plus a
domain-free runner with limits and a stop reason (after egg's ``Runner``).

Both strategies use this module; they differ only in the schedule they run and in whether rules
subsume their left-hand side (greedy) or keep it (eqsat).
"""

from __future__ import annotations

import atexit
import functools
import itertools
import json
import os
import tempfile
import threading
import time
import weakref
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Sequence

from optimus_eq.egglog_bindings import bindings as eb

from optimus_eq.checks import check_int, check_seconds
from optimus_eq.registry import Pattern
from optimus_eq.terms import ANALYSIS_RULES, CONSTRUCTORS, LOAD_RULES, MOVEPERM_ROWS, SCHEMA

_SPAN = eb.RustSpan("optimus_eq.egraph", 0, 0)

#: Why the search stopped (egg's StopReason).
SATURATED, ITERATION_LIMIT, NODE_LIMIT, TIME_LIMIT = "saturated", "iteration_limit", "node_limit", "time_limit"


@dataclass(frozen=True)
class Limits:
    """Search limits.

    Attributes:
        iterations: at most this many saturation iterations (each: analyses to fixpoint, then every
            pattern rule once).
        nodes: stop once the e-graph holds more term e-nodes than this.
        seconds: stop once the search has run this long (wall-clock seconds).
    """

    iterations: int = 64
    nodes: int = 2_000_000
    seconds: float = 30.0

    def __post_init__(self) -> None:
        """Raises TypeError for a field of the wrong type, ValueError for ``iterations`` or ``nodes`` below 1
        or ``seconds`` below 0 (``seconds=0``: stop after the first check; ``float("inf")``: no time limit)."""
        check_int("Limits.iterations", self.iterations, 1)
        check_int("Limits.nodes", self.nodes, 1)
        check_seconds("Limits.seconds", self.seconds, positive=False)


@dataclass
class SearchResult:
    """What a search did: iterations run, why it stopped, firings per rule name (egglog matches)."""

    iterations: int = 0
    stop_reason: str | None = None
    rule_matches: Counter = field(default_factory=Counter)


def ruleset_name(pattern: Pattern) -> str:
    return f"p_{pattern.name}"


def commands(program: str) -> list[str]:
    """``program`` cut into its top-level egglog commands (at a newline followed by ``(`` outside any
    parenthesis or string).

    egglog 13.2.0 parses and runs a long program text superlinearly in time and memory: for the
    default pre-grad program of 158 rules, 80k characters (CPU s and peak RSS growth, one process each):
    3.3-5.3 s and +2.2 GB as one text, 0.11 s and +1 MB command by command (0.15 s in 4k-character batches,
    0.32 s in 16k ones)."""
    out, start, depth, quoted = [], 0, 0, False
    for i, ch in enumerate(program):
        if ch == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif ch == "(":
            if depth == 0 and i > start and program[i - 1] == "\n":
                out.append(program[start:i])
                start = i
            depth += 1
        elif ch == ")":
            depth -= 1
    out.append(program[start:])
    return [c for c in out if c.strip()]


def is_rust_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a Rust panic surfaced by pyo3 (``pyo3_runtime.PanicException``, a BaseException,
    so ``except Exception`` lets it through): the fail-safe treats it as an internal failure."""
    return type(exc).__name__ == "PanicException" and type(exc).__module__ == "pyo3_runtime"


class _Template:
    """An e-graph holding only a program (sorts, tables, rules), lent out one user at a time: the user works
    above an egglog ``push`` and gives it back with ``pop``, which restores the empty e-graph.

    egglog's ``EGraph`` is unsendable (pyo3 panics when another thread touches it), so a template belongs to
    the thread that declared it (``owner``) and lives in that thread's own cache (:data:`_LOCAL`)."""

    def __init__(self, program: Sequence[str]) -> None:
        self.owner = threading.get_ident()
        self.egraph = _declared(program)
        self.lock = threading.Lock()
        self.sizes = self.table_sizes()
        self.broken = False
        _ALL_TEMPLATES.add(self)

    def table_sizes(self) -> list:
        (out,) = self.egraph.run_program(eb.PrintSize(_SPAN, None))
        return sorted(out.sizes)


def _declared(program: Sequence[str]):
    """A fresh ``egglog.bindings.EGraph`` with ``program`` (top-level commands, :func:`commands`) declared,
    one command at a time (as :func:`commands` says, a long text at once is slow)."""
    egraph = eb.EGraph()
    for command in program:
        egraph.run_program(*egraph.parse_program(command))
    return egraph


@functools.lru_cache(maxsize=None)
def _base_program() -> tuple[str, ...]:
    """The commands every program starts with: the term language, the MovePerm table, the ``load`` and
    ``analysis`` rules (cut into commands once per process: 7 ms of a template's ~70 ms when the whole
    program text was cut at each template's declaration)."""
    return tuple(c for part in (SCHEMA, MOVEPERM_ROWS, LOAD_RULES, ANALYSIS_RULES) for c in commands(part))


#: every live template, for :func:`_keep_foreign_templates_at_exit`
_ALL_TEMPLATES: "weakref.WeakSet[_Template]" = weakref.WeakSet()


@atexit.register
def _keep_foreign_templates_at_exit() -> None:
    """At interpreter exit, templates of threads still running (autograd's device thread, daemon threads)
    would be dropped by the exiting thread, and pyo3 prints "EGraph is unsendable, but is being dropped on
    another thread" for each: give each such e-graph one more reference instead, so it is never dropped
    (the process is ending; the OS frees its memory)."""
    import ctypes

    me = threading.get_ident()
    for template in list(_ALL_TEMPLATES):
        if template.owner != me and template.egraph is not None:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(template.egraph))


#: per thread: program (its commands joined) -> its template (the most recently used few). Declaring the program costs
#: 0.1-0.3 s (egglog compiles each rule's query), a push or pop about 2 ms. Thread-local because an egglog
#: e-graph may only be used by the thread that made it: autograd's device thread (which compiles the backward
#: lazily under ``post_grad=True`` on the GPU) and a user's worker threads get templates of their own, and a
#: thread's templates are dropped on that thread when it ends.
_LOCAL = threading.local()
_TEMPLATES_MAX = 8


def _templates() -> "OrderedDict[str, _Template]":
    cache = getattr(_LOCAL, "templates", None)
    if cache is None:
        cache = _LOCAL.templates = OrderedDict()
    return cache


def _lend(program: Sequence[str], depth: list[int]):
    """An ``egglog.bindings.EGraph`` with ``program`` (its top-level commands) declared, and the function that
    gives it back (or None for an e-graph of the caller's own, when the template is lent out already).
    ``depth[0]`` counts the pushes to undo when giving it back (1 for the lending push, plus the user's own
    pushes)."""
    cache = _templates()
    key = "\n".join(program)
    template = cache.get(key)
    if template is not None and template.broken:
        del cache[key]
        template = None
    if template is None:
        template = cache[key] = _Template(program)
        while len(cache) > _TEMPLATES_MAX:
            cache.popitem(last=False)
    cache.move_to_end(key)
    if not template.lock.acquire(blocking=False):  # in use (a live EGraph of this thread): a fresh one
        return _declared(program), None
    try:
        template.egraph.run_program(eb.Push(1))
    except BaseException:
        template.lock.release()
        raise
    return template.egraph, lambda: _give_back(template, depth)


def _give_back(template: _Template, depth: list[int]) -> None:
    if threading.get_ident() != template.owner:
        # a finalizer run by the garbage collector on another thread: touching the e-graph would panic.
        # Never lend this template again; its thread drops it at the next lend (or when it ends).
        template.broken = True
        template.lock.release()
        return
    try:
        template.egraph.run_program(eb.Pop(_SPAN, depth[0]))
        ok = template.table_sizes() == template.sizes  # back to the bare program, or never lend it again
    except Exception:
        ok = False
    finally:
        template.lock.release()
    template.broken = template.broken or not ok


class EGraph:
    """An egglog e-graph with the term language, the analyses and the rules of ``patterns``.

    The declarations are compiled once per distinct program (pattern set and ``subsume``) and kept in a
    template e-graph; each EGraph works on the template above an egglog ``push`` and :meth:`close` (or
    garbage collection) pops back to it. Two EGraphs alive at once get separate e-graphs.

    Args:
        patterns: the patterns whose rules are added, one ruleset each (named ``p_<pattern name>``).
        subsume: add every rule with ``:subsume`` (destructive greedy replacement).
    """

    def __init__(self, patterns: Sequence[Pattern], subsume: bool = False) -> None:
        self.patterns = [p for p in patterns if p.rules]
        program = list(_base_program())  # one command per entry (a rule's text is one command)
        for p in self.patterns:
            program.append(f"(ruleset {ruleset_name(p)})")
            program.extend(r.to_egglog(ruleset_name(p), subsume) for r in p.rules)
        self._depth = [1]
        #: bumped by every call that may change the e-graph (insert, a run that changed it, push, pop):
        #: two reads at the same version see the same e-graph (callers cache extractions by it)
        self.version = 0
        #: a ``time.perf_counter()`` instant no search may run past (``optimize`` sets it from
        #: ``Limits.seconds``, which bounds its whole call); None: only ``Limits.seconds`` per saturation
        self.deadline: float | None = None
        self.egraph, give_back = _lend(program, self._depth)
        self._close = weakref.finalize(self, give_back) if give_back is not None else None

    def close(self) -> None:
        """Give the e-graph back (its contents are dropped); the EGraph cannot be used afterwards."""
        if self._close is not None:
            self._close()
        self.egraph = None

    def __enter__(self) -> "EGraph":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def insert(self, rows: dict[str, list[tuple]]) -> None:
        """Insert a whole graph given as integer rows per load relation (see optimus_bridge.translate).

        The rows go through egglog's ``input`` command (tab-separated files in a temporary folder),
        then one pass of the ``load`` rules builds every term at once.
        """
        self.version += 1
        with tempfile.TemporaryDirectory(prefix="optimus_eq_") as tmp:
            commands = []
            for relation, table in rows.items():
                if not table:
                    continue
                path = os.path.join(tmp, f"{relation}.tsv")
                line = "\t".join(["%d"] * len(table[0])) + "\n"  # one C-level format for the whole table
                with open(path, "w") as f:
                    f.write((line * len(table)) % tuple(itertools.chain.from_iterable(table)))
                commands.append(eb.Input(_SPAN, relation, path))
            self.egraph.run_program(*commands)
        self.egraph.run_program(*self.egraph.parse_program("(run-schedule (run load_vec) (run load))"))

    def push(self) -> None:
        """Save the e-graph's state (egglog ``push``); :meth:`pop` returns to it."""
        self.egraph.run_program(eb.Push(1))
        self._depth[0] += 1
        self.version += 1

    def pop(self) -> None:
        """Return to the state of the last :meth:`push` (egglog ``pop``), forgetting that snapshot.

        Raises:
            RuntimeError: without a matching :meth:`push`.
        """
        if self._depth[0] <= 1:
            raise RuntimeError("EGraph.pop without a matching push")
        self.egraph.run_program(eb.Pop(_SPAN, 1))
        self._depth[0] -= 1
        self.version += 1

    def size(self) -> int:
        """Number of term e-nodes (rows of the term constructors)."""
        (out,) = self.egraph.run_program(eb.PrintSize(_SPAN, None))
        return sum(n for name, n in out.sizes if name in CONSTRUCTORS)

    def run(self, schedule, result: SearchResult) -> bool:
        """Run one egglog schedule (a :class:`optimus_eq.schedule.Schedule`, or its text); add rule matches to
        ``result``; True if the e-graph changed."""
        outputs = self.egraph.run_program(*self.egraph.parse_program(f"(run-schedule {schedule})"))
        changed = False
        for out in outputs:
            report = getattr(out, "report", None)
            if report is None:
                continue
            changed |= bool(report.updated)
            for name, n in report.num_matches_per_rule.items():
                result.rule_matches[name] += n
        if changed:
            self.version += 1
        return changed

    def past_deadline(self) -> bool:
        """Whether :attr:`deadline` is set and has passed."""
        return self.deadline is not None and time.perf_counter() > self.deadline

    def saturate(self, schedule, limits: Limits, result: SearchResult,
                 after: Callable[["EGraph", SearchResult], bool] | None = None) -> SearchResult:
        """Repeat ``schedule`` until nothing changes or a limit is hit (``limits``, or :attr:`deadline`); sets
        the stop reason. ``after(egraph, result)``, when given, runs after each pass of ``schedule`` (before
        ``result.iterations`` counts it) and returns whether it changed the e-graph too."""
        start = time.perf_counter()
        while True:
            if result.iterations >= limits.iterations:
                result.stop_reason = ITERATION_LIMIT
                break
            if time.perf_counter() - start > limits.seconds or self.past_deadline():
                result.stop_reason = TIME_LIMIT
                break
            changed = self.run(schedule, result)
            if after is not None:
                changed |= after(self, result)
            result.iterations += 1
            if not changed:
                result.stop_reason = SATURATED
                break
            if self.size() > limits.nodes:
                result.stop_reason = NODE_LIMIT
                break
        return result

    def serialize(self) -> dict:
        """The e-graph as egglog's JSON serialization (``nodes``: id -> op, children, eclass, subsumed)."""
        return json.loads(self.egraph.serialize([]).to_json())
