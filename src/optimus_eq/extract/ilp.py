"""The DAG-aware 0-1 ILP over independent components of the pruned problem (HiGHS, the solver inside
scipy), with hub rows (reach variables to a feedback set of classes) ruling out the cycles of every cyclic
strongly connected component, and lazy class-cycle cuts (see the package docstring).

Every solve is warm-started from a plan (the driver's fast plan), and a solve that stops at its time
limit still returns HiGHS's incumbent with its optimality gap: the caller keeps whichever plan is cheaper.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from optimus_eq.extract.cycles import MAX_HUBS, feedback_classes, hub_rows, hub_values, order_rows, order_values
from optimus_eq.extract.prune import _components, _Prepared
from optimus_eq.extract.tree import _Problem

ORDER_AFTER = 0  # every cyclic SCC gets its hub rows in the first solve (see _hub_rows)
BATCH = 1500  # e-nodes per milp call (independent components solved together)
FRACTIONAL = "lp relaxation fractional"  # solve(lp_only=True): the batch needs the MIP


@dataclass
class Solved:
    """One exact solve of a batch of components.

    Attributes:
        pick: class -> chosen e-node for the batch's non-fixed classes the plan uses.
        cost: the plan's cost on those classes (microseconds; tie-break terms excluded).
        optimal: HiGHS proved it optimal (LP relaxation integral, or the MIP closed its gap).
        gap: relative gap between ``cost`` and HiGHS's lower bound (0.0 when optimal).
        rounds: solves run (each after cutting the cycles of the last plan).
    """

    pick: dict
    cost: float
    optimal: bool
    gap: float
    rounds: int


def _plan_cycles(members: list[int], pick: dict[int, int], kids: list) -> list[list[int]]:
    """Every cycle closed by a back edge of one DFS over the chosen e-nodes of ``members`` (classes)."""
    inside = set(members)
    color: dict[int, int] = {}
    cycles = []
    for start in members:
        if start in color:
            continue
        color[start] = 1
        path = [start]
        stack = [iter(kids[pick[start]])]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                color[path.pop()] = 2
                stack.pop()
                continue
            if nxt not in inside:
                continue
            state = color.get(nxt, 0)
            if state == 1:
                cycles.append([pick[c] for c in path[path.index(nxt):]])
            elif state == 0:
                color[nxt] = 1
                path.append(nxt)
                stack.append(iter(kids[pick[nxt]]))
    return cycles


class _ILP:
    """Independent 0-1 ILPs over the pruned problem (see the module docstring)."""

    def __init__(self, p: _Problem, prep: _Prepared) -> None:
        self.p, self.prep = p, prep
        self.order_after = ORDER_AFTER
        fixed, cyclic, scc = prep.fixed, prep.cyclic, prep.scc
        comp, inside = _components(p, np.asarray(prep.valid, dtype=bool), prep.reach, fixed, cyclic, scc)
        members = np.flatnonzero(inside)
        order = members[np.argsort(comp[members], kind="stable")]
        labels = comp[order]
        starts = np.flatnonzero(np.r_[True, labels[1:] != labels[:-1]])
        choice = prep.nvalid[order] > 1
        size = np.where(fixed[order], 0, prep.nvalid[order])
        has_choice = np.logical_or.reduceat(choice, starts) if len(order) else np.zeros(0, bool)
        sizes = np.add.reduceat(size, starts) if len(order) else np.zeros(0, np.int64)
        bounds = np.r_[starts, len(order)]
        self.groups = [(int(sizes[g]), order[bounds[g]:bounds[g + 1]].tolist())
                       for g in np.flatnonzero(has_choice)]
        self.fixed = fixed.tolist()
        self.mandatory = prep.mandatory.tolist()
        self.cyclic = cyclic.tolist()
        self.scc = scc.tolist()

    def solve(self, group: list[int], seconds: float, max_rounds: int,
              start: list[int] | None = None, used: set | None = None,
              lp_only: bool = False) -> tuple[Solved | None, int, str]:
        """Choose an e-node for the classes of ``group`` (several independent components at once).

        ``start`` (class -> e-node, acyclic) and ``used`` (the classes that plan needs) warm-start HiGHS.
        With ``lp_only`` no MIP runs: a fractional LP relaxation gives ``(None, rounds, FRACTIONAL)`` (the
        driver then solves the batch's components one by one: HiGHS's branch and bound on a batch of
        independent components took 5x the sum of their separate solves on DLRM).
        Returns ``(Solved, rounds, "")``, or ``(None, rounds, reason)`` when no acyclic plan came back (time
        limit before any incumbent, cycle rounds exhausted, solver error).
        """
        p, prep, fixed, mandatory = self.p, self.prep, self.fixed, self.mandatory
        vnodes = {c: prep.vnodes(c) for c in group}
        var_nodes = [i for c in group if not fixed[c] for i in vnodes[c]]
        index = {i: k for k, i in enumerate(var_nodes)}
        nx = len(var_nodes)
        cost = np.array([p.cost[i] for i in var_nodes]) + 1e-6  # break ties toward fewer e-nodes
        rows: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        lo: list[float] = []
        r = 0
        for c in group:
            if mandatory[c] and not fixed[c]:  # needed by every plan: cover it
                vn = vnodes[c]
                rows.extend([r] * len(vn))
                cols.extend([index[i] for i in vn])
                vals.extend([1.0] * len(vn))
                lo.append(1.0)
                r += 1
        kids = p.kids
        for k_self, i in enumerate(var_nodes):
            for k in kids[i]:
                if mandatory[k]:
                    continue  # in every plan anyway
                vn = vnodes[k]  # a chosen e-node needs one chosen e-node in each child class
                rows.extend([r] * (len(vn) + 1))
                cols.extend([index[m] for m in vn])
                cols.append(k_self)
                vals.extend([1.0] * len(vn))
                vals.append(-1.0)
                lo.append(0.0)
                r += 1
        hi = [np.inf] * r
        # two e-nodes that need each other's class close a cycle: forbid every such pair up front (the
        # cycles the pruning keeps are mostly of this kind, x = cat([x, <empty>]); cutting them lazily cost
        # a solve each)
        cyclic = self.cyclic
        for i in var_nodes:
            c = p.ncls[i]
            if not cyclic[c]:
                continue
            for k in set(kids[i]):
                if not cyclic[k] or k not in vnodes or fixed[k]:
                    continue
                for j in vnodes[k]:
                    if j > i and c in kids[j]:
                        rows.extend([r, r])
                        cols.extend([index[i], index[j]])
                        vals.extend([1.0, 1.0])
                        lo.append(-np.inf)
                        hi.append(1.0)
                        r += 1
        ordered: set[int] = set()  # SCCs that got hub rows (or topological-order variables)
        tvar: dict[tuple, int] = {}  # (hub, class) or ("t", class) -> column of its reach or order variable
        tub: list[float] = []
        deadline = time.perf_counter() + seconds
        pick: dict[int, int] = {c: vnodes[c][0] for c in group if fixed[c]}

        def order(sccs) -> None:
            nonlocal r
            for s in sccs:
                ordered.add(s)
                members = [c for c in group if self.cyclic[c] and self.scc[c] == s]
                hubs = feedback_classes(members, vnodes, kids)
                if len(hubs) <= MAX_HUBS:
                    for h in hubs:
                        for c in members:
                            if c != h:
                                tvar[(h, c)] = nx + len(tvar)
                                tub.append(1.0)
                    r = hub_rows(kids, members, hubs, vnodes, index, tvar, rows, cols, vals, lo, hi, r)
                else:  # rows per hub: many hubs cost more rows than one order variable per class
                    for c in members:
                        tvar[("t", c)] = nx + len(tvar)
                        tub.append(float(len(members)))
                    r = order_rows(kids, members, vnodes, index, tvar, rows, cols, vals, lo, hi, r)

        if self.order_after == 0:
            order({self.scc[c] for c in group if self.cyclic[c]})
        for rnd in range(1, max_rounds + 1):
            left = deadline - time.perf_counter()
            if left <= 0:
                return None, rnd - 1, "ilp time limit"
            x0 = None
            if start is not None and used is not None:
                x0 = np.zeros(nx + len(tvar))
                for c in group:
                    if not fixed[c] and c in used:
                        x0[index[start[c]]] = 1.0
                if tvar:
                    for col, v in (*hub_values(p.kids, tvar, start, used).items(),
                                   *order_values(p.kids, tvar, start, used).items()):
                        x0[col] = v
            res = _milp(np.concatenate([cost, np.zeros(len(tvar))]), rows, cols, vals, lo, hi, nx,
                        np.concatenate([np.ones(nx), tub]), left, x0, lp_only, relax_first=lp_only or not tvar)
            if isinstance(res, str):
                return None, rnd, res
            x, optimal, gap = res
            chosen: dict[int, int] = {}
            for k in np.flatnonzero(x[:nx] > 0.5).tolist():
                i = var_nodes[k]
                c = p.ncls[i]
                cur = chosen.get(c)
                if cur is None or p.cost[i] < p.cost[cur]:
                    chosen[c] = i
            for c in group:
                if not fixed[c]:
                    if c in chosen:
                        pick[c] = chosen[c]
                    else:
                        pick.pop(c, None)
            members = [c for c in group if c in pick]
            cycles = _plan_cycles(members, pick, kids)
            if not cycles:
                got = {c: pick[c] for c in members if not fixed[c]}
                return Solved(got, sum(p.cost[i] for i in got.values()), optimal, gap, rnd), rnd, ""
            if not optimal:  # an incumbent at the time limit that cycles: no time left to cut and solve again
                return None, rnd, "ilp time limit (cyclic incumbent)"
            for cyc in cycles:  # forbid every cycle of this plan, and every plan through the same classes
                free, bound = self._cycle_cut(cyc, vnodes, index)
                if bound < 0:
                    return None, rnd, "cycle among fixed e-nodes"
                rows.extend([r] * len(free))
                cols.extend(free)
                vals.extend([1.0] * len(free))
                lo.append(-np.inf)
                hi.append(float(bound))
                r += 1
            if rnd >= self.order_after:  # an SCC that keeps cycling gets order variables
                order({self.scc[p.ncls[cyc[0]]] for cyc in cycles} - ordered)
        return None, max_rounds, "ilp cycle rounds exhausted"

    def _cycle_cut(self, cyc: list[int], vnodes: dict, index: dict) -> tuple[list[int], int]:
        """The row forbidding the class cycle of the e-node cycle ``cyc`` (each e-node needs the next one's
        class, the last the first's): classes ``c_1 .. c_m``, at most ``m - 1`` of them may choose an e-node
        that needs the next class. Every acyclic plan with one e-node per class satisfies it, so the optimum
        over such plans is kept; it also forbids the cycles through other e-nodes of those classes (a list
        cell cut once instead of once per e-node sequence). Returns ``(columns, right-hand side)``; the
        right-hand side is negative when fixed e-nodes alone close the cycle."""
        ncls, kids, fixed = self.p.ncls, self.p.kids, self.fixed
        cls = [ncls[i] for i in cyc]
        free: list[int] = []
        bound = len(cyc) - 1
        for k, c in enumerate(cls):
            nxt = cls[(k + 1) % len(cls)]
            if fixed[c]:
                bound -= 1  # its one e-node is always chosen (and needs nxt: it is on the cycle)
                continue
            free.extend(index[i] for i in vnodes[c] if nxt in kids[i])
        return free, bound

def _milp(cost, rows, cols, vals, lo, hi, n_int, ub, seconds, start=None, lp_only=False, relax_first=True):
    """Solve min cost.x, lo <= A x <= hi, 0 <= x <= ub, the first n_int columns binary, from the feasible
    point ``start`` if given. Returns ``(x, optimal, gap)`` (at the time limit: HiGHS's incumbent, its
    relative gap) or a reason (str): ``FRACTIONAL`` when ``lp_only`` and the LP relaxation is not integral.
    ``relax_first=False`` goes to the MIP without solving the LP relaxation on its own first (for problems
    whose relaxation is rarely integral: components with hub rows)."""
    n = len(cost)
    a = _Csc.of(rows, cols, vals, len(lo), n)
    if _highs() is not None:
        try:
            return _highs_direct(cost, a, np.asarray(lo, dtype=float), np.asarray(hi, dtype=float), n_int, ub,
                                 seconds, start, lp_only, relax_first)
        except _HighsUnavailable:
            pass
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csc_matrix

    integrality = np.zeros(n)
    integrality[:n_int] = 1
    matrix = csc_matrix((a.data, a.indices, a.indptr), shape=a.shape)
    res = milp(cost, constraints=LinearConstraint(matrix, lo, hi), integrality=integrality,
               bounds=Bounds(np.zeros(n), ub), options={"time_limit": seconds})
    if res.x is None:
        return f"ilp status {res.status}: {res.message}"
    if res.status != 0:  # a limit, with a feasible incumbent
        return res.x, False, float(getattr(res, "mip_gap", None) or np.inf)
    return res.x, True, 0.0


@dataclass(frozen=True)
class _Csc:
    """A sparse matrix in compressed sparse column form, as HiGHS takes it (``indptr``: each column's start in
    ``indices`` / ``data``, row indices ascending within a column, duplicate entries summed): what
    ``scipy.sparse.csc_matrix((vals, (rows, cols)))`` gives, built with numpy so that an exact solve does not
    import scipy.sparse (0.13 s of a fresh process's first eqsat call;
    bench/results/eqsat_first_call_cpu_2026-12-02)."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    shape: tuple[int, int]

    @classmethod
    def of(cls, rows, cols, vals, m: int, n: int) -> "_Csc":
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        vals = np.asarray(vals, dtype=float)
        key, inverse = np.unique(cols * m + rows, return_inverse=True)  # sorted by column, then row
        data = np.zeros(len(key))
        np.add.at(data, inverse, vals)
        col = key // m if m else key
        indptr = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(np.bincount(col, minlength=n), out=indptr[1:])
        return cls(indptr, (key - col * m).astype(np.int32), data, (m, n))


class _HighsUnavailable(Exception):
    pass


_HIGHS: list = []  # the bindings, loaded on first use (_core_bindings)
_CORE = "scipy.optimize._highspy._core"


def load_solver() -> None:
    """Load HiGHS now (once per process), so that no exact solve's time budget pays for it: DHEN's first solve
    (774 e-nodes, a 0.44 s budget) hit its limit importing, and the fast plan was kept where the solve takes
    0.05 s."""
    _highs()


def _core_bindings():
    """scipy's HiGHS bindings (the extension module ``scipy.optimize._highspy._core``, which
    ``scipy.optimize.milp`` wraps), loaded from its file without running ``scipy.optimize``'s ``__init__``:
    that imports all of scipy.optimize (linprog, scipy.special, scipy.fft, scipy.linalg, docstring parsing),
    0.55 s of a fresh process's first eqsat call on this repository's CPU machine (scipy 1.17), against 0.05 s
    for the extension alone. A later ``import scipy.optimize`` gets the same module (Python keeps one per
    extension file). Imported the usual way when scipy.optimize is loaded already.

    Raises ImportError (or whatever loading raises) when the file is not where scipy 1.x keeps it."""
    import sys

    if "scipy.optimize" in sys.modules:
        import scipy.optimize._highspy._core as core

        return core
    import importlib.machinery
    import importlib.util
    import os

    import scipy

    folder = os.path.join(os.path.dirname(scipy.__file__), "optimize", "_highspy")
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(folder, "_core" + suffix)
        if os.path.exists(path):
            spec = importlib.util.spec_from_file_location(_CORE, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    raise ImportError(f"no {_CORE} extension in {folder}")


def _highs():
    if not _HIGHS:
        try:
            core = _core_bindings()  # the HiGHS that scipy.optimize.milp wraps
            core.HighsLp, core._Highs, core.HighsVarType.kInteger, core.MatrixFormat.kColwise  # noqa: B018
        except Exception:  # another scipy: use the public milp
            core = None
        _HIGHS.append(core)
    return _HIGHS[0]


def _highs_direct(cost, a, lo, hi, n_int, ub, seconds, start=None, lp_only=False, relax_first=True):
    """HiGHS through the bindings scipy ships (what ``milp`` does, minus ~1 ms of Python per call).

    The LP relaxation is solved first: on these problems it is almost always integral (every batch of the
    synthetic benchmarks), and then it is the ILP's optimum, found 4x faster than by the MIP solver. The MIP
    starts from ``start`` (a feasible 0-1 point) and, stopped at its time limit, returns its incumbent.
    """
    h = _highs()
    n = len(cost)
    lp = h.HighsLp()
    lp.num_col_, lp.num_row_ = n, a.shape[0]
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n, a.shape[0]
    lp.a_matrix_.format_ = h.MatrixFormat.kColwise
    lp.col_cost_ = np.asarray(cost, dtype=float)
    lp.col_lower_ = np.zeros(n)
    lp.col_upper_ = np.asarray(ub, dtype=float)
    lp.row_lower_ = lo
    lp.row_upper_ = hi
    lp.a_matrix_.start_ = a.indptr
    lp.a_matrix_.index_ = a.indices
    lp.a_matrix_.value_ = a.data
    deadline = time.perf_counter() + seconds
    for relaxed in ((True, False) if relax_first or lp_only else (False,)):
        if not relaxed:
            lp.integrality_ = [h.HighsVarType.kInteger] * n_int + [h.HighsVarType.kContinuous] * (n - n_int)
        highs = h._Highs()
        try:
            highs.setOptionValue("output_flag", False)
            highs.setOptionValue("time_limit", float(max(deadline - time.perf_counter(), 1e-3)))
            if highs.passModel(lp) == h.HighsStatus.kError:
                raise _HighsUnavailable
            if not relaxed and start is not None:
                sol = h.HighsSolution()
                sol.col_value = np.asarray(start, dtype=float)
                sol.value_valid = True
                highs.setSolution(sol)
            highs.run()
        except _HighsUnavailable:
            raise
        except Exception as exc:  # an API difference: fall back to milp
            raise _HighsUnavailable from exc
        status = highs.getModelStatus()
        if status != h.HighsModelStatus.kOptimal:
            info = highs.getInfo()
            if (not relaxed and info.primal_solution_status == 2  # kSolutionStatusFeasible: an incumbent
                    and status in (h.HighsModelStatus.kTimeLimit, h.HighsModelStatus.kIterationLimit,
                                   h.HighsModelStatus.kInterrupt)):
                x = np.asarray(highs.getSolution().col_value)
                return x, False, float(info.mip_gap)
            return f"ilp status {highs.modelStatusToString(status)}"
        x = np.asarray(highs.getSolution().col_value)
        if not relaxed or np.all(np.abs(x[:n_int] - np.round(x[:n_int])) <= 1e-7):
            return x, True, 0.0
        if lp_only:
            return FRACTIONAL
        if time.perf_counter() >= deadline:
            return "ilp time limit"
    raise AssertionError("unreachable")
