"""usage: dump.py family:size PREFIX -> PREFIX.N.pkl, the inputs of each extraction of one eqsat optimize (view, roots, forced, model, options); replay_extract.py PREFIX.N.pkl [prof] re-runs one (deadline dropped) and prints its CPU s, cost, a hash of the choice and its stages."""
import sys, time, warnings, pickle
warnings.filterwarnings("ignore")
sys.setrecursionlimit(100000)
import torch, optimus_eq
from optimus_eq.egraph import Limits
import optimus_eq.extract.driver as D
import scale
spec, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
fam, n = spec.split(":")
gm, inputs, meta = scale.family_graph(fam, int(n))
orig = D._extract
k = [0]
def hook(view, roots, forced, model, *a):
    k[0] += 1
    with open(f"{out}.{k[0]}.pkl", "wb") as f:
        pickle.dump((view, roots, forced, model, a), f, protocol=5)
    return orig(view, roots, forced, model, *a)
D._extract = hook
gm2, rep = optimus_eq.optimize(gm, inputs, strategy="eqsat", limits=Limits(seconds=600))
print(rep.cost_after)
