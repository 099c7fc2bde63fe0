"""What the command line prints (:mod:`optimus_eq.cli`): the metric-by-strategy tables of ``optimus-eq demo``
and ``optimus-eq optimize``, the demo's per-strategy details, and the graph code files of ``optimize --out``.

Plain text from plain results; imports nothing heavy (``optimus-eq --help`` stays fast).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def _fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    return format(value, spec)


# (row label, how to read it from a run_demo result)
_ROWS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("FX nodes before", lambda r: _fmt(r.get("nodes_before"))),
    ("FX nodes after", lambda r: _fmt(r.get("nodes_after"))),
    ("split/cat/stack/unbind before", lambda r: _fmt(r.get("junk_before"))),
    ("split/cat/stack/unbind after", lambda r: _fmt(r.get("junk_after"))),
    ("kernels per iteration", lambda r: _fmt(r.get("kernels"))),
    ("ms per iteration (median)", lambda r: _fmt(r.get("ms"), ".3f")),
    ("ms per iteration (fastest)", lambda r: _fmt(r.get("ms_min"), ".3f")),
    ("compile s (first call)", lambda r: _fmt(r.get("compile_s"), ".1f")),
    ("optimizer s", lambda r: _fmt(r.get("optimize_s"), ".2f")),
    ("optimizer fell back", lambda r: "n/a" if r.get("graphs", 0) == 0 else
        ("YES" if r.get("fallback") else "no")),
    ("max |out - eager|", lambda r: _fmt(r.get("max_abs_diff"), ".1e")),
    ("outputs equal eager", lambda r: _fmt(r.get("outputs_match"))),
]

#: the note under the demo's table: what a kernel per iteration counts, per device
KERNEL_NOTE = {
    "cpu": "kernels per iteration (cpu): calls one iteration's compiled graph makes, counted with "
    "torch.profiler: Inductor's generated C++ kernels plus extern ATen ops (addmm); allocations "
    "and views not counted.",
    "cuda": "kernels per iteration (cuda): GPU activities (kernels, memcpy, memset) of one iteration, "
    "counted with torch.profiler.",
}


def _aligned(rows: list[list[str]]) -> str:
    """``rows`` (the header first) as text columns: the first left-aligned, the others right-aligned, a rule of
    dashes under the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for j, row in enumerate(rows):
        lines.append("  ".join([row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_table(results: Sequence[dict[str, Any]]) -> str:
    """A metric-by-strategy table of `run_demo` results."""
    header = ["metric"] + [r["strategy"] for r in results]
    rows = [header] + [[label] + [get(r) for r in results] for label, get in _ROWS]
    return _aligned(rows)


def demo_details(r: dict[str, Any], verbose: bool = False) -> list[str]:
    """The lines under the demo's table for one strategy's result (errors, fallback, patterns, e-graph size);
    empty when there is nothing to say."""
    out = [f"{r['strategy']}:"]
    if r.get("error"):
        out.append(f"  error: {r['error']}")
    if r.get("mismatch"):
        out.append("  outputs differ from eager: " + r["mismatch"].replace("\n", "\n    "))
    if r.get("fallback"):
        out.append(f"  fallback: {r['fallback']}")
    fired = r.get("patterns_fired") or {}
    if fired:
        out.append("  patterns (rewrites in the plan): " + ", ".join(f"{k} x{v}" for k, v in sorted(fired.items())))
    if r["strategy"] == "eqsat" and r.get("graphs"):
        out.append(
            f"  e-graph: {r.get('egraph_nodes')} e-nodes, {r.get('egraph_classes')} e-classes, "
            f"{r.get('iterations')} iterations, stop reason: {r.get('stop_reason') or 'n/a'}"
        )
    if r.get("graphs", 0) == 0 and not r.get("error"):
        out.append("  (the backend left no report: optimus_eq.last_reports was empty)")
    elif r.get("graphs", 0) > 1:
        out.append(f"  {r['graphs']} graphs compiled (graph breaks); numbers are summed over them")
    if verbose and r.get("summary"):
        out.append("  " + r["summary"].replace("\n", "\n  "))
    return out if len(out) > 1 else []


# (row label, how to read it from (StrategyRun, its totals)); the first column is the input graph
_OPT_ROWS: list[tuple[str, Callable[[Any, dict[str, Any]], str], Callable[[dict[str, Any]], str]]] = [
    ("graphs captured", lambda r, t: _fmt(t["graphs"]), lambda t: _fmt(t["graphs"])),
    ("FX nodes", lambda r, t: _fmt(t["nodes_after"]), lambda t: _fmt(t["nodes_before"])),
    ("split/cat junk nodes", lambda r, t: _fmt(t["junk_after"]), lambda t: _fmt(t["junk_before"])),
    ("input ops kept as written", lambda r, t: _fmt(t["fates"].get("kept", 0)), lambda t: ""),
    ("input ops rewritten", lambda r, t: _fmt(t["fates"].get("rewritten", 0)), lambda t: ""),
    ("input ops removed", lambda r, t: _fmt(t["fates"].get("removed", 0)), lambda t: ""),
    ("ops left opaque", lambda r, t: _fmt(t["left_opaque"]), lambda t: ""),
    ("rewrites in the plan", lambda r, t: _fmt(sum(t["patterns_fired"].values())), lambda t: ""),
    ("rule matches (egglog)", lambda r, t: _fmt(sum(t["rule_matches"].values())), lambda t: ""),
    ("plan cost (us, cost model)", lambda r, t: _fmt(t["cost_after"], ".1f"), lambda t: _fmt(t["cost_before"], ".1f")),
    ("optimizer s", lambda r, t: _fmt(t["optimize_s"], ".2f"), lambda t: ""),
    ("compile s (no Inductor)", lambda r, t: _fmt(r.compile_s, ".2f"), lambda t: ""),
    ("kernels per call (Inductor)", lambda r, t: _fmt(r.kernels), lambda t: ""),
    ("max |out - eager|", lambda r, t: _fmt(r.max_abs_diff, ".1e"), lambda t: ""),
    ("outputs equal eager", lambda r, t: "ERROR" if r.error else _fmt(r.outputs_match), lambda t: ""),
]


def format_optimize_table(runs: Sequence[Any], baseline_kernels: int | None = None) -> str:
    """A metric-by-strategy table of :class:`optimus_eq.modelrun.StrategyRun` results, the input graph first."""
    totals = [r.totals() for r in runs]
    base = next((t for t in totals if t["graphs"] and t["cost_before"] is not None), totals[0] if totals else None)
    header = ["metric", "input"] + [r.strategy for r in runs]
    rows = [header]
    for label, get, get_input in _OPT_ROWS:
        first = get_input(base) if base else ""
        if label.startswith("kernels"):
            if baseline_kernels is None and all(r.kernels is None for r in runs):
                continue
            first = _fmt(baseline_kernels)
        rows.append([label, first or "-"] + [get(r, t) for r, t in zip(runs, totals)])
    return _aligned(rows)


def graph_code(run, which: str) -> str:
    """The Python code of every graph of a StrategyRun (``which``: ``"before"`` or ``"after"``), with the
    reports as comments."""
    parts = []
    for g in run.graphs:
        gm = getattr(g, which)
        head = f"# {g.name} ({run.level}), " + ("as captured" if which == "before" else f"strategy {run.strategy}")
        if which == "after":
            head += "\n" + "\n".join("# " + line for line in g.report.summary().splitlines())
        parts.append(f"{head}\n{gm.code.strip()}\n")
    return "\n\n".join(parts) or "# no graph was captured\n"

