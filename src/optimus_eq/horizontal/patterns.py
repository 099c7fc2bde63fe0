"""The horizontal patterns (Optimus' group/batch fusions, upstream torch/_inductor/fx_passes/
group_batch_fusion.py, and rewrites of one op run by the horizontal machinery) in greedy's pass order. Each
is declared in the module of its family, beside its group key and builder.
"""

from __future__ import annotations

from optimus_eq.horizontal import decompose_mm, einsum, gemv, layer_norm, linear, pointwise

PATTERNS = (*linear.PRE_GRAD_PATTERNS, *layer_norm.PATTERNS, *pointwise.PRE_GRAD_PATTERNS, *einsum.PATTERNS,
            *gemv.PATTERNS)

POST_GRAD_PATTERNS = (*decompose_mm.PATTERNS, *linear.POST_GRAD_PATTERNS, *pointwise.POST_GRAD_PATTERNS)
