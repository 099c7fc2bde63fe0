"""Check the built-in Optimus pre-grad passes for a wrong result on the launch-bound model (issue 12).

On the H200 (2026-12-02, bench/results/h200_2026-12-02d) ``inductor-optimus`` gave outputs off by a relative L2
error of 0.32 at 512 branches. This script runs only ``torch._inductor.fx_passes.pre_grad.pre_grad_passes`` with
every ``pre_grad_fusion_options`` the installed torch registers (:func:`optimus_eq.options.optimus_fusion_options`)
on the model's Dynamo graph, executes the rewritten graph eagerly (no Inductor, CPU is enough) and prints its
relative L2 error against eager; with ``--each``, also with one option at a time, to name the pass.

Usage: ``PYTHONPATH=src:bridge:bench python bench/builtin_pregrad_check.py --branches 512 [--each] [--bisect]``

``--bisect`` narrows the options to a 1-minimal failing set by delta debugging (Zeller and Hildebrandt, "Simplifying
and Isolating Failure-Inducing Input", IEEE TSE 2002: ddmin over the option names, removing one subset or its
complement at a time): every option in the printed set is needed for the wrong result.
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


def minimal_failing(names: list[str], fails) -> list[str]:
    """ddmin: a subset of ``names`` for which ``fails(subset)`` holds and from which no single name can be
    removed with it still holding (1-minimal). ``fails(names)`` must hold. Cost: O(n^2) calls at worst,
    about ``2 k log n`` for k needed names."""
    n = 2
    while len(names) >= 2:
        chunk = max(1, len(names) // n)
        parts = [names[i:i + chunk] for i in range(0, len(names), chunk)]
        for part in parts:
            if fails(part):
                names, n = part, 2
                break
        else:
            for part in parts:
                rest = [x for x in names if x not in part]
                if len(parts) > 2 and fails(rest):
                    names, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(names):
                    break
                n = min(len(names), 2 * n)
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--branches", type=int, default=512)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--each", action="store_true", help="also one option at a time")
    ap.add_argument("--bisect", action="store_true", help="narrow to a 1-minimal failing set of options")
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
    if args.bisect:
        def fails(names: list[str]) -> bool:
            err = relative_error(model, case.inputs, {k: pre[k] for k in names})
            print(f"  {len(names)} options {sorted(names)}: relative L2 {err:.3g}", flush=True)
            return err > 1e-3

        print(f"1-minimal failing set: {sorted(minimal_failing(sorted(pre), fails))}", flush=True)


if __name__ == "__main__":
    main()
