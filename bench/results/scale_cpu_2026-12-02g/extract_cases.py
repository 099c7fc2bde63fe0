"""How eqsat's final extraction finds its plan on the bench models (no GPU, no timing of the models).

For each model, size preset, mode (inference under ``torch.no_grad``; training step: forward + loss with grad) and
cost model (``launch`` / ``cudagraph`` execution, the backward priced in training), capture the dynamo graph on
CPU, run ``optimus_eq.optimize(strategy="eqsat")`` and print one JSON line: the plan's cost, the extraction's
method and note (``Report.extract_note``), what a limit stopped (``Report.limits``), the largest component of the
choice core, the exact stage's CPU seconds. ``--dump DIR`` also pickles each final extraction's inputs
(``EGraphView``, roots, forced e-nodes, cost model) so :mod:`optimus_eq.extract` can be replayed on them.

    PYTHONPATH=src:bridge:bench python bench/results/scale_cpu_2026-12-02g/extract_cases.py [--models dlrm launch_bound] [--sizes cpu gpu]

Issue 9: no extraction in the bench may stop at a limit (ILP time budget, ``ilp_max_nodes``).
"""

from __future__ import annotations

import argparse
import json
import pickle
import time
import warnings

import optimus_eq
import optimus_eq.api as api
from optimus_eq.cost import GPUCostModel

from cost_modes import capture

MODELS = {"launch": lambda train: GPUCostModel(training=train),
          "cudagraph": lambda train: GPUCostModel.cudagraph(training=train)}


def run(models, sizes, modes, cost_models, dump=None, ilp_seconds=10.0):
    """Yield one record per case (see the module docstring)."""
    from optimus_bench.measure import TrainStep
    from optimus_bench.models import build

    real = api.extract
    for name in models:
        for size in sizes:
            for mode in modes:
                case = build(name, size)
                grad = mode == "train"
                if grad:
                    fn, inputs = TrainStep(case.model.train(), case.loss_fn), (*case.inputs, case.labels)
                else:
                    fn, inputs = case.model.eval(), case.inputs
                gm, ex = capture(fn, inputs, grad)
                for label in cost_models:
                    tag = f"{name}-{size}-{mode}-{label}"
                    calls = []

                    def spy(view, roots, forced, model=None, **kw):
                        if kw.get("method") != "tree":
                            calls.append((view, roots, forced, model, kw))
                        return real(view, roots, forced, model, **kw)

                    api.extract = spy
                    try:
                        t0 = time.process_time()
                        _, r = optimus_eq.optimize(gm, ex, strategy="eqsat", cost_model=MODELS[label](grad),
                                                   ilp_seconds=ilp_seconds)
                        cpu = time.process_time() - t0
                    finally:
                        api.extract = real
                    if dump and calls:
                        view, roots, forced, model, kw = calls[-1]
                        kw = {k: v for k, v in kw.items() if k != "deadline"}
                        with open(f"{dump}/{tag}.pkl", "wb") as fh:
                            pickle.dump((view, roots, forced, model, kw), fh)
                    st = r.extraction or {}
                    yield {"case": tag, "cpu_s": round(cpu, 2),
                           "extract_cpu_s": round(r.cpu_times.get("extract", 0), 2),
                           "cost": r.cost_after, "extractor": r.extractor, "note": r.extract_note,
                           "limits": list(r.limits), "largest_component": st.get("largest_component"),
                           "exact_s": round(st.get("exact_s", 0.0), 2)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["dlrm", "launch_bound"])
    p.add_argument("--sizes", nargs="+", default=["cpu", "gpu"])
    p.add_argument("--modes", nargs="+", default=["inference", "train"])
    p.add_argument("--cost-models", nargs="+", default=list(MODELS))
    p.add_argument("--ilp-seconds", type=float, default=10.0)
    p.add_argument("--dump", default=None, help="folder for pickled extraction inputs")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    for rec in run(args.models, args.sizes, args.modes, args.cost_models, args.dump, args.ilp_seconds):
        print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
