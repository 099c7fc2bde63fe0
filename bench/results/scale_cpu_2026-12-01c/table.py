"""Tables of this directory's README from bench/scale.py's JSON records (``python table.py run_small.json
run_50k.json [--before OLD.json ...]``): eqsat against greedy per graph (CPU seconds of the optimizing process),
eqsat's phases and extraction, and with ``--before`` the CPU seconds of an earlier run next to these."""

from __future__ import annotations

import json
import sys

PHASES = ("translate", "search", "horizontal", "extract", "lower")


def f(v, nd=2):
    return "-" if v is None else f"{v:.{nd}f}" if isinstance(v, float) else str(v)


def before_table(recs: list[dict], old: list[dict]) -> None:
    """CPU seconds (total, search, horizontal, extract) per graph and strategy: the earlier run -> this one."""
    prev = {(str(r["size"]), r["strategy"]): r for r in old}
    print("| graph | strategy | cpu s before -> now | search | horizontal | extract | plan cost before / now (us) |")
    print("|---|---|---|---|---|---|---|")
    for r in recs:
        o = prev.get((str(r["size"]), r["strategy"]))
        if not o or "cpu_times" not in r or "cpu_times" not in o:
            continue
        t, u = o["cpu_times"], r["cpu_times"]
        print(f"| {r['size']} | {r['strategy']} | {f(o.get('cpu_s'))} -> {f(r.get('cpu_s'))} | "
              + " | ".join(f"{f(t.get(k))} -> {f(u.get(k))}" for k in ("search", "horizontal", "extract"))
              + f" | {f(o.get('cost_after'))} / {f(r.get('cost_after'))} |")
    print()


def main(paths: list[str]) -> None:
    old_paths = []
    if "--before" in paths:
        k = paths.index("--before")
        paths, old_paths = paths[:k], paths[k + 1:]
    recs = [r for p in paths for r in json.load(open(p))["records"]]
    if old_paths:
        before_table(recs, [r for p in old_paths for r in json.load(open(p))["records"]])
    by = {(str(r["size"]), r["strategy"]): r for r in recs}
    graphs = list(dict.fromkeys(str(r["size"]) for r in recs))
    print("| graph | FX nodes | greedy cpu s | eqsat cpu s | eqsat / greedy | greedy wall s | eqsat wall s | "
          "cost greedy / eqsat (us) | FX nodes out greedy / eqsat | allclose |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---|---|")
    for g in graphs:
        a, b = by.get((g, "greedy"), {}), by.get((g, "eqsat"), {})
        ratio = b["cpu_s"] / a["cpu_s"] if a.get("cpu_s") and b.get("cpu_s") else None
        print(f"| {g} | {a.get('nodes_in') or b.get('nodes_in')} | {f(a.get('cpu_s'))} | {f(b.get('cpu_s'))} | "
              f"{f(ratio)} | {f(a.get('wall_s'))} | {f(b.get('wall_s'))} | {f(a.get('cost_after'))} / "
              f"{f(b.get('cost_after'))} | {f(a.get('nodes_out'))} / {f(b.get('nodes_out'))} | "
              f"{f(a.get('allclose'))} / {f(b.get('allclose'))} |" + (f" {a.get('error') or b.get('error')}" if a.get('error') or b.get('error') else ""))
    print()
    print("| graph | strategy | cpu s: " + " / ".join(PHASES) + " | e-nodes | e-classes | choice classes | "
          "components (largest) | exact (optimal) | bound-closed | gap | tree / fast / final cost (us) | "
          "extraction stages cpu s |")
    print("|---|---|---|---:|---:|---:|---|---|---:|---|---|---|")
    for g in graphs:
        for s in ("greedy", "eqsat"):
            r = by.get((g, s))
            if not r or "cpu_times" not in r:
                continue
            t, x = r["cpu_times"], r.get("extraction") or {}
            gap = "-"
            if x.get("over_limit"):
                fg = x.get("fast_max_gap")
                gap = ("fast plan <= " + (f"{100 * fg:.2g}%" if fg != float("inf") else "? (cyclic)")
                       + f" over bound on {len(x['over_limit'])} over limit")
            elif x.get("exact_max_gap"):
                gap = f"{100 * x['exact_max_gap']:.2g}%"
            elif "components" in x:
                gap = "0 (all proven)"
            st = x.get("stage_s") or {}
            print(f"| {g} | {s} | " + " / ".join(f(t.get(p)) for p in PHASES) +
                  f" | {f(r.get('egraph_nodes'))} | {f(r.get('egraph_classes'))} | {f(x.get('choice_classes'))} | "
                  + (f"{x['components']} ({x['largest_component']})" if "components" in x else "-") + " | "
                  + (f"{x.get('exact_components', 0)} ({x.get('exact_optimal', 0)})" if "components" in x else "-")
                  + f" | {f(x.get('bound_closed'))} | {gap} | "
                  + " / ".join(f(x.get(k)) for k in ("tree_cost", "fast_cost", "cost")) + " | "
                  + ", ".join(f"{k} {v:.2f}" for k, v in st.items()) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
