"""Ratio table of this folder's first_call.py JSON files: per cell and tree, the median second-call seconds of
eqsat and greedy, their ratio, eqsat's median extract phase, and whether every run of every tree made the same
plans (digests). ``python table.py dlrm.json dhen_lb.json``."""

import json
import statistics
import sys


def main(paths):
    rows = []
    for path in paths:
        rows += json.load(open(path))["rows"]
    cells: dict = {}
    for r in rows:
        if "error" in r:
            print("error:", r["model"], r["mode"], r["strategy"], r.get("tree"), r["error"][-300:])
            continue
        cells.setdefault((r["model"], r["mode"]), {}).setdefault((r["tree"], r["strategy"]), []).append(r)
    print("| cell | tree | eqsat 2nd call s | greedy 2nd call s | eqsat/greedy | eqsat extract s | eqsat plan = base |")
    print("|---|---|---:|---:|---:|---:|---|")
    for (model, mode), by in cells.items():
        ref = "base" if ("base", "eqsat") in by else "new"
        base = {json.dumps(r["second_plan"]) for r in by.get((ref, "eqsat"), [])}
        for tree in ("base", "new", "cyc0", "c2000"):
            e, g = by.get((tree, "eqsat"), []), by.get((tree, "greedy"), [])
            if not e or not g:
                continue
            me = statistics.median(r["second_s"] for r in e)
            mg = statistics.median(r["second_s"] for r in g)
            ext = statistics.median(r["second_phases"].get("extract", 0.0) for r in e)
            same = {json.dumps(r["second_plan"]) for r in e} == base and len(base) == 1
            print(f"| {model} {mode} | {tree} | {me:.3f} | {mg:.3f} | {me / mg:.2f} | {ext:.3f} | "
                  f"{'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main(sys.argv[1:])
