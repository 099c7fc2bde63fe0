"""bench/coldstart_cpu.py's bookkeeping: the timers count the outermost call once (a recursive compile_fx is
not counted twice), and the summary takes medians per (tree, model, mode, strategy) and leaves failed runs out."""

from __future__ import annotations

import coldstart_cpu


def test_timed_counts_the_outermost_call_once():
    acc: dict = {}

    def f(k):
        return k if k == 0 else wrapped(k - 1)

    wrapped = coldstart_cpu._timed(acc, "f_s", f)
    assert wrapped(3) == 0
    assert set(acc) == {"f_s", "f_s_cpu"} and acc["f_s"] >= 0.0
    first = acc["f_s"]
    wrapped(0)
    assert acc["f_s"] >= first  # a second outer call adds up


def test_summary_medians_and_errors():
    rows = [{"tree": "a", "model": "m", "mode": "inference", "strategy": "eqsat", "first_s": v, "first_cpu_s": v}
            for v in (1.0, 3.0, 2.0)]
    rows.append({"tree": "a", "model": "m", "mode": "inference", "strategy": "eqsat", "error": "boom"})
    rows.append({"tree": "b", "model": "m", "mode": "inference", "strategy": "eqsat", "first_s": 5.0})
    out = {s["tree"]: s for s in coldstart_cpu.summarize(rows)}
    assert out["a"]["first_s"] == 2.0 and out["a"]["runs"] == 3 and out["a"]["errors"] == 1
    assert out["b"]["first_s"] == 5.0 and "first_cpu_s" not in out["b"]
    table = coldstart_cpu.markdown(list(out.values()))
    assert table.count("| m | inference | eqsat |") == 2 and "2.000" in table
