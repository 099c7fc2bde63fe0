"""Aten-IR (post-grad) translation and lowering: the Torch-IR bridge with Aten-IR's vocabulary and ops.

Translation (:class:`AtenTranslator`) reuses :class:`optimus_bridge.translate.Translator` with the
vocabulary of :mod:`optimus_bridge.aten_vocab` and adds the spellings only Aten-IR has:

* ``aten.slice.Tensor(x, d, start, end, step=1)`` -> ``Narrow`` (start/end clamped as aten does; a
  step other than 1 stays opaque); a full slice is ``x`` itself;
* ``aten.select.int(x, d, i)`` -> ``Select``;
* ``aten.expand`` to the input's own shape, ``aten.alias`` -> ``x`` (other expands stay opaque);
* ``aten.clone`` whose result has the input's strides -> ``x``: the copy is not observable, since
  tensors that are mutated (and their readers) stay opaque, and an output that would then alias an input
  gets its copy back at lowering. A clone that changes the layout (a contiguous copy of a slice, which a
  later view may need) stays opaque.

Lowering (:data:`ATEN_IR`) emits aten ``OpOverload`` calls: ``Narrow`` -> ``aten.slice.Tensor``,
``Select`` -> ``aten.select.int``, ``Unsqueeze`` -> ``aten.unsqueeze.default``, ``Reshape`` ->
``aten.reshape.default`` (what Inductor's post-grad graphs use for views; it copies only where a view is
impossible), ``Permute`` -> ``aten.permute.default``, ``Cat`` -> ``aten.cat.default`` (a stack is a cat
of unsqueezes: Inductor decomposes ``aten.stack`` anyway), output copies -> ``aten.clone.default``, or,
for an output whose eager layout is neither contiguous nor what a clone keeps (a pointwise op moved in front
of a slice of a transposed tensor: the slice of its result has the whole tensor's strides, eager's
op on the slice has dense ones), :func:`_restride` (functional ``as_strided_scatter`` into a new buffer,
then ``as_strided``). Pure
ops are emitted with the OpOverload they came from. ``val`` meta is filled by FakeTensor propagation in
the inputs' fake mode, as at Torch-IR.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from optimus_bridge import aten_vocab
from optimus_bridge.fx_meta import Unsupported, meta_val, norm_dim
from optimus_bridge.lower_table import IRLevel
from optimus_bridge.translate import Translation, Translator

aten = torch.ops.aten

def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class AtenTranslator(Translator):
    """Translator for Aten-IR graphs (module docstring); everything else as :class:`Translator`."""

    vocab = aten_vocab
    #: AOTAutograd's graphs are functional over distinct inputs (:func:`~optimus_bridge.aliasing.frozen_nodes`)
    inputs_may_alias = False
    #: AOTAutograd's graphs carry no autograd state (their backward is a graph of its own)
    keeps_no_grad_views = False

    def visible_outputs(self) -> frozenset | None:
        """The flat outputs the user sees: in a backward graph (placeholders ``tangents_*``) none, its
        outputs are gradients handed to autograd; in AOTAutograd's forward or inference graph, by the
        compile's ``fw_metadata`` (``TracingContext``), the user's outputs and the intermediate bases that
        AOTAutograd regenerates aliases from, after the mutated inputs and before the tensors saved for
        backward; None (all) when the graph is not AOTAutograd's or its layout does not match."""
        if any(n.op == "placeholder" and str(n.target).startswith("tangents") for n in self.gm.graph.nodes):
            return frozenset()
        ctx = torch._guards.TracingContext.try_get()
        md = getattr(ctx, "fw_metadata", None)
        out = next((n for n in reversed(self.gm.graph.nodes) if n.op == "output"), None)
        if md is None or out is None:
            return None
        flat: list = []
        torch.fx.node.map_aggregate(out.args[0], flat.append)
        try:
            start = md.num_mutated_inp_runtime_indices
            end = start + md.num_outputs + md.num_intermediate_bases
        except AttributeError:  # another torch's ViewAndMutationMeta
            return None
        return frozenset(range(start, end)) if end <= len(flat) else None

    def _tensor_op(self, node: Node, name: str, val) -> int:
        if name not in ("slice", "select", "expand", "alias", "clone"):
            return super()._tensor_op(node, name, val)
        a = aten_vocab.bind(node)
        x = a["self"]
        xv = self._term(x)
        x_val = meta_val(x)
        if not self._shaped(x_val):
            raise Unsupported("input without known shape")
        if val.dtype != x_val.dtype or val.device != x_val.device:
            raise Unsupported("changes dtype or device")
        rank = x_val.dim()
        if name == "slice":
            dim = norm_dim(a["dim"], rank)
            n = self._size(x_val.shape[dim])
            start, end, step = a["start"], a["end"], a["step"]
            if step != 1 or not all(v is None or _is_int(v) for v in (start, end)):
                raise Unsupported("strided or symbolic slice")
            if n < 0:  # a symbolic dim: only the whole of it (``x[:, :]`` spelled as a slice) is x
                if start in (None, 0) and (end is None or end >= 2**62) and self._size(val.shape[dim]) == n:
                    return xv
                raise Unsupported("slice of a symbolic dim")
            start = 0 if start is None else start + n if start < 0 else start
            end = n if end is None else end + n if end < 0 else end
            start = min(max(start, 0), n)
            end = min(max(end, start), n)
            if self._size(val.shape[dim]) != end - start:
                raise Unsupported("slice bounds disagree with meta")
            if (start, end) == (0, n):
                return xv
            return self._new("NarrowIn", xv, dim, start, end - start, n)
        if name == "select":
            dim = norm_dim(a["dim"], rank)
            n, i = self._size(x_val.shape[dim]), a["index"]
            if n < 0 and _is_int(i) and i >= 0:  # a symbolic dim: the trace checked i < n
                return self._new("SelectIn", xv, dim, i, n)
            if n < 0 or not _is_int(i) or not -n <= i < n:
                raise Unsupported("select index out of range or symbolic")
            return self._new("SelectIn", xv, dim, i % n, n)
        if name == "expand":
            if self._shape(val.shape) != self._shape(x_val.shape):
                raise Unsupported("a broadcasting expand")
            return xv
        if name == "alias":
            return xv
        # clone: identity when the copy keeps the layout (see the module docstring)
        if self._shape(val.shape) != self._shape(x_val.shape) or self._shape(val.stride()) != self._shape(x_val.stride()):
            raise Unsupported("a clone that changes the layout")
        return xv


def translate_aten(gm: GraphModule) -> Translation:
    """Translate an Aten-IR GraphModule whose nodes carry ``val`` FakeTensor meta into e-graph rows."""
    return AtenTranslator(gm).run()


def _clone(g, x, fmt):
    return g.call_function(aten.clone.default, (x,), {"memory_format": fmt})


def _restride(g, x: Node, shape: tuple, stride: tuple) -> list[Node]:
    """A copy of ``x`` with exactly ``shape`` and ``stride`` (non-overlapping, static; gaps allowed), in
    functional aten ops: ``as_strided(as_strided_scatter(x.new_empty([span]), x, shape, stride), shape,
    stride)``, where ``span`` is the number of elements the layout reaches. Inductor keeps a graph output's
    meta strides (``keep_output_stride``), so the compiled output is laid out as eager's."""
    span = 1 + sum((n - 1) * st for n, st in zip(shape, stride)) if all(shape) else 0
    buf = g.call_function(aten.new_empty.default, (x, [span]))
    scattered = g.call_function(aten.as_strided_scatter.default, (buf, x, list(shape), list(stride), 0))
    return [buf, scattered, g.call_function(aten.as_strided.default, (scattered, list(shape), list(stride), 0))]


#: Aten-IR lowering (module docstring).
ATEN_IR = IRLevel(
    views={
        "Narrow": lambda g, x, lit: g.call_function(aten.slice.Tensor, (x, lit[0], lit[1], lit[1] + lit[2])),
        "Select": lambda g, x, lit: g.call_function(aten.select.int, (x, lit[0], lit[1])),
        "Unsqueeze": lambda g, x, lit: g.call_function(aten.unsqueeze.default, (x, lit[0])),
        "Reshape": lambda g, x, lit: g.call_function(aten.reshape.default, (x, list(lit[0]))),
        "Permute": lambda g, x, lit: g.call_function(aten.permute.default, (x, list(lit[0]))),
    },
    cat=lambda g, xs, d: g.call_function(aten.cat.default, (xs, d)),
    stack=None,
    clone=_clone,
    restride=_restride,
    alias=lambda g, x: g.call_function(aten.alias.default, (x,)),
    # prims.convert_element_type's result requires grad when its input does, under no_grad too
    grad_mode_blind={torch.ops.prims.convert_element_type.default: lambda g, n, args, kwargs: g.call_function(
        aten._to_copy.default, (args[0],), {"dtype": args[1]})},
    sym_size=lambda g, x, d: g.call_function(aten.sym_size.int, (x, d)),
)
