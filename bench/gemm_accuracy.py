"""Rounding error of linears sharing one input: separate GEMMs (eager) against one wide GEMM over the
concatenated weights (``batch_linear_lhs``) and a bmm over stacked weights, each against float64.

Why (issue 16): on the H200 the DLRM-style model's cross net (4 expert and 4 gate linears on one
``[B, 32960]`` input) lost accuracy after batching; cuBLAS chooses its kernel (and whether it splits the
reduction over K) per shape, so a rewrite that only widens N can lengthen each output's summation chain.

Prints, per (K, member widths), ``max|y - y64| / max|y64|`` for: separate (eager), wide, bmm (equal-width
members only), and the ratio wide/separate; and the median ms of each form on the device.

    PYTHONPATH=src:bridge:bench python bench/gemm_accuracy.py --device cuda
"""
from __future__ import annotations

import argparse
import json

import torch


def _err(y: torch.Tensor, y64: torch.Tensor) -> float:
    return float((y.double() - y64).abs().max() / y64.abs().max())


def _ms(fn, iters: int = 20) -> float:
    if not torch.cuda.is_available():
        return float("nan")
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        s.record(); fn(); e.record(); torch.cuda.synchronize(); times.append(s.elapsed_time(e))
    return sorted(times)[len(times) // 2]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--ks", default="256,1024,4096,8192,16384,32960")
    p.add_argument("--out", default=None, help="JSON file for the rows")
    args = p.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator(device="cpu").manual_seed(0)
    groups = {"4x64": [64] * 4, "4x64+4x1": [64] * 4 + [1] * 4, "4x1": [1] * 4, "3x768": [768] * 3}
    rows = []
    print(f"{'K':>6} {'members':>10} {'sep err':>10} {'wide err':>10} {'bmm err':>10} {'wide/sep':>9} "
          f"{'sep ms':>8} {'wide ms':>8} {'bmm ms':>8}")
    for k in (int(v) for v in args.ks.split(",")):
        x = torch.randn(args.batch, k, generator=g).to(args.device)
        for gname, ns in groups.items():
            ws = [(torch.randn(n, k, generator=g) / k ** 0.5).to(args.device) for n in ns]
            x64 = x.double()
            y64 = [x64 @ w.double().t() for w in ws]
            sep = [torch.nn.functional.linear(x, w) for w in ws]
            wcat = torch.cat(ws, 0)
            wide = torch.nn.functional.linear(x, wcat).split(ns, dim=1)
            e_sep = max(_err(a, b) for a, b in zip(sep, y64))
            e_wide = max(_err(a, b) for a, b in zip(wide, y64))
            e_bmm, t_bmm = float("nan"), float("nan")
            if len(set(ns)) == 1:
                wst = torch.stack(ws)                                    # [n, N, K]
                bmm = torch.bmm(x.expand(len(ns), *x.shape), wst.transpose(1, 2)).unbind(0)
                e_bmm = max(_err(a, b) for a, b in zip(bmm, y64))
                t_bmm = _ms(lambda: torch.bmm(x.expand(len(ns), *x.shape), wst.transpose(1, 2)))
            t_sep = _ms(lambda: [torch.nn.functional.linear(x, w) for w in ws])
            t_wide = _ms(lambda: torch.nn.functional.linear(x, wcat))
            row = dict(k=k, members=gname, sep=e_sep, wide=e_wide, bmm=e_bmm, ratio=e_wide / e_sep,
                       sep_ms=t_sep, wide_ms=t_wide, bmm_ms=t_bmm)
            rows.append(row)
            print(f"{k:>6} {gname:>10} {e_sep:>10.2e} {e_wide:>10.2e} {e_bmm:>10.2e} {e_wide / e_sep:>9.2f} "
                  f"{t_sep:>8.3f} {t_wide:>8.3f} {t_bmm:>8.3f}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
                       "torch": torch.__version__, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
