import sys, time, pickle, cProfile, pstats, hashlib
sys.setrecursionlimit(100000)
import optimus_eq.extract.driver as D
from optimus_eq.extract.view import no_gc
path = sys.argv[1]
view, roots, forced, model, a = pickle.load(open(path, "rb")); a = a[:-1] + (None,)
prof = len(sys.argv) > 2 and sys.argv[2] == "prof"
import gc; gc.disable()
if prof:
    pr = cProfile.Profile(time.process_time); pr.enable()
c = time.process_time()
ex = D._extract(view, roots, forced, model, *a)
d = time.process_time() - c
if prof:
    pr.disable(); pstats.Stats(pr).sort_stats("tottime").print_stats(25)
h = hashlib.sha1(repr(sorted(ex.choice.items())).encode()).hexdigest()[:12]
print("cpu", round(d, 3), "cost", ex.dag_cost, "choice", h, {k: round(v, 3) for k, v in ex.stats["stage_s"].items()})
