"""Markdown table of pair.sh lines ``base_eqsat {json}`` / ``new_eqsat {json}`` (``#`` lines skipped): per case, eqsat
before -> after in one pair of processes (same load), whole call and extract phase (CPU s), plan costs, lowered graph
hashes."""
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
print("| graph | eqsat base -> new cpu s | new / base | extract phase base -> new cpu s | plan cost base / new (us) "
      "| lowered graph same |")
print("|---|---|---|---|---|---|")
for spec in order:
    r = cases[spec]
    b, n = r.get("base_eqsat"), r.get("new_eqsat")
    if not (b and n):
        print(f"| {spec} | incomplete: {sorted(r)} |")
        continue
    print(f"| {spec} | {b['cpu']:.2f} -> {n['cpu']:.2f} | {n['cpu'] / b['cpu']:.2f} | {b['phases']['extract']:.2f} -> "
          f"{n['phases']['extract']:.2f} | {b['cost']:.2f} / {n['cost']:.2f} | {b['hash'] == n['hash']} |")
