"""Group keys and fused-op builders of the horizontal patterns, in the e-graph's own term language.

Every builder adds ONE fused op per group and one view per member that equals it (``writer.union``):

* pointwise (``Unary``/``Binary``/one-input ``Apply``): ``F = f(stack(x_1..x_n))``, ``y_i = F.select(0, i)``;
* linears of equal shapes: ``Y^T = bmm_add(stack(b).unsqueeze(2), stack(w), stack(x).permute(0, 2, 1))`` (``bmm``
  then the bias add, which Inductor fuses into the readers; ``torch.baddbmm`` for bf16/fp16; ``bmm``
  without bias; inputs of rank > 2 flattened to [n, M, in] and outputs viewed back),
  ``y_i = Y^T.permute(0, 2, 1).select(0, i)``: the weights' gradients come out in their own layout;
  without a weight gradient (inference) ``Y = bmm_add(stack(b).unsqueeze(1), stack(x), stack(w).permute(0, 2, 1))``,
  ``y_i = Y.select(0, i)``, contiguous as eager's;
* linears of one input x: ``Y = linear(x, cat(w), cat(b))``, ``y_i = Y.narrow(-1, offset_i, out_i)``;
* layer norms: ``Y = addcmul(stack(b), layer_norm(stack(x), no affine), stack(w))`` with the stacked
  weight and bias viewed to broadcast, ``y_i = Y.select(0, i)``; bf16/fp16 are computed in float32 and
  rounded once, as eager's kernels do (bit-identical results).

One module per family, each declaring its patterns too: :mod:`.pointwise`, :mod:`.linear` (linears of
equal shapes, of one input, and post-grad mm / addmm), :mod:`.layer_norm`, and the rewrites of one op :mod:`.einsum`, :mod:`.decompose_mm`
and :mod:`.gemv`; :mod:`.recipes` holds what they share (recipes of new ops, binding a call's arguments,
dtype casts). This module lists them all under one name.

The fused ops are pure ``Apply``/``Unary`` terms with a recipe the lowering emits (``torch.bmm``,
``linear.bmm_add``, ``torch.baddbmm``, ``F.layer_norm``, ``torch.addcmul``, ...). The stacks are ``Cat`` of
``Unsqueeze``, so the vertical rules turn a stack of slices of one tensor into a view when the group is
saturated again.
"""

from optimus_eq.horizontal.decompose_mm import (DECOMPOSE_MM_OPTIONS, build_decompose_mm, decompose_mm_key,
                                                should_decompose)
from optimus_eq.horizontal.einsum import build_einsum, einsum_key, einsum_parts, sum_keeps_dtype
from optimus_eq.horizontal.gemv import GEMV_DEVICES, build_gemv, gemv_key
from optimus_eq.horizontal.layer_norm import LAYER_NORM_PARAMS, build_layer_norm, layer_norm_key
from optimus_eq.horizontal.linear import (LINEAR_PARAMS, aten_linear_key, build_aten_linear, build_linear,
                                          build_linear_lhs, linear_key, linear_lhs_key, mm_operands)
from optimus_eq.horizontal.pointwise import RANDOM_OPS, build_pointwise, pointwise_key
from optimus_eq.horizontal.recipes import UPCAST, bind, method, recipe, slot, slots, to_type

__all__ = ["DECOMPOSE_MM_OPTIONS", "GEMV_DEVICES", "LAYER_NORM_PARAMS", "LINEAR_PARAMS", "RANDOM_OPS", "UPCAST",
           "aten_linear_key", "bind", "build_aten_linear", "build_decompose_mm", "build_einsum", "build_gemv",
           "build_layer_norm", "build_linear", "build_linear_lhs", "build_pointwise", "decompose_mm_key", "einsum_key",
           "einsum_parts", "gemv_key", "layer_norm_key", "linear_key", "linear_lhs_key", "method", "mm_operands",
           "pointwise_key", "recipe", "should_decompose", "slot", "slots", "sum_keeps_dtype", "to_type"]
