"""Markdown table of ab.sh output lines (``base {json}`` / ``new {json}``, pairs in order; ``#`` lines skipped)."""
import json
import sys

rows = ["| graph | strategy | cpu s base -> new | search (horizontal) base -> new | extract | lower | plan cost base / new (us) "
        "| FX nodes out | lowered graph same |", "|---|---|---|---|---|---|---|---|---|"]
pend = {}
for path in sys.argv[1:]:
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        side, text = line.split(" ", 1)
        rec = json.loads(text)
        pend[side] = rec
        if side != "new" or "base" not in pend:
            continue
        b, n = pend.pop("base"), pend.pop("new")
        pb, pn = b["phases"], n["phases"]
        rows.append(
            f"| {b['spec']} | {b['strategy']} | {b['cpu']:.2f} -> {n['cpu']:.2f} | "
            f"{pb['search']:.2f} ({pb['horizontal']:.2f}) -> {pn['search']:.2f} ({pn['horizontal']:.2f}) | "
            f"{pb['extract']:.2f} -> {pn['extract']:.2f} | {pb['lower']:.2f} -> {pn['lower']:.2f} | "
            f"{b['cost']:.2f} / {n['cost']:.2f} | {b['nodes']} / {n['nodes']} | {b['hash'] == n['hash']} |")
print("\n".join(rows))
