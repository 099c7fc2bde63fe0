"""Whether a plan chosen by the cost model is dearer than the input graph it replaces, priced term by term
as the input is (:func:`dearer_than_input`; ``optimize`` then keeps the input)."""

from __future__ import annotations

from torch.fx import GraphModule

from optimus_bridge.grad_facts import gradient_info
from optimus_eq.extract import input_cost
from optimus_eq.extract.fusion import op_kinds
from optimus_eq.extract.grad import packable_leaves
from optimus_eq.report import Report


def dearer_than_input(out: GraphModule, report: Report, cost_model, level: str, example_inputs,
                       translate_fn) -> bool:
    """Whether a search that picks its plan by the cost model (eqsat, taso, tensat: ``Strategy.by_cost``)
    found a plan that its own cost model prices above the input graph; then the report is made the input's
    (no pattern fired, every node kept, ``cost_after = cost_before``, one note) and the caller keeps the input.

    Why: extraction prices the fusion credit per e-class (an e-node's chain is fused only if every e-node
    of its input's class would fuse), so merged classes can make the input plan look dearer to extraction
    than :func:`optimus_eq.extract.input_cost` prices it, and extraction can pick a plan dearer than the
    input (GEMM fuzz seeds 7, 17, 28, 29, 33, 46, 51, 53: up to +89% under ``amortized(1)``). Only when
    ``report.cost_after`` exceeds ``report.cost_before`` is the lowered plan translated again and priced by
    the input's own method, term by term; it is kept unless that price is above the input's by more than
    rounding (1e-9 relative: else the same plan summed in another order would be "dearer" and give way to the
    input), and ``report.cost_after`` becomes that price (at most ``cost_before``). With eqsat, on fuzz seeds
    0-400, 22-39 runs of 401 per cost model get here, 11-12 by more than rounding, 1 (seed 144) keeps its
    input; on GEMM fuzz seeds 0-120, 24-37 of 121, 10-20 and 5-15 (most under ``amortized(1)``); never on the
    bench models. The second translation never raised there (it is the translation of an optimized graph
    optimized again); if it did, ``optimize`` would fall back to the input graph with a warning.

    Args: ``out`` the lowered plan; ``report`` its Report (``cost_before``/``cost_after`` set; changed as
    above); ``cost_model`` the model extraction used; ``level`` ``"pre_grad"`` or ``"post_grad"``;
    ``example_inputs`` the graph's inputs; ``translate_fn`` that level's translator (``translate``,
    ``translate_aten``). Raises what the translation raises (``optimize`` then falls back)."""
    before, after = report.cost_before, report.cost_after
    if before is None or after is None or not after > before:
        return False
    price = plan_price(out, cost_model, level, example_inputs, translate_fn)
    if not price > before + 1e-9 * max(1.0, abs(before)):  # dearer only beyond rounding (sums in another order)
        report.cost_after = min(price, before)  # the plan as lowered, priced like the input: no dearer
        return False
    report.notes.append(f"kept the input graph: the extracted plan costs {price:.1f} us by the cost model, "
                        f"{price - before:.6g} us more than the input ({before:.1f} us; extraction priced the plan "
                        f"{after:.1f} us)")
    report.patterns_fired.clear()
    report.node_fates = dict.fromkeys(report.node_fates, "kept")
    report.cost_after = before
    return True


def plan_price(gm: GraphModule, cost_model, level: str, example_inputs, translate_fn) -> float:
    """The cost model's price of graph ``gm`` as an input graph (microseconds): translated afresh and priced
    term by term (:func:`optimus_eq.extract.input_cost`, as ``Report.cost_before`` is). Two equal graphs get one
    price whatever search made them, unlike ``Report.cost_after``, extraction's price in the e-graph the plan
    came from (its fusion credit is per e-class). ``translate_fn``: the level's translator (``translate``,
    ``translate_aten``). Raises what the translation raises."""
    plan = translate_fn(gm)
    gradients = gradient_info(plan, level) if getattr(cost_model, "training", False) else None
    return input_cost(plan.rows, [plan.node_id[n] for n in dict.fromkeys(plan.roots)], plan.opaque_keys,
                      cost_model, gradients, op_kinds(plan.recipes), packable_leaves(plan, example_inputs, cost_model))
