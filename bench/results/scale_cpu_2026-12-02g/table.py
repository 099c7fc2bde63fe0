"""Markdown table of pair.sh output (``LABEL {json}`` lines, greedy and eqsat run together; ``# SPEC load ...`` lines give
the load before each pair): per case both strategies' CPU s, eqsat/greedy, eqsat's phases, plan costs, how eqsat's plan
was found, and whether each strategy lowered the same graph (structural hash) as the reference run.

    python table.py run.jsonl ../scale_cpu_2026-12-02f/run.jsonl
"""
import json
import sys


def read(path):
    cases, loads, order = {}, {}, []
    for line in open(path):
        if line.startswith("#"):
            parts = line.split()
            loads[parts[1]] = parts[3]
            continue
        if not line.strip() or " " not in line:
            continue
        label, text = line.split(" ", 1)
        try:
            rec = json.loads(text)
        except json.JSONDecodeError:
            continue
        if rec["spec"] not in cases:
            order.append(rec["spec"])
        cases.setdefault(rec["spec"], {})[label] = rec
    return cases, loads, order


new, loads, order = read(sys.argv[1])
ref = read(sys.argv[2])[0] if len(sys.argv) > 2 else {}
rows = ["| graph | load | greedy cpu s | eqsat cpu s | eqsat / greedy | eqsat: search (horizontal) / extract / lower | "
        "plan cost greedy / eqsat (us) | same plans as 12-02f (greedy, eqsat) | eqsat's extraction |",
        "|---|---|---:|---:|---:|---|---|---|---|"]
for spec in order:
    g, e = new[spec].get("greedy"), new[spec].get("eqsat")
    if not (g and e):
        rows.append(f"| {spec} | incomplete: {sorted(new[spec])} |")
        continue
    p = e["phases"]
    r = ref.get(spec, {})
    same = ", ".join("yes" if r.get(k, {}).get("hash") == x["hash"] else "NO" if r.get(k) else "-"
                     for k, x in (("greedy", g), ("eqsat", e)))
    note = e["note"].split("; ", 1)[-1] if e["note"] else ""
    rows.append(f"| {spec} | {loads.get(spec, '?')} | {g['cpu']:.2f} | **{e['cpu']:.2f}** | {e['cpu'] / g['cpu']:.2f} | "
                f"{p['search']:.2f} ({p['horizontal']:.2f}) / {p['extract']:.2f} / {p['lower']:.2f} | "
                f"{g['cost']:.2f} / {e['cost']:.2f} | {same} | {note} |")
print("\n".join(rows))
