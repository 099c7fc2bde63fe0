"""The post-grad (Aten-IR) pass end to end: outputs, gradients, kernels and time per training step.

A model with the split/cat junk that survives into the Aten-IR graphs (split -> per-field pointwise ->
cat, unbind -> stack, split -> view -> cat, and their backward: cats of slices, slice_scatters) is
compiled four ways: plain Inductor, optimus_eq before AOTAutograd only (``pre_grad``), only as the
post-grad custom pass (``post_grad``), and both. For each: max error against eager (outputs and input
gradients), kernels per forward+backward step (:func:`optimus_eq.kernels.count_kernels`, as the bench
counts them: on CPU the generated C++ kernels and extern calls of the compiled graphs plus the eager ops
of the loss and autograd), and the median time of a step.

    python bench/post_grad.py [--device cuda] [--fields 64] [--dim 32] [--batch 4096] [--strategy eqsat]
    python bench/post_grad.py --counts [--fields 64] [--dim 32]     # no compile: graph sizes only

Prints one markdown table row per configuration. Time is only meaningful on an otherwise idle device.
``--counts`` runs the post-grad pass on the forward and backward Aten-IR graphs of AOTAutograd (with
Inductor's decompositions, no Inductor) and prints, per strategy and graph, FX nodes and split/cat junk
nodes (split, unbind, getitem, cat, slice, select) before and after, and the optimizer's time.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import optimus_eq
from optimus_eq.kernels import count_kernels


class FieldModel(torch.nn.Module):
    """x: [B, N*D], y: [B, N, D] -> ([B, N*D], [B, N, D], [B, N, D])."""

    def __init__(self, n: int, d: int) -> None:
        super().__init__()
        self.n, self.d = n, d
        self.scale = torch.nn.Parameter(torch.linspace(0.5, 1.5, n * d))

    def forward(self, x, y):
        pieces = torch.split(x * self.scale, self.d, 1)
        a = torch.cat([torch.tanh(p) for p in pieces], 1)
        b = torch.stack(torch.unbind(y, 1), 1).sigmoid()
        c = torch.cat([p.reshape(-1, 1, self.d) for p in pieces], 1) * 2
        return a, b, c


def _step(model, x, y):
    out = model(x, y)
    loss = sum((o.float() ** 2).mean() for o in out)
    grads = torch.autograd.grad(loss, [x, y, *model.parameters()])
    return out, grads


def run(args) -> None:
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    # a cache hit would replay a compiled graph without running the passes (and their counters)
    inductor_config.fx_graph_cache = False
    functorch_config.enable_autograd_cache = False
    torch.manual_seed(0)
    dev = args.device
    if dev == "cpu":
        inductor_config.cpp.enable_kernel_profile = True  # makes generated C++ kernels visible to the profiler
    model = FieldModel(args.fields, args.dim).to(dev)
    x = torch.randn(args.batch, args.fields * args.dim, device=dev, requires_grad=True)
    y = torch.randn(args.batch, args.fields, args.dim, device=dev, requires_grad=True)
    ref_out, ref_grads = _step(model, x, y)
    configs = {
        "inductor": "inductor",
        "pre_grad": optimus_eq.backend(strategy=args.strategy),
        "post_grad": optimus_eq.backend(strategy=args.strategy, pre_grad=False, post_grad=True),
        "both": optimus_eq.backend(strategy=args.strategy, post_grad=True),
    }
    print(f"torch {torch.__version__}, device {dev}, fields {args.fields}, dim {args.dim}, batch {args.batch}, "
          f"strategy {args.strategy}")
    print("| config | max abs err (out, grad) | kernels per step | median step (ms) | post-grad graphs | fallbacks |")
    print("|---|---|---|---|---|---|")
    from torch._dynamo.utils import counters

    for name, be in configs.items():
        torch._dynamo.reset()
        counters.clear()
        compiled = torch.compile(model, backend=be)
        out, grads = _step(compiled, x, y)  # compiles forward and backward
        err_o = max((a.float() - b.float()).abs().max().item() for a, b in zip(out, ref_out))
        err_g = max((a.float() - b.float()).abs().max().item() for a, b in zip(grads, ref_grads))
        kernels = count_kernels(lambda: _step(compiled, x, y), dev)["kernels"]
        times = []
        for _ in range(args.reps):
            if dev == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            _step(compiled, x, y)
            if dev == "cuda":
                torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        print(f"| {name} | {err_o:.2e}, {err_g:.2e} | {kernels} | {statistics.median(times):.3f} | "
              f"{counters['optimus_eq']['post_grad_graphs']} | {counters['optimus_eq']['fallback']} |")


JUNK = ("split", "chunk", "unbind", "getitem", "cat", "stack", "slice", "select")


def counts(args) -> None:
    from torch._functorch.aot_autograd import aot_module, make_boxed_func
    from torch._inductor.decomposition import select_decomp_table

    model = FieldModel(args.fields, args.dim)
    x = torch.randn(8, args.fields * args.dim, requires_grad=True)
    y = torch.randn(8, args.fields, args.dim, requires_grad=True)
    print(f"torch {torch.__version__}, fields {args.fields}, dim {args.dim} (Aten-IR graphs of AOTAutograd)")
    print("| strategy | graph | FX nodes | junk nodes | optimizer (s) |")
    print("|---|---|---|---|---|")
    for strategy in ("greedy", "eqsat"):
        pg = optimus_eq.post_grad_pass(strategy)
        reports = []

        def compiler(gm, example_inputs):
            pg(gm.graph)
            reports.append(optimus_eq.last_reports[-1])
            return make_boxed_func(gm)

        fn = aot_module(model, fw_compiler=compiler, bw_compiler=compiler, decompositions=select_decomp_table())
        out = fn(x, y)
        sum(o.sum() for o in out).backward()
        for which, r in zip(("forward", "backward"), reports):
            jb = sum(r.ops_before.get(k, 0) for k in JUNK)
            ja = sum(r.ops_after.get(k, 0) for k in JUNK)
            print(f"| {strategy} | {which} | {r.nodes_before} -> {r.nodes_after} | {jb} -> {ja} | "
                  f"{r.times['total']:.2f} |" + (f" FELL BACK: {r.fallback}" if r.fallback else ""))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--fields", type=int, default=64)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--strategy", default="eqsat", choices=["eqsat", "greedy"])
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--counts", action="store_true", help="graph sizes only, no compile")
    args = p.parse_args()
    counts(args) if args.counts else run(args)


if __name__ == "__main__":
    main()
