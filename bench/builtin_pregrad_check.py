"""Check the built-in Optimus pre-grad passes for a wrong result on the launch-bound model (issue 12).

On the H200 (2026-12-02, bench/results/h200_2026-12-02d) ``inductor-optimus`` gave outputs off by a relative L2
error of 0.32 at 512 branches. This script runs only ``torch._inductor.fx_passes.pre_grad.pre_grad_passes`` with
every ``pre_grad_fusion_options`` the installed torch registers (:func:`optimus_eq.options.optimus_fusion_options`)
on the model's Dynamo graph, executes the rewritten graph eagerly (no Inductor, CPU is enough) and prints its
relative L2 error against eager; with ``--each``, also with one option at a time, to name the pass.

Usage: ``PYTHONPATH=src:bridge:bench python bench/builtin_pregrad_check.py --branches 512 [--each]``
"""

from __future__ import annotations

import argparse
import warnings

import torch
import torch._inductor.config as inductor_config
from torch._inductor.fx_passes.pre_grad import pre_grad_passes

from optimus_bench.models import build
from optimus_eq.options import optimus_fusion_options


def relative_error(model, inputs, options: dict) -> float:
    """``|f(x) - m(x)| / |m(x)|`` (L2) where f is ``model``'s Dynamo graph after the built-in pre-grad passes
    with ``options`` (a ``pre_grad_fusion_options`` dict), run eagerly."""
    def backend(gm, example_inputs):
        with inductor_config.patch(pre_grad_fusion_options=options):
            return pre_grad_passes(gm, example_inputs).forward

    torch._dynamo.reset()
    with torch.no_grad():
        want = model(*inputs)
        got = torch.compile(model, backend=backend)(*inputs)
    return float((got - want).norm() / want.norm())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--branches", type=int, default=512)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--each", action="store_true", help="also one option at a time")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    case = build("launch_bound", "gpu", overrides={"branches": args.branches, "batch": args.batch})
    model = case.model.eval()
    pre, _ = optimus_fusion_options()
    print(f"torch {torch.__version__}, launch_bound {args.branches} branches, batch {args.batch}")
    print(f"all {len(pre)} pre-grad options: relative L2 {relative_error(model, case.inputs, pre):.3g}", flush=True)
    if args.each:
        for name in sorted(pre):
            print(f"{name}: relative L2 {relative_error(model, case.inputs, {name: pre[name]}):.3g}", flush=True)


if __name__ == "__main__":
    main()
