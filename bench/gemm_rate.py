"""GEMM rates of the bench models' linears under CUDA graphs: separate vs batched, forward and backward, and the
fit of the cost model's GEMM constants (docs/DESIGN.md "Cost model").

What it times (fp32, tf32 off), each op replayed ``--reps`` times inside one CUDA graph (per-op GPU time, the
in-graph launch included, as the CUDA-graph cost model counts it):

* the linears of DLRM, DHEN and launch_bound at the ``gpu`` presets (found by forward hooks on one eager
  forward), grouped as the horizontal rewrites group them: linears reading one input (a wide GEMM over the
  concatenated weights) and equal-shaped linears of one parent module (a ``bmm`` over stacked weights, in
  both of the batched linear's forms: ``Y^T = W @ X^T`` as training builds it and ``Y = X @ W^T``);
  separate, wide and bmm, forward (``linear`` / ``addmm`` / ``bmm``) and backward (the GEMMs of
  derivatives.yaml: ``dX = dY @ W``, ``dW = dY^T @ X``, and their bmm forms), plus the stack of the
  members' inputs that a bmm form needs;
* a sweep of single GEMMs ``[M, K] @ [K, N]`` (M 4096; N and K 1..4096) for the fit, and of weight-gradient
  shapes (small outputs over a long K: ``[64, 4096] @ [4096, 64]`` ...) as mm and bmm of 2 to 32.

Then it fits ``GPUCostModel``'s GEMM constants (``cost.GEMM_FIELDS``; ``gemm_fit.fit``: grid search, least squares
of log time, the per-kernel in-graph cost measured by a 1x1x1 GEMM subtracted; ``at_bound`` names constants at an
edge of the grid)
and writes ``DIR/gemm_rate.json``: ``{"device", "torch", "gemm": {fit}, "rows": [...], "groups": [...]}``.
Load it with ``GPUCostModel.with_gemm_rate("DIR/gemm_rate.json")`` (or merge its ``gemm`` into an
``optimus-eq calibrate`` record: ``GPUCostModel.from_calibration`` reads it there). It also prints, per group,
measured separate vs batched against the default and the fitted model's prediction.

    PYTHONPATH=/tmp/site:$PWD/src:$PWD/bridge:$PWD/bench python3 bench/gemm_rate.py --out DIR

Fit again on CPU from saved records, several together (``gemm_fit.refit``; prints each model's ranking of
separate vs batched forms per group against the measured one):

    PYTHONPATH=src:bridge:bench python bench/gemm_rate.py --refit DIR/gemm_rate.json OLD/gemm_accuracy.json \
        --out FIT.json

About a minute of GPU time on an H200 (``--quick``: the sweep and DLRM only). ``--device cpu`` runs the same
code without CUDA graphs (wall-clock timing; a smoke test, not a calibration).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from gemm_fit import call, fit, predict, refit
from optimus_eq.cost import GEMM_FIELDS, GPUCostModel

MODELS = ("dlrm", "dhen", "launch_bound")


def timer(device: str, reps: int, replays: int):
    """``time(fn) -> us`` per call of ``fn`` (a closure of one op): replayed in a CUDA graph of ``reps`` calls
    on CUDA, wall clock on the CPU."""
    def time_cuda(fn):
        side = torch.cuda.Stream()  # warm-up on a side stream before capture (torch.cuda.graph's recipe)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(reps):
                fn()
        for _ in range(2):
            g.replay()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(replays):
            g.replay()
        e.record()
        torch.cuda.synchronize()
        del g
        return s.elapsed_time(e) * 1e3 / (replays * reps)

    def time_cpu(fn):
        fn()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) * 1e6 / reps

    return time_cuda if device.startswith("cuda") else time_cpu


def find_linears(model: str, device: str, size: str) -> list[dict]:
    """Every ``nn.Linear`` call of one eager forward of a bench model: name, parent module, input shape (2-D:
    leading dims folded), weight shape, bias, and the input tensor's identity."""
    from optimus_bench.models import build

    case = build(model, size, device=device)
    found = []
    hooks = []
    keep = []  # the inputs stay alive, so an id is never reused by a later tensor
    for name, mod in case.model.named_modules():
        if isinstance(mod, torch.nn.Linear):
            def hook(m, args, out, name=name):
                x = args[0]
                keep.append(x)
                found.append({"model": model, "name": name, "parent": name.rsplit(".", 1)[0] if "." in name else "",
                              "rows": x.numel() // x.shape[-1], "inner": x.shape[-1], "cols": m.out_features,
                              "bias": m.bias is not None, "input": id(x)})
            hooks.append(mod.register_forward_hook(hook))
    with torch.no_grad():
        case.model.eval()(*case.inputs)
    for h in hooks:
        h.remove()
    keep.clear()
    del case
    return found


def groups_of(linears: list[dict]) -> list[dict]:
    """The groups the horizontal rewrites would form: ``lhs`` (>= 2 linears on one input) and ``bmm``
    (>= 2 equal-shaped linears of one parent module on different inputs)."""
    out = []
    by_input: dict = {}
    for li in linears:
        by_input.setdefault((li["model"], li["input"]), []).append(li)
    for members in by_input.values():
        if len(members) >= 2 and len({m["bias"] for m in members}) == 1:
            out.append({"kind": "lhs", "members": members})
    by_shape: dict = {}
    for li in linears:
        by_shape.setdefault((li["model"], li["parent"], li["rows"], li["inner"], li["cols"], li["bias"]), []).append(li)
    for members in by_shape.values():
        if len(members) >= 2 and len({m["input"] for m in members}) == len(members):
            out.append({"kind": "bmm", "members": members})
    return out


def time_group(grp: dict, t, device: str) -> list[dict]:
    """Rows (form, phase, us, GEMM calls) of one group: separate, and wide (lhs) or bmm in both forms."""
    ms = grp["members"]
    M, K, bias = ms[0]["rows"], ms[0]["inner"], ms[0]["bias"]
    Ns = [m["cols"] for m in ms]
    n = len(ms)
    opts = dict(device=device, dtype=torch.float32)
    shared = grp["kind"] == "lhs"
    xs = [torch.randn(M, K, **opts)] * n if shared else [torch.randn(M, K, **opts) for _ in ms]
    ws = [torch.randn(N, K, **opts) for N in Ns]
    bs = [torch.randn(N, **opts) if bias else None for N in Ns]
    dys = [torch.randn(M, N, **opts) for N in Ns]
    rows = []

    def add(form, phase, fn, calls, extra_kernels=0):
        rows.append({"form": form, "phase": phase, "us": t(fn), "calls": calls, "other_kernels": extra_kernels})

    add("separate", "forward", lambda: [F.linear(x, w, b) for x, w, b in zip(xs, ws, bs)],
        [call(1, M, N, K) for N in Ns])
    add("separate", "backward", lambda: [(dy @ w, dy.t() @ x) for x, w, dy in zip(xs, ws, dys)],
        [c for N in Ns for c in (call(1, M, K, N), call(1, N, K, M))])
    if shared:
        wc = torch.cat(ws)
        bc = torch.cat(bs) if bias else None
        dyc = torch.cat(dys, 1)
        x = xs[0]
        add("wide", "forward", lambda: F.linear(x, wc, bc), [call(1, M, sum(Ns), K)])
        add("wide", "backward", lambda: (dyc @ wc, dyc.t() @ x), [call(1, M, K, sum(Ns)), call(1, sum(Ns), K, M)])
    else:
        N = Ns[0]
        wst, xst = torch.stack(ws), torch.stack(xs)                  # [n, N, K], [n, M, K]
        xt = xst.permute(0, 2, 1)                                    # [n, K, M]
        dyt = torch.randn(n, N, M, **opts)                           # dY^T, as Y^T = W @ X^T gives it
        dy = torch.randn(n, M, N, **opts)
        add("stack_inputs", "forward", lambda: torch.stack(xs), [], 1)
        add("bmm_WXt", "forward", lambda: torch.bmm(wst, xt), [call(n, N, M, K, True)])
        add("bmm_WXt", "backward", lambda: (torch.bmm(dyt, xst), torch.bmm(wst.permute(0, 2, 1), dyt)),
            [call(n, N, K, M, True), call(n, K, M, N, True)])
        add("bmm_XWt", "forward", lambda: torch.bmm(xst, wst.permute(0, 2, 1)), [call(n, M, N, K, True)])
        add("bmm_XWt", "backward", lambda: (torch.bmm(dy, wst), torch.bmm(dy.permute(0, 2, 1), xst)),
            [call(n, M, K, N, True), call(n, N, K, M, True)])
    return rows


def sweep(t, device: str, quick: bool) -> list[dict]:
    """Single GEMMs ``[4096, K] @ [K, N]`` (N, K in 1..4096) and bmm of 4 of them; weight-gradient shapes
    ``[R, K] @ [K, N]`` (R, N 32..415, K 2048..8192) and bmm of 2 to 32 of them."""
    rows = []
    M = 4096
    ns = (1, 4, 64, 256, 415, 1024) if not quick else (4, 64, 415)
    ks = (16, 64, 256, 415, 1024, 4096) if not quick else (64, 415)
    opts = dict(device=device, dtype=torch.float32)
    for N, K in itertools.product(ns, ks):
        a, b = torch.randn(M, K, **opts), torch.randn(K, N, **opts)
        rows.append({"form": "mm", "phase": "sweep", "us": t(lambda: a @ b), "calls": [call(1, M, N, K)],
                     "other_kernels": 0})
        if N >= 4:
            a4, b4 = torch.randn(4, M, K, **opts), torch.randn(4, K, N, **opts)
            rows.append({"form": "bmm", "phase": "sweep", "us": t(lambda: torch.bmm(a4, b4)),
                         "calls": [call(4, M, N, K, True)], "other_kernels": 0})
    # weight-gradient shapes: few output tiles over a long K, where cuBLAS splits K of an mm but not of a bmm
    # (cost.GPUCostModel's bmm_tile / bmm_half_tiles)
    wgrads = ((64, 64, 4096), (32, 32, 2048), (64, 64, 2048), (415, 64, 4096), (128, 128, 8192))
    for R, N, K in (wgrads if not quick else wgrads[:1]):
        a, b = torch.randn(R, K, **opts), torch.randn(K, N, **opts)
        rows.append({"form": "mm", "phase": "sweep_wgrad", "us": t(lambda: a @ b), "calls": [call(1, R, N, K)],
                     "other_kernels": 0})
        for n in (2, 4, 8, 32) if not quick else (4,):
            an, bn = torch.randn(n, R, K, **opts), torch.randn(n, K, N, **opts)
            rows.append({"form": "bmm", "phase": "sweep_wgrad", "us": t(lambda: torch.bmm(an, bn)),
                         "calls": [call(n, R, N, K, True)], "other_kernels": 0})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="directory for gemm_rate.json (with --refit: the JSON file to write)")
    ap.add_argument("--refit", nargs="+", metavar="FILE",
                    help="measure nothing: fit again to saved gemm_rate.json / gemm_accuracy.json records together "
                         "and print the decisions table (gemm_fit.refit)")
    ap.add_argument("--eager-launch-us", type=float, default=20.0, help="--refit: per-call eager overhead of "
                    "gemm_accuracy.json rows")
    ap.add_argument("--min-us", type=float, default=100.0, help="--refit: gemm_accuracy.json rows of at least this")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--size", default="gpu")
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--reps", type=int, default=10, help="op calls per CUDA graph")
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="a smaller sweep, DLRM only")
    a = ap.parse_args(argv)
    if a.refit:
        refit(a.refit, a.out, a.eager_launch_us, a.min_us)
        return 0
    if not a.out:
        ap.error("--out is required (or --refit)")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    t = timer(a.device, a.reps, a.replays)
    t_start = time.time()
    one = torch.ones(1, 1, device=a.device)
    launch = t(lambda: one @ one)  # a GEMM with no work: the in-graph cost of one kernel
    print(f"in-graph cost of an empty GEMM: {launch:.2f} us", flush=True)
    rows = sweep(t, a.device, a.quick)
    groups = []
    for model in (a.models if not a.quick else ["dlrm"]):
        linears = find_linears(model, a.device, a.size)
        for gi, grp in enumerate(groups_of(linears)):
            ms = grp["members"]
            desc = {"model": model, "kind": grp["kind"], "members": len(ms), "names": [m["name"] for m in ms],
                    "rows": ms[0]["rows"], "inner": ms[0]["inner"], "cols": [m["cols"] for m in ms],
                    "bias": ms[0]["bias"]}
            try:
                grows = time_group(grp, t, a.device)
            except Exception as exc:  # noqa: BLE001 - one failing group is reported, the rest goes on
                desc["error"] = f"{type(exc).__name__}: {exc}"
                print(f"group {len(groups)} ({model} {grp['kind']}): {desc['error']}", flush=True)
                grows = []
            for r in grows:
                r["group"] = len(groups)
            rows.extend(grows)
            groups.append(desc)
        if a.device.startswith("cuda"):
            torch.cuda.empty_cache()
    default = GPUCostModel.cudagraph()
    fitted = fit(rows, launch, default)
    model_fit = dataclasses.replace(default, **{k: fitted[k] for k in GEMM_FIELDS})
    for r in rows:
        r["predicted_default"] = predict(default, r, launch)
        r["predicted_fit"] = predict(model_fit, r, launch)
    print(f"fit: {json.dumps(fitted)}")
    print(f"{'group':>5} {'model':>12} {'kind':>4} {'n':>2} {'M':>6} {'K':>5} {'N':>14} {'form':>12} {'phase':>8} "
          f"{'us':>8} {'default':>8} {'fit':>8}")
    for r in rows:
        if "group" not in r:
            continue
        g = groups[r["group"]]
        print(f"{r['group']:>5} {g['model']:>12} {g['kind']:>4} {g['members']:>2} {g['rows']:>6} {g['inner']:>5} "
              f"{str(sorted(set(g['cols']))):>14} {r['form']:>12} {r['phase']:>8} {r['us']:8.1f} "
              f"{r['predicted_default']:8.1f} {r['predicted_fit']:8.1f}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    record = {"device": torch.cuda.get_device_name() if a.device.startswith("cuda") else "cpu",
              "torch": torch.__version__, "tf32": False, "reps": a.reps, "replays": a.replays,
              "seconds": round(time.time() - t_start, 1), "gemm": fitted, "groups": groups, "rows": rows}
    (out / "gemm_rate.json").write_text(json.dumps(record, indent=1))
    print(f"wrote {out / 'gemm_rate.json'} ({record['seconds']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
