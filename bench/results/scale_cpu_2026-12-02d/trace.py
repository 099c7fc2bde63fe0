"""usage: trace.py family:size eqsat -> CPU s per function (reads, extractions, costing, inserts), per egglog schedule part (the analyses, each pattern ruleset), per analyses run (CPU s, iterations, e-nodes) and the frozen tables at each read. Instrumentation for issue 9; not a benchmark (it splits the eqsat schedule into one run per part)."""
import sys, time, warnings, functools, collections, json
warnings.filterwarnings("ignore")
import torch, optimus_eq
from optimus_eq.egraph import Limits, EGraph
from synthetic import make_rec_graph
import scale
import optimus_eq.extract.view as V, optimus_eq.extract.tree as T, optimus_eq.extract.refine as R
import optimus_eq.extract.driver as D, optimus_eq.extract.fusion as F, optimus_eq.extract.plan as P
import optimus_eq.horizontal.driver as HD
spec, strategy = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
fam, n = spec.split(":")
gm, inputs, meta = scale.family_graph(fam, int(n))
small, si = make_rec_graph(num_fields=8, layers=8)
optimus_eq.optimize(small, si, strategy=strategy)
import scipy.sparse, scipy.optimize._highspy._core
acc = collections.defaultdict(float); cnt = collections.Counter()
def wrap(mod, name, label=None):
    f = getattr(mod, name); label = label or f"{mod.__name__.split('.')[-1]}.{name}"
    @functools.wraps(f)
    def g(*a, **k):
        c = time.process_time()
        try: return f(*a, **k)
        finally: acc[label] += time.process_time() - c; cnt[label] += 1
    setattr(mod, name, g)
V.EGraphView._from_frozen = classmethod(lambda cls, *a, _f=V.EGraphView._from_frozen.__func__, **k: _f(cls, *a, **k))
for mod, name in [(V.EGraphView, "assign_costs"), (D, "extract"), (HD, "plan_of"), (HD, "fuse_round")]:
    wrap(mod, name)
for name in dir(T):
    if callable(getattr(T, name)) and getattr(getattr(T, name), "__module__", "") == T.__name__: wrap(T, name)
for mod in (R, F, P, D):
    for name in dir(mod):
        o = getattr(mod, name)
        if callable(o) and getattr(o, "__module__", "") == mod.__name__ and not isinstance(o, type) and name not in ("extract",): wrap(mod, name)
orig_ff = V.EGraphView._from_frozen.__func__
frz = []
def _probe(g):
    c = time.process_time(); f = g.freeze().functions; d = time.process_time() - c
    rows = {k: len(v.rows) for k, v in f.items() if len(v.rows) > 1000}
    co = f["CatOffset"].rows; Ls = set(r.inputs[0] for r in co)
    frz.append((round(d, 3), sum(rows.values()), sorted(rows.items(), key=lambda x: -x[1])[:30], "CatOffset", len(co), "distinct L", len(Ls)))
def ff(cls, *a, **k):
    _probe(getattr(a[0], 'egraph', a[0]))
    c = time.process_time()
    try: return orig_ff(cls, *a, **k)
    finally: acc["view.read"] += time.process_time() - c; cnt["view.read"] += 1
V.EGraphView._from_frozen = classmethod(ff)
rs = collections.defaultdict(float); rules = collections.defaultdict(float)
orig_run = EGraph.run
def run(self, schedule, result):
    import re
    text = str(schedule)
    from optimus_eq.schedule import ANALYSES as _A
    parts = ([_A.text] + re.findall(r"\(run p_[^)]*\)", text)) if text.startswith("(seq") else [text]
    outputs = []
    for part in parts:
        c = time.process_time()
        outputs += self.egraph.run_program(*self.egraph.parse_program(f"(run-schedule {part})"))
        d = time.process_time() - c
        if part == _A.text:
            its = sum(len(getattr(getattr(o, "report", None), "iterations", []) or []) for o in outputs[-1:])
            seq.append((round(d, 3), its, self.size()))
        acc["egglog.run"] += d; rs[part] += d
    changed = False
    for out in outputs:
        report = getattr(out, "report", None)
        if report is None: continue
        changed |= bool(report.updated)
        for name, n in report.num_matches_per_rule.items(): result.rule_matches[name] += n
        for d, tag in ((report.search_and_apply_time_per_ruleset, "sa"), (report.merge_time_per_ruleset, "merge"), (report.rebuild_time_per_ruleset, "rebuild")):
            for k, v in d.items(): rs[f"{tag}:{k}"] += v.total_seconds()
        for it in report.iterations:
            rules["<rebuild>"] += it.rebuild_time.total_seconds()
            rules["<merge>"] += it.rule_set_report.merge_time.total_seconds()
            for rn, lst in it.rule_set_report.rule_reports.items():
                for rr in lst: rules[rn] += rr.search_and_apply_time.total_seconds()
    if changed: self.version += 1
    return changed
EGraph.run = run
seq = []
wrap(EGraph, "insert", "egraph.insert")
_orp = None; wrap(EGraph, "size", "egraph.size")
_oi = EGraph.__init__
def _ni(self, *a, **k):
    _oi(self, *a, **k)
    from egglog import bindings as eb
    self.egraph.set_report_level(eb.TimeOnly())
EGraph.__init__ = _ni
import optimus_eq.egraph as EGM
_oin = EGraph.insert
def _ins(self, rows):
    og = self.egraph
    class P:
        def __init__(s, g): s.g = g
        def __getattr__(s, k): return getattr(s.g, k)
        def run_program(s, *cmds):
            c = time.process_time(); r = s.g.run_program(*cmds); acc["insert.run_program %d" % len(cmds)] += time.process_time() - c; return r
    self.egraph = P(og)
    try: return _oin(self, rows)
    finally: self.egraph = og
EGraph.insert = _ins
c0 = time.process_time()
gm2, rep = optimus_eq.optimize(gm, inputs, strategy=strategy, limits=Limits(seconds=600))
print("cpu", round(time.process_time() - c0, 2), {k: round(v, 2) for k, v in rep.cpu_times.items()}, rep.cost_after, len(gm2.graph.nodes), rep.egraph_nodes)
for k, v in sorted(acc.items(), key=lambda x: -x[1])[:30]: print(f"  {k:40s} {v:7.2f} {cnt[k]}")
print("rulesets (cpu):", rep.extraction.get("stage_s"))
for k, v in sorted(rs.items(), key=lambda x: -x[1])[:15]: print(f"  {k:50s} {v:7.2f}")
print("analysis runs (cpu, iterations, size):", seq)
print("rules:")
for k, v in sorted(rules.items(), key=lambda x: -x[1])[:25]: print(f"  {v:7.2f} {k[:150]!r}")

for x in frz: print('freeze', x)
