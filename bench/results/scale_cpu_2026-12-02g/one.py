"""usage: one.py family:size|graph strategy repeats (graph: a named graph of bench/scale.py --graphs: tangle, dhen, launch) -> one JSON line: CPU s per repeat, the best repeat's Report.cpu_times,
plan cost, FX nodes out and a hash of the lowered graph's structure (each node's op, target and arguments, nodes named
by their own structural hash; placeholders by name), so two trees' plans compare without node names.
Warm-up on a ~200-node graph first (eqsat: and HiGHS imported, as bench/scale.py's warm-up does); Limits(seconds=600) as
bench/scale.py --seconds 600."""
import sys, time, json, hashlib, warnings
warnings.filterwarnings("ignore")
import torch, optimus_eq
from optimus_eq.egraph import Limits
from synthetic import make_rec_graph
import scale
spec, strategy, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.manual_seed(0)
if ":" in spec:
    fam, n = spec.split(":")
    gm, inputs, meta = scale.family_graph(fam, int(n))
else:
    gm, inputs, meta = scale.named_graph(spec)
small, si = make_rec_graph(num_fields=8, layers=8)
optimus_eq.optimize(small, si, strategy=strategy)
if strategy == "eqsat":  # HiGHS and scipy.sparse, imported by the first exact solve (the small graph may need none)
    import scipy.sparse, scipy.optimize._highspy._core  # noqa: E401,F401
best = None; cpus = []
for _ in range(reps):
    c0 = time.process_time()
    gm2, rep = optimus_eq.optimize(gm, inputs, strategy=strategy, limits=Limits(seconds=600))
    c = time.process_time() - c0; cpus.append(round(c, 3))
    if best is None or c < best[0]: best = (c, gm2, rep)
c, gm2, rep = best
sh = {}
def _s(a):
    if isinstance(a, torch.fx.Node): return sh[a]
    if isinstance(a, (list, tuple)): return "[" + ",".join(_s(b) for b in a) + "]"
    if isinstance(a, dict): return "{" + ",".join(f"{k}:{_s(v)}" for k, v in sorted(a.items())) + "}"
    return repr(a) if not callable(a) else getattr(a, "__qualname__", str(a))
for x in gm2.graph.nodes:
    sh[x] = hashlib.sha1(f"{x.op} {x.name if x.op == 'placeholder' else x.target if isinstance(x.target, str) else getattr(x.target, '__qualname__', getattr(x.target, '__name__', x.target))} {_s(x.args)} {_s(x.kwargs)}".encode()).hexdigest()[:16]
h = hashlib.sha1(" ".join(sorted(sh.values())).encode()).hexdigest()[:12]
import os
if os.environ.get("DUMP"):
    open(os.environ["DUMP"], "w").write("\n".join(f"{x.op} {x.target} {x.name} {x.args}" for x in gm2.graph.nodes))
print("@@" + json.dumps(dict(spec=spec, strategy=strategy, cpu=round(c, 3), cpus=cpus,
      phases={k: round(v, 3) for k, v in rep.cpu_times.items()}, cost=rep.cost_after, cost_before=rep.cost_before,
      nodes=len(gm2.graph.nodes), hash=h, stop=rep.stop_reason, limits=list(rep.limits), enodes=rep.egraph_nodes, note=rep.extract_note, stages={k: round(v, 3) for k, v in (rep.extraction or {}).get("stage_s", {}).items()})))
