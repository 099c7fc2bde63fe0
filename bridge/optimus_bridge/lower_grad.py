"""Gradient paths of a lowered Torch-IR graph's outputs: each output gets eager's, so that
``autograd.grad(output, source)`` is None exactly where eager's is (:func:`keep_gradient_paths`). Aten-IR
graphs are past autograd and skip this.
"""

from __future__ import annotations

import torch
from torch.fx import Graph, GraphModule, Node

from optimus_bridge.fx_meta import meta_val
from optimus_bridge.grad_facts import OUTPUT_REACH, gradient_reach, output_nodes, propagate_reach
from optimus_bridge.lower_outputs import replace_output_at
from optimus_bridge.lower_table import LoweringError, call_function
from optimus_bridge.overlap import static_layout
from optimus_bridge.translation import Translation


def keep_gradient_paths(graph: Graph, new_out: Node, t: Translation, env: dict[Node, Node],
                        op_key: dict[Node, int]) -> None:
    """Give every output eager's gradient paths (:class:`optimus_eq.extract.grad.GradientReach`): for
    each output and each source (an input or parameter that requires grad), a path here exactly where
    eager has one, so ``autograd.grad(output, source)`` is None exactly where eager's is.

    Our paths are read from the emitted graph: a copied (kept) node carries gradient where eager's did
    and an input still carries some; a view, cat or split passes its inputs' on; a pure op passes them
    on unless eager showed its key dropping gradient (``nondiff_keys``) or its result is not floating.

    * A source eager reaches and we do not (``cat([a, b]).split(..)[1]`` folded to ``b`` cuts ``a``): the
      output becomes ``cat([out, s.reshape(-1)[:0].reshape(0, ..)])`` per lost source ``s`` (along dim 0;
      a 0-dim output is viewed to one element and back). The empty piece adds no value (no NaN or inf,
      unlike ``+ 0 * s``), its backward gives ``s`` eager's zero gradient, and Inductor's decomposition
      of ``cat`` drops empty inputs (torch/_inductor/decomposition.py ``cat``): what is left is a copy
      of ``out`` that fuses into its producer (a kernel of its own only after an extern kernel or an
      input, where eager's cat copied too). Linking the source rather than the cut intermediate keeps
      the forward free (the intermediate need not exist); the only difference to eager is a gradient
      eager computes as ``0 * inf = NaN`` through the cut subgraph, here 0.
    * An output that requires grad here and not in eager is detached (exact: eager's had no grad_fn).
    * Any other extra path (a fused op reaching an output through another member) cannot be cut
      without undoing the fusion: LoweringError (fall back). Horizontal fusion groups only members with
      equal gradient signatures (``PlanGraph.grad_signature``), so this is a safety net.

    Args:
        graph: the lowered graph (Torch-IR), changed in place before its output node ``new_out``.
        t: the translation of the original graph (``t.gm``), whose eager facts are read.
        env: original (kept) node -> its copy in ``graph``.
        op_key: emitted pure-op node -> its op key.

    Raises:
        LoweringError: an output would have gradient paths eager does not have, or lost some and has no
            static shape.
    """
    reach = gradient_reach(t)
    if reach is None or not reach.sources:
        return
    copy_of = {v: k for k, v in env.items()}
    bit = {n: 1 << i for i, n in enumerate(reach.sources)}
    nondiff, carries_eager = reach.nondiff_keys, reach.carries

    def carries_grad(n: Node, inputs: int) -> bool:
        if not inputs:
            return False
        orig = copy_of.get(n)
        if orig is not None:
            return carries_eager.get(orig, 0) != 0
        key = op_key.get(n)
        if key is not None and key in nondiff:
            return False
        if n.target in (torch.Tensor.detach, torch.detach, "detach"):
            return False
        val = None
        if key is not None:
            val = t.types.get(key, (None, (None,)))[1][0]
        return val is None or val.startswith(("torch.float", "torch.bfloat", "torch.complex"))

    nodes = list(graph.nodes)
    ours, _ = propagate_reach(nodes, carries_grad,
                              lambda n: bit.get(copy_of.get(n), 0) if n in copy_of else 0)
    flat = output_nodes(new_out)
    if len(flat) != len(reach.at_output):
        raise LoweringError("output structure changed")
    allowed = _allowed_paths(reach.at_output, t.gm.meta.get(OUTPUT_REACH))
    for i, (n, want) in enumerate(zip(flat, reach.at_output)):
        have = ours.get(n, 0) if n is not None else 0
        if have == want:
            continue
        extra, lost = have & ~want, want & ~have
        if extra & ~allowed[i] and want:
            raise LoweringError(f"output {i} would have gradient paths eager does not have")
        if not lost and want:
            continue  # the extra paths reach only final outputs that eager's sources reach anyway
        with graph.inserting_before(new_out):
            if extra:  # eager's output needs no grad at all
                replace_output_at(new_out, i, graph.call_method("detach", (n,)))
                continue
            srcs = [env[s] for j, s in enumerate(reach.sources) if lost >> j & 1]
            replace_output_at(new_out, i, _link_sources(graph, t.gm, n, srcs, i))

def _link_sources(graph: Graph, original: GraphModule, n: Node, srcs: list[Node], i: int) -> Node:
    """``cat([n, *empty pieces of srcs])``, equal to ``n`` with a gradient path to each source."""
    like = meta_val(n)
    orig = output_nodes(next(x for x in reversed(original.graph.nodes) if x.op == "output"))[i]
    like = meta_val(orig) if orig is not None else like
    if not isinstance(like, torch.Tensor) or not static_layout(like):
        raise LoweringError(f"output {i} lost gradient paths and has no static shape")
    g, shape = graph, tuple(like.shape)
    base = n if shape else call_function(g, torch.reshape, (n, (1,)), name="reshape")
    tail = shape[1:]
    pieces = [base]
    for s in srcs:
        sv = meta_val(s)
        e = call_function(g, torch.narrow, (call_function(g, torch.reshape, (s, (-1,)), name="reshape"), 0, 0, 0), name="narrow")
        if isinstance(sv, torch.Tensor) and (sv.dtype != like.dtype or sv.device != like.device):
            e = g.call_method("to", (e,), {"device": like.device, "dtype": like.dtype})
        if tail:
            e = call_function(g, torch.reshape, (e, (0,) + tail), name="reshape")
        pieces.append(e)
    out = call_function(g, torch.cat, (pieces, 0), name="cat")
    return out if shape else call_function(g, torch.reshape, (out, ()), name="reshape")


def _allowed_paths(at_output: tuple, final_reach: tuple | None) -> list[int]:
    """Per flat output position, the sources whose gradient paths to it are harmless: eager's own
    (``at_output``), and for a segment between global-state switches (``final_reach``: the whole graph's
    output positions each of its outputs reaches, :data:`optimus_bridge.grad_facts.OUTPUT_REACH`) every
    source that eager connects to all the final outputs the position reaches (a batched Linear's output
    depends on every member's weight; when all members feed one final output, each weight has a gradient
    path to it in eager too, so no None gradient becomes zeros). A position that carries gradient but reaches no
    final output along gradient paths is read only where no gradient flows: every source is harmless there."""
    if final_reach is None or len(final_reach) != len(at_output):
        return list(at_output)
    union: dict[int, int] = {}
    for want, mask in zip(at_output, final_reach):
        while mask:
            bit = mask & -mask
            union[bit] = union.get(bit, 0) | want
            mask ^= bit
    allowed = list(at_output)
    for i, mask in enumerate(final_reach):
        if not mask and at_output[i]:
            # carries gradient yet reaches no final output along gradient paths in eager (read only by a later
            # no_grad segment: an enable_grad region inside a call under no_grad): its paths are unobservable
            allowed[i] = -1
        elif mask:
            common = -1
            while mask:
                bit = mask & -mask
                common &= union[bit]
                mask ^= bit
            allowed[i] |= common
    return allowed
