"""Facts about an input graph before it is optimized: its IR level, and FakeTensor meta on every node.

``optimize`` reads them before translation; they touch the user's graph only to read it (meta computed from
``example_inputs`` goes on a copy)."""

from __future__ import annotations

import copy
import functools
from typing import Sequence

import torch
from torch.fx import GraphModule

from optimus_bridge.effects import changes_global_state
from optimus_bridge.fx_meta import meta_val
from optimus_bridge.lower_meta import AttrFakeTensorProp


def _ensure_meta(gm: GraphModule, example_inputs: Sequence | None, level: str = "pre_grad") -> GraphModule:
    """``gm`` when its nodes carry FakeTensor meta (dynamo graphs have it; symbolic_trace graphs do not), else
    a copy of it (same attributes, copied graph) whose meta is computed from ``example_inputs``: the user's
    graph is left as it was, so a later call with inputs of other shapes does not read this call's meta
    (it did: the second call's graph was specialized to the first call's shapes). Aten-IR
    graphs carry ``val`` on every node that returns something (``val`` is None for ops returning None):
    there only the placeholders are checked. In a Torch-IR graph a call nobody reads (dynamo's
    ``_set_grad_enabled`` of a ``with torch.no_grad():``, ``_log_api_usage_once``) returns None and has no
    meta: it does not make the graph lack meta, nor does ``_enter_autocast``, whose mode object only
    ``_exit_autocast`` reads. Rerunning FakeTensorProp over dynamo's meta would lose its
    ``requires_grad`` (FakeTensorProp stores detached FakeTensors), which training pricing
    (:func:`optimus_bridge.grad_facts.gradient_info`), the horizontal groups' gradient signatures and split
    lowering read; the meta computed here keeps it (``_grad_fake_tensor_prop``: an input that requires grad
    makes the nodes that depend on it differentiably require grad, a ``detach`` does not).

    Raises:
        ValueError: the graph has no meta and no ``example_inputs`` came (inside ``optimize``'s fail-safe:
            Inductor's custom-pass hooks pass none, and a graph without meta there is left as it was).
    """
    if _has_meta(gm, level):
        return gm
    _check_example_inputs(gm, example_inputs)
    if example_inputs is None:
        raise ValueError("the graph has no FakeTensor meta (torch.fx.symbolic_trace graphs have none); pass "
                         "example_inputs, one value per placeholder")
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = torch._guards.detect_fake_mode(example_inputs) or FakeTensorMode(allow_non_fake_inputs=True)
    gm = GraphModule(gm, copy.deepcopy(gm.graph), class_name=type(gm).__name__)
    _grad_fake_tensor_prop()(gm, mode).propagate(*example_inputs)
    for n in gm.graph.nodes:
        if "val" in n.meta:
            n.meta.setdefault("example_value", n.meta["val"])
    return gm


@functools.lru_cache(maxsize=None)
def _grad_fake_tensor_prop():
    """The FakeTensorProp subclass :func:`_ensure_meta` runs (an :class:`AttrFakeTensorProp`: a module's
    buffers stay untouched)."""

    class _GradFakeTensorProp(AttrFakeTensorProp):
        """FakeTensorProp whose ``val`` meta keeps each tensor's ``requires_grad`` (the stored snapshot is a
        detached FakeTensor; the live result, run in the caller's grad mode, knows whether it requires grad)."""

        def run_node(self, n):
            result = super().run_node(n)
            val = n.meta.get("val")
            if isinstance(result, torch.Tensor) and isinstance(val, torch.Tensor) and result.requires_grad \
                    and not val.requires_grad:
                n.meta["val"] = val.requires_grad_(True)
            elif isinstance(result, (tuple, list)) and isinstance(val, (tuple, list)) and len(val) == len(result):
                for r, v in zip(result, val):
                    if isinstance(r, torch.Tensor) and isinstance(v, torch.Tensor) and r.requires_grad \
                            and not v.requires_grad:
                        v.requires_grad_(True)
            return result

    return _GradFakeTensorProp


def _has_meta(gm: GraphModule, level: str) -> bool:
    """Whether the nodes :func:`_ensure_meta` needs carry FakeTensor meta. A placeholder whose ``val`` is
    None has it: ``ExportedProgram.module()`` gives an argument passed as None (``bias=None``) a placeholder
    with ``val`` None (else its programs fall back: "the graph has no FakeTensor meta")."""
    needed = [n for n in gm.graph.nodes if n.op == "placeholder" or (
        level != "post_grad" and n.op != "output" and n.users and not changes_global_state(n))]
    return all(meta_val(n) is not None or (n.op == "placeholder" and "val" in n.meta) for n in needed)


def _check_example_inputs(gm: GraphModule, example_inputs: Sequence | None) -> None:
    """The user's ``example_inputs``, when given, have one value per placeholder of ``gm``.

    Raises:
        ValueError: naming both counts.
    """
    placeholders = sum(1 for n in gm.graph.nodes if n.op == "placeholder")
    if example_inputs is not None and len(example_inputs) != placeholders:
        raise ValueError(f"{len(example_inputs)} example inputs for {placeholders} placeholders of the graph "
                         "(example_inputs has one value per placeholder)")


def ir_level(gm: GraphModule) -> str:
    """The IR level of ``gm``: ``"post_grad"`` for an Aten-IR graph (some call targets an aten OpOverload and
    none a Torch-IR function or method: AOTAutograd's graphs, ``ExportedProgram.module()``), else
    ``"pre_grad"`` (dynamo's and ``symbolic_trace``'s graphs; a graph of only ``operator`` calls too)."""
    import operator

    aten = torch_ir = False
    for n in gm.graph.nodes:
        if n.op == "call_method":
            torch_ir = True
        elif n.op == "call_function":
            if isinstance(n.target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
                aten = True
            elif getattr(n.target, "__module__", None) not in (operator.__name__, "_operator", "builtins") \
                    and not isinstance(n.target, torch._ops.HigherOrderOperator):
                torch_ir = True
    return "post_grad" if aten and not torch_ir else "pre_grad"
