"""Markdown table of sweep.sh output (lines ``LABEL {json}``, ``#`` lines skipped): per case, greedy against eqsat (the
pair run together), eqsat before -> after (the other pair), plan costs and whether base and new lowered the same graph."""
import json
import sys

cases: dict = {}
order: list = []
for path in sys.argv[1:]:
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        label, text = line.split(" ", 1)
        rec = json.loads(text)
        if rec["spec"] not in cases:
            order.append(rec["spec"])
        cases.setdefault(rec["spec"], {})[label] = rec

rows = ["| graph | FX nodes out (greedy / eqsat) | greedy cpu s | eqsat cpu s | eqsat / greedy | eqsat base -> new cpu s "
        "(same pair) | eqsat new: search (horizontal) / extract / lower | plan cost greedy / eqsat base / eqsat new (us) "
        "| base, new lowered graph same |", "|---|---|---|---|---|---|---|---|---|"]
for spec in order:
    r = cases[spec]
    g, e2, b, n = r.get("greedy"), r.get("new_eqsat2"), r.get("base_eqsat"), r.get("new_eqsat")
    if not (g and e2):
        rows.append(f"| {spec} | incomplete: {sorted(r)} |")
        continue
    p = e2["phases"]
    ab = f"{b['cpu']:.2f} -> {n['cpu']:.2f}" if b and n else "not run"
    costs = f"{b['cost']:.2f} / {n['cost']:.2f}" if b and n else f"- / {e2['cost']:.2f}"
    same = b["hash"] == n["hash"] == e2["hash"] if b and n else "-"
    rows.append(
        f"| {spec} | {g['nodes']} / {e2['nodes']} | {g['cpu']:.2f} | {e2['cpu']:.2f} | {e2['cpu'] / g['cpu']:.2f} | "
        f"{ab} | {p['search']:.2f} ({p['horizontal']:.2f}) / {p['extract']:.2f} / "
        f"{p['lower']:.2f} | {g['cost']:.2f} / {costs} | {same} |")
print("\n".join(rows))
