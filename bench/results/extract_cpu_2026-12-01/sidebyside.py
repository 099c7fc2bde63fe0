"""Before/after in one run: for each case, base greedy, base eqsat, new greedy, new eqsat, alternating."""
import json, subprocess, sys, os, time
ROOTS = {"before": "/tmp/ex/base", "after": "/work/wt-extract"}
MARK = "@@SCALE_RESULT@@"
cases = sys.argv[1].split(",")
reps = sys.argv[2]
out = sys.argv[3]
recs = []
for case in cases:
    for tree in os.environ.get("TREES", "before,after").split(","):
        for strat in ("greedy", "eqsat"):
            root = ROOTS[tree]
            env = dict(os.environ, PYTHONPATH=f"{root}/src:{root}/bridge:{root}/bench")
            cmd = ["/work/main/.venv/bin/python", f"{root}/bench/scale.py", "--one", case, strat, "--repeats", reps]
            t0 = time.perf_counter()
            try:
                cp = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, env=env, cwd=root)
                rec = None
                for line in cp.stdout.splitlines():
                    if line.startswith(MARK):
                        rec = json.loads(line[len(MARK):])
                if rec is None:
                    rec = dict(size=case, strategy=strat, error=(cp.stderr or "")[-400:])
            except subprocess.TimeoutExpired:
                rec = dict(size=case, strategy=strat, error="timeout")
            rec["tree"] = tree
            recs.append(rec)
            t = rec.get("times", {})
            print(f"{case:>7} {tree:6} {strat:6} wall={rec.get('wall_s', 0):.2f} cpu={rec.get('cpu_s', 0):.2f} ex={t.get('extract', 0):.2f} "
                  f"cost={rec.get('cost_after')} {rec.get('extractor')} allclose={rec.get('allclose')} {rec.get('error', '')}", flush=True)
            json.dump(recs, open(out, "w"), indent=1)
