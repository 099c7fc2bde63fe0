"""What the cost model's execution mode and training pricing choose on the bench models (no GPU, no timing).

For each model and mode (inference under ``torch.no_grad``, training step: forward + loss with grad) at a
size preset (default ``gpu``), capture the dynamo graph on CPU and run eqsat with four cost models:
``launch`` / ``cudagraph`` execution x forward-only / training. Prints, per model: the batched ops the plan
keeps (``bmm_add``/``baddbmm``/``bmm``: batch_linear; ``addcmul``: batch_layernorm; stacked pointwise), the plan's
cost and the input graph's cost in that model, and the new model's price of the plan the H200 matrix ran
(eqsat with the old model: launch, forward only), read by capturing that plan's graph again and pricing
it as an input graph.

    PYTHONPATH=src:bridge:bench python bench/cost_modes.py [--models dhen launch_bound] [--size gpu]

Figures: bench/results/LOG.md, "Extraction and cost"; bench/results/cost_modes_cpu_2026-11-30/cost_modes_cpu.md.
"""

from __future__ import annotations

import argparse
import warnings

import torch

import optimus_eq
from optimus_eq.cost import GPUCostModel

MODELS = {
    "launch": GPUCostModel(training=False),
    "launch+train": GPUCostModel(),
    "cudagraph": GPUCostModel.cudagraph(training=False),
    "cudagraph+train": GPUCostModel.cudagraph(),
}
BATCHED = ("baddbmm", "bmm", "bmm_add", "addcmul", "linear")


def capture(fn, inputs, grad: bool):
    """The single dynamo graph of ``fn(*inputs)``: ``(gm, example_inputs)``."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append((gm, example_inputs))
        return gm.forward

    torch._dynamo.reset()
    with torch.set_grad_enabled(grad):
        torch.compile(fn, backend=backend)(*inputs)
    if len(graphs) != 1:
        raise RuntimeError(f"expected one graph, got {len(graphs)}")
    return graphs[0]


def plan_ops(report) -> dict:
    return {k: report.ops_after.get(k, 0) for k in BATCHED if report.ops_after.get(k, 0)}


def price(gm, example_inputs, grad: bool, model: GPUCostModel) -> float:
    """The model's cost of ``gm`` as it stands (its terms, each paid once: ``Report.cost_before``)."""
    g2, ex2 = capture(gm, example_inputs, grad)
    _, r = optimus_eq.optimize(g2, ex2, strategy="greedy", patterns=["normalization_pass"], cost_model=model)
    return r.cost_before


def run(models: list[str], size: str, ilp_seconds: float = 10.0) -> list[dict]:
    from optimus_bench.measure import TrainStep
    from optimus_bench.models import build

    rows = []
    for name in models:
        for mode in ("inference", "train"):
            case = build(name, size)
            grad = mode == "train"
            if grad:
                fn, inputs = TrainStep(case.model.train(), case.loss_fn), (*case.inputs, case.labels)
            else:
                fn, inputs = case.model.eval(), case.inputs
            gm, ex = capture(fn, inputs, grad)
            old, r_old = optimus_eq.optimize(gm, ex, cost_model=MODELS["launch"], ilp_seconds=ilp_seconds)
            for label, model in MODELS.items():
                if label.endswith("+train") and not grad:
                    continue  # nothing requires grad: the same as forward only
                _, r = optimus_eq.optimize(gm, ex, cost_model=model, ilp_seconds=ilp_seconds)
                rows.append({"model": name, "mode": mode, "cost_model": label, "training_priced": r.training,
                             "extractor": r.extractor, "extract_s": round(r.times["extract"], 1),
                             "batched": plan_ops(r), "fired": {k: v for k, v in r.patterns_fired.items()
                                                               if k.startswith("batch")},
                             "cost_input_us": round(r.cost_before, 1), "cost_plan_us": round(r.cost_after, 1),
                             "cost_old_plan_us": round(price(old, ex, grad, model), 1)})
                print(rows[-1], flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| model | mode | cost model | backward priced | plan keeps | input graph (us) | old plan (us) | "
             "chosen plan (us) | extractor |", "|---|---|---|---|---|---:|---:|---:|---|"]
    for r in rows:
        keeps = ", ".join(f"{k} {v}" for k, v in r["batched"].items()) or "-"
        lines.append(f"| {r['model']} | {r['mode']} | {r['cost_model']} | {'yes' if r['training_priced'] else 'no'} "
                     f"| {keeps} | {r['cost_input_us']} | {r['cost_old_plan_us']} | {r['cost_plan_us']} | "
                     f"{r['extractor']} ({r['extract_s']} s) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["dhen", "launch_bound"])
    p.add_argument("--size", default="gpu")
    p.add_argument("--ilp-seconds", type=float, default=10.0, help="ILP time budget per extraction")
    p.add_argument("--out", default=None, help="markdown file to write")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    rows = run(args.models, args.size, args.ilp_seconds)
    text = markdown(rows)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
