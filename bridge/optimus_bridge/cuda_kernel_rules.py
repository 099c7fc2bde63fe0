"""The kernel predictor's per-op CUDA rules: how many GPU activities one extern call launches on the H200
(cuBLAS split-K GEMMs, bias copies, ATen ops of many kernels) and when Inductor's CUDA lowering splits a
reduction in two. Read by :func:`optimus_bridge.inductor_kernels.predict` for ``device="cuda"``; each rule
names the kernel lists or the PyTorch source it was read from (docs/DESIGN.md, "Kernel predictor")."""

from __future__ import annotations

import torch
import torch.fx

from optimus_bridge.inductor_fusion import node_val

aten = torch.ops.aten


def tensor_args(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The FX nodes among ``node``'s arguments (nested lists, tuples and dicts too), in order."""
    out: list[torch.fx.Node] = []

    def visit(a):
        if isinstance(a, torch.fx.Node):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            for x in a:
                visit(x)
        elif isinstance(a, dict):
            for x in a.values():
                visit(x)
    visit(node.args)
    visit(node.kwargs)
    return out


def split_k_gemm(node: torch.fx.Node, sms: int = 132) -> bool:
    """Whether cuBLAS runs the extern ``mm`` ``node`` as a split-K GEMM: two GPU activities, the GEMM and
    either a reduction of its partial sums (``sm80_xmma_gemm_..._execute_split_k_kernel`` after the
    ``..._execute_kernel``, or ``cublasLt::splitKreduce_kernel``) or a ``Memset`` of the output it
    accumulates into. cuBLAS's heuristic is internal; this is a fit to the H200's per-call kernel lists (fp32,
    torch 2.11, bench/results/kernel_prediction_h200_2026-12-02: 285 of 290 ``mm`` calls of eleven bench
    cells, by shape; M x K times K x N, tiles of 128 x 128 outputs, ``sms`` the H200's 132 SMs). Split when

    * the output is at most one wave of tiles (half a wave unless A is transposed: the weight gradient
      ``grad.T @ x`` summed over the batch) and K is long: ``K >= 1024`` and ``4 K >= max(M, N)``
      (DHEN's low-rank 2048 x 2048 x 64, every weight gradient over a batch of 2048 to 131072 rows);
    * K is at least 2048 and four times N (BERT's 4096 x 3072 x 768 FFN output: GEMM + memset);
    * K is not a multiple of 4 (rows misaligned for 16-byte loads: cuBLAS's align-1 kernels) and at least
      256, over at most one wave (DLRM's top MLP on its 415 interaction features).

    ``bmm`` (0 of 64 calls: the batch fills the device) and ``addmm`` (1 of 12: cuBLASLt's bias epilogue)
    never split here."""
    if node.target is not aten.mm.default:
        return False
    a, b = (node_val(x) for x in tensor_args(node)[:2])
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return False
    try:
        m, k, n = int(a.shape[-2]), int(a.shape[-1]), int(b.shape[-1])
        a_transposed = int(a.stride(-2)) == 1 and m > 1
    except (TypeError, ValueError):
        return False
    tiles = -(-m // 128) * -(-n // 128)
    if k >= 1024 and 4 * k >= max(m, n) and tiles <= (sms + sms // 10 if a_transposed else sms // 2):
        return True
    if k >= 2048 and k >= 4 * n:
        return True
    return k % 4 != 0 and k >= 256 and tiles <= sms


#: ATen CUDA ops that launch several kernels per call (GPU activities, memsets included), as the H200's
#: kernel lists show them: ``_embedding_bag_backward`` (dense gradient,
#: aten/src/ATen/native/cuda/EmbeddingBackwardKernel.cu ``embedding_backward_cuda_kernel``): an ``arange``,
#: two memsets, CUB's radix sort of the indices (histogram, exclusive scan, then per 8 key bits a memset and
#: a onesweep pass: 8 passes for int64 indices), then fill, compact init, unique-by-key, partials per
#: segment, scan init, scan, partial-segment count and offsets, ``compute_grad_weight_bags`` and
#: ``sum_and_scatter``: 15 + 2 x 8 = 31 for DLRM's int64 bags; the memory-efficient attention backward
#: (``_scaled_dot_product_efficient_attention_backward``: a fill of the gradient accumulator, the ``delta``
#: reduction, an elementwise op and ``fmha_cutlassB``): 4 in BERT's step.
def extern_gpu_kernels(node: torch.fx.Node) -> int:
    """GPU activities one extern ``node`` runs on CUDA (1 unless listed above, plus :func:`split_k_gemm` and
    :func:`bias_copied`)."""
    t = node.target
    if t in (aten._embedding_bag_backward.default, aten._embedding_bag_dense_backward.default):
        args = tensor_args(node)
        idx = node_val(args[1]) if len(args) > 1 else None
        bits = 8 * (idx.element_size() if isinstance(idx, torch.Tensor) else 8)
        return 15 + 2 * (bits // 8)
    if t is aten._scaled_dot_product_efficient_attention_backward.default:
        return 4
    return 1 + int(split_k_gemm(node)) + int(bias_copied(node))


def bias_copied(node: torch.fx.Node) -> bool:
    """Whether ATen's CUDA ``addmm``/``baddbmm`` ``node`` copies its bias into the output before the GEMM (an
    extra ``direct_copy_kernel``): ``baddbmm`` always (aten/src/ATen/native/cuda/Blas.cpp
    ``baddbmm_out_cuda_impl``: ``result.copy_(self)`` under beta != 0); ``addmm`` unless cuBLASLt's bias
    epilogue applies (``addmm_out_cuda_impl``'s ``useLtInterface``: a 1-D bias of N elements and every dim
    of both matrices above 1; a GEMV with one output column has it copied, as the H200's launch-bound head
    showed)."""
    if node.target is aten.baddbmm.default:
        return True
    if node.target is not aten.addmm.default:
        return False
    vals = [node_val(x) for x in tensor_args(node)[:3]]
    if len(vals) < 3 or not all(isinstance(v, torch.Tensor) for v in vals):
        return False
    bias, a, b = vals
    try:
        dims = [int(a.shape[0]), int(a.shape[1]), int(b.shape[1])]
    except (TypeError, ValueError):
        return False
    return bias.dim() != 1 or min(dims) <= 1


#: H200 device properties Inductor's split heuristic reads (``DeviceProperties``): SMs, threads per SM, warp
CUDA_SMS, CUDA_THREADS_PER_SM, CUDA_WARP = 132, 2048, 32


def split_reduction(node: torch.fx.Node, numel: int, r: int, sms: int = CUDA_SMS,
                    threads_per_sm: int = CUDA_THREADS_PER_SM, warp: int = CUDA_WARP) -> bool:
    """Whether Inductor's CUDA lowering splits the reduction ``node`` (``numel`` outputs, ``r`` elements
    each) into two kernels (torch/_inductor/ir.py ``Reduction.num_splits``, choices.py
    ``reduction_split_factor``, default config): never with ``numel >= 64 * sms`` outputs or ``r <= warp``;
    an *inner* reduction (over the input's contiguous dim) only with fewer than ``2 * sms`` outputs and
    ``r > 8192``; an *outer* one (over a strided dim: a bias gradient summed over the batch) when its split
    factor exceeds 1: ``r`` above 4 values per thread times ``warp`` (``r > 128``), or above 2048 when
    ``r * numel`` exceeds 512 elements per thread of the device. The input's strides come from its meta."""
    if numel >= sms * 2 * 32 or r <= warp:
        return False
    args = tensor_args(node)
    x = node_val(args[0]) if args else None
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        return False
    dims = node.args[1] if len(node.args) > 1 and isinstance(node.args[1], (list, tuple)) else None
    reduced = set(range(x.dim())) if not dims else {d % x.dim() for d in dims}
    try:
        strides = [int(s) for s in x.stride()]
        sizes = [int(s) for s in x.shape]
    except (TypeError, ValueError):  # symbolic: Inductor does not split either
        return False
    live = [d for d in range(x.dim()) if sizes[d] > 1]
    innermost = min(live, key=lambda d: strides[d]) if live else None
    if numel == 1 or innermost in reduced:  # inner reduction
        return numel < 2 * sms and r > 8192
    if r * numel >= 512 * sms * threads_per_sm:
        return r > 4 * 512
    return r > 4 * warp
