import json, sys
recs = json.load(open(sys.argv[1]))
by = {(r["size"], r["tree"], r["strategy"]): r for r in recs}
cases = list(dict.fromkeys(r["size"] for r in recs))
f = lambda v, n=2: "-" if v is None else (f"{v:.{n}f}" if isinstance(v, float) else str(v))
out = []
out.append("| graph | FX nodes | code | greedy wall s | eqsat wall s | eqsat / greedy (wall) | greedy cpu s | eqsat cpu s | eqsat / greedy (cpu) | eqsat extract s | eqsat phases (translate / search / horizontal / extract / lower) | cost greedy / eqsat (us) | eqsat extractor |")
out.append("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|")
for c in cases:
    for tree in ("before", "after"):
        g, e = by.get((c, tree, "greedy"), {}), by.get((c, tree, "eqsat"), {})
        if not g or not e:
            continue
        t = e.get("times", {})
        ph = " / ".join(f(t.get(k)) for k in ("translate", "search", "horizontal", "extract", "lower"))
        rw = e["wall_s"] / g["wall_s"] if g.get("wall_s") and e.get("wall_s") else None
        rc = e["cpu_s"] / g["cpu_s"] if g.get("cpu_s") and e.get("cpu_s") else None
        note = (e.get("extract_note") or "").replace("|", "/")
        out.append(f"| {c} | {e.get('nodes_in', '-')} | {tree} | {f(g.get('wall_s'))} | {f(e.get('wall_s'))} | {f(rw)} | {f(g.get('cpu_s'))} | {f(e.get('cpu_s'))} | {f(rc)} | {f(t.get('extract'))} | {ph} | {f(g.get('cost_after'))} / {f(e.get('cost_after'))} | {e.get('extractor')}: {note[:160]} |")
out.append("")
out.append("| graph | e-nodes | e-classes | choice classes | components (largest, e-nodes) | exact components (distinct, optimal) | tree / fast / final cost (us) | limits |")
out.append("|---|---:|---:|---:|---|---|---|---|")
for c in cases:
    e = by.get((c, "after", "eqsat"), {})
    x = e.get("extraction") or {}
    if not x:
        continue
    out.append(f"| {c} | {x.get('e_nodes')} | {x.get('e_classes')} | {x.get('choice_classes')} | {x.get('components', 0)} ({x.get('largest_component', 0)}) | "
               f"{x.get('exact_components', 0)} ({x.get('exact_distinct', 0)}, {x.get('exact_optimal', 0)}) | {f(x.get('tree_cost'))} / {f(x.get('fast_cost'))} / {f(x.get('cost'))} | {'; '.join(e.get('limits') or []) or '-'} |")
print("\n".join(out))
