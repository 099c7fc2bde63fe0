"""table.py RUN.jsonl...: the base / new pairs of pairs.sh as a markdown table (CPU s of each side, new / base,
per-phase CPU s, plan cost, FX nodes out, whether the lowered graphs hash the same)."""
import json, sys

rows, pending, load = [], {}, {}
for path in sys.argv[1:]:
    for line in open(path):
        if line.startswith("#"):
            parts = line.split()
            load = parts[3]
            continue
        label, rec = line.split(" ", 1)
        rec = json.loads(rec)
        side, strategy = label.split("_", 1)
        key = (rec["spec"], strategy)
        pending.setdefault(key, {})[side] = rec
        pending[key]["load"] = load
        if "base" in pending[key] and "new" in pending[key]:
            rows.append((key, pending.pop(key)))


def ph(r):
    p = r["phases"]
    return " / ".join(f"{p.get(k, 0):.2f}" for k in ("translate", "search", "horizontal", "extract", "lower"))


print("| graph | strategy | load | base cpu s | new cpu s | new / base | base: translate / search / horizontal (part of search) / extract / lower "
      "| new: the same | plan cost base / new (us) | FX nodes out | lowered graph same |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for (spec, strategy), d in rows:
    b, n = d["base"], d["new"]
    print(f"| {spec} | {strategy} | {d['load']} | {b['cpu']:.2f} | {n['cpu']:.2f} | {n['cpu'] / b['cpu']:.2f} | {ph(b)} | {ph(n)} "
          f"| {b['cost']:.2f} / {n['cost']:.2f} | {b['nodes']} / {n['nodes']} | {b['hash'] == n['hash']} |")
