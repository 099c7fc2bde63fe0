"""The kernel predictor (optimus_bridge.inductor_kernels) against Inductor.

The fast tests check single rules on small graphs traced with AOTAutograd (no Inductor compile); the slow
ones compile bench models and small programs with Inductor on CPU and compare the predicted kernel count
with the one the bench's profiler counter measures (issue 15: within 10%).
"""

from __future__ import annotations

import pytest
import torch

from optimus_bridge.inductor_kernels import KernelPrediction, aten_graphs, predict, predict_module


def _graphs(fn, *inputs):
    """The Torch-IR graph dynamo captures for ``fn`` and its example inputs."""
    got = []

    def capture(gm, example_inputs):
        got.append((gm, example_inputs))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=capture)(*inputs)
    torch._dynamo.reset()
    assert len(got) == 1
    return got[0]


def _predict(fn, *inputs, device="cpu", training=False) -> KernelPrediction:
    gm, ex = _graphs(fn, *inputs)
    return predict_module(gm, ex, device, training=training)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_pointwise_chain_is_one_kernel_and_views_are_free(device):
    x = torch.randn(16, 32)
    p = _predict(lambda x: torch.relu(x * 2 + 1).view(32, 16).t().sigmoid(), x, device=device)
    assert (p.fused, p.extern) == (1, 0)
    p = _predict(lambda x: x.view(32, 16).permute(1, 0), x, device=device)
    assert p.kernels == 0


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_linear_is_an_extern_call_and_its_epilogue_one_kernel(device):
    lin = torch.nn.Linear(32, 32)
    with torch.no_grad():
        p = _predict(lambda x: torch.tanh(lin(x)) * 3, torch.randn(16, 32), device=device)
    assert (p.fused, p.extern) == (1, 1)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_layer_norm_forward_is_one_reduction_kernel(device):
    ln = torch.nn.LayerNorm(64)
    with torch.no_grad():
        p = _predict(lambda x: torch.relu(ln(x)), torch.randn(16, 64), device=device)
    assert (p.fused, p.extern) == (1, 0)


def test_a_reduction_that_cannot_fuse_with_its_producer_s_group_is_its_own_kernel():
    # a sum over rows after a sum over columns: two reduction groups of different shapes
    p = _predict(lambda x: x.sum(1, keepdim=True).exp() + x.sum(0), torch.randn(64, 48))
    assert p.fused == 2 and p.extern == 0


def test_cpu_cat_of_extern_outputs_copies_in_one_kernel_with_its_reader():
    w = torch.randn(8, 8)
    p = _predict(lambda x: torch.cat([t @ w for t in x.split(8, 1)], 1) + x, torch.randn(16, 32))
    assert p.extern == 4
    assert p.fused == 1  # the four copies and the add: one outer loop over 16 rows


def test_training_predicts_a_backward_graph():
    lin = torch.nn.Linear(16, 16)
    gm, ex = _graphs(lambda x: torch.relu(lin(x)).sum(), torch.randn(8, 16, requires_grad=True))
    graphs = aten_graphs(gm, ex, training=True)
    assert len(graphs) == 2
    bwd = predict(graphs[1], "cpu")
    assert bwd.extern == 2  # grad of the weight (mm) and of the input (mm); the bias's is a reduction


def test_bad_device_is_refused():
    gm, ex = _graphs(lambda x: x + 1, torch.randn(4))
    with pytest.raises(ValueError, match="device"):
        predict(aten_graphs(gm, ex)[0], "tpu")


def _count_inside(step) -> int:
    """Kernels one call runs inside compiled graphs (the bench's CPU counter, outside ops left out)."""
    from torch.profiler import ProfilerActivity, profile

    from optimus_eq import kernels

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return sum(1 for e in prof.events() if kernels._is_cpu_kernel(e) and e.cpu_parent is not None
               and e.cpu_parent.name.startswith(kernels._COMPILED_GRAPH))


def _measured_and_predicted(module, inputs, training):
    """(measured, predicted) kernels of ``module`` compiled by Inductor on CPU, one step."""
    import torch._inductor.compile_fx as cfx
    import torch._inductor.config as inductor_config

    got = []

    def recording(gm, example_inputs, *args, **kwargs):
        got.append((gm, list(example_inputs)))
        return gm.forward

    real = cfx.compile_fx
    torch._dynamo.reset()
    cfx.compile_fx = recording
    try:
        with torch.no_grad() if not training else torch.enable_grad():
            torch.compile(module)(*inputs)
    finally:
        cfx.compile_fx = real
    predicted = sum(predict_module(gm, ex, "cpu", training=training).kernels for gm, ex in got)
    torch._dynamo.reset()
    with inductor_config.patch({"cpp.enable_kernel_profile": True}):
        fn = torch.compile(module)

        def step():
            if training:
                fn(*inputs).sum().backward()
            else:
                with torch.no_grad():
                    fn(*inputs)
        step()
        measured = _count_inside(step)
    torch._dynamo.reset()
    return measured, predicted


@pytest.mark.slow
@pytest.mark.parametrize("model,mode", [("launch_bound", "inference"), ("wukong", "inference")])
def test_prediction_within_ten_percent_on_bench_models(model, mode):
    from optimus_bench.models import build
    from optimus_bench.measure import _prepare

    case = build(model, "cpu")
    module = _prepare(case, "inference") if mode == "inference" else case.model.train()
    measured, predicted = _measured_and_predicted(module, case.inputs, mode == "train")
    assert measured > 0
    assert abs(predicted - measured) <= 0.1 * measured, (predicted, measured)


# -- CUDA-only rules read off the H200's kernel lists (issue 15: the GPU undercounts) -----------------

def test_cuda_splits_a_column_reduction_in_two_kernels():
    """A bias gradient (a sum over the batch: few outputs, many elements each, a strided reduction) is two
    kernels on CUDA (Inductor's split reduction: partial sums, then their sum), one on CPU; a row sum with
    enough outputs is one on both."""
    x = torch.randn(2048, 64)
    col = _predict(lambda x: (x * 2).sum(0), x, device="cuda")
    assert col.kernels == 2 and any(g[0].endswith("_split_stage2") for g in col.groups)
    assert _predict(lambda x: (x * 2).sum(0), x, device="cpu").kernels == 1
    assert _predict(lambda x: (x * 2).sum(1), torch.randn(16384, 64), device="cuda").kernels == 1


def test_cuda_gemv_addmm_copies_its_bias_and_a_weight_gradient_gemm_splits_k():
    """cuBLAS details the H200 showed: an addmm with one output column copies its bias first (2 kernels);
    a weight gradient summed over a long batch (K = 4096 >= N, M) gets cuBLASLt's split-K reduction."""
    head = torch.nn.Linear(64, 1)
    with torch.no_grad():
        cuda = _predict(lambda x: head(torch.tanh(x) + x), torch.randn(512, 64), device="cuda")
        cpu = _predict(lambda x: head(torch.tanh(x) + x), torch.randn(512, 64), device="cpu")
    assert cuda.extern == cpu.extern + 1
    a, b = torch.randn(64, 4096), torch.randn(4096, 32)
    assert _predict(torch.mm, a, b, device="cuda").extern == 2
    assert _predict(torch.mm, b, torch.randn(32, 64), device="cuda").extern == 1  # K = 32


def test_fused_adam_launches_follow_multi_tensor_apply_limits():
    """The H200's launch-bound training step (128 and 512 branches, 2 layers, fused Adam): 29 + 10 and
    114 + 38 multi_tensor_apply launches, plus the two fills and the Optimizer.step record."""
    from kernel_prediction import multi_tensor_launches, outside_kernels

    def params(branches):
        return [32] * (2 * branches * 3) + [1024] * (2 * branches) + [branches * 32, 1]

    assert (multi_tensor_launches(params(128), 4), multi_tensor_launches([1] * 1026, 1)) == (29, 10)
    assert outside_kernels("train", "adam_fused", "cuda", params(128)) == 42
    assert outside_kernels("train", "adam_fused", "cuda", params(512)) == 155
    assert multi_tensor_launches([65536 * 321], 4) == 2  # a tensor of 321 chunks spans two launches
    assert outside_kernels("inference", "adam_fused", "cuda", params(128)) == 0


# -- CUDA rules read off the H200's per-call kernel lists (bench/results/kernel_prediction_h200_2026-12-02) -----

@pytest.mark.slow
def test_cuda_split_k_by_gemm_shape_not_for_bmm():
    """cuBLAS splits K of a GEMM with few output tiles and a long K (two GPU activities), not of a batched
    GEMM whose batch fills the device, nor of a GEMM with many output tiles (a short K)."""
    assert _predict(torch.mm, torch.randn(2048, 2048), torch.randn(2048, 64), device="cuda").extern == 2
    assert _predict(torch.mm, torch.randn(2048, 2048), torch.randn(2048, 64), device="cpu").extern == 1
    assert _predict(torch.mm, torch.randn(2048, 64), torch.randn(64, 2048), device="cuda").extern == 1
    assert _predict(torch.bmm, torch.randn(32, 64, 2048), torch.randn(32, 2048, 64), device="cuda").extern == 1
    # the weight gradient grad.T @ x over a long batch: A transposed, one wave of tiles
    assert _predict(lambda g, x: g.t() @ x, torch.randn(4096, 768), torch.randn(4096, 768), device="cuda").extern == 2


def test_cuda_embedding_bag_backward_runs_its_radix_sort_kernels():
    """The dense embedding-bag gradient on CUDA is one ATen call of 31 GPU activities for int64 indices
    (CUB's radix sort, 8 passes with a memset each, plus the segment kernels), one call on CPU."""
    bag = torch.nn.EmbeddingBag(1000, 16, mode="sum")
    idx, off = torch.randint(0, 1000, (64,)), torch.arange(0, 64, 4)
    cuda = _predict(lambda i, o: bag(i, o).sum(), idx, off, device="cuda", training=True)
    cpu = _predict(lambda i, o: bag(i, o).sum(), idx, off, device="cpu", training=True)
    assert cuda.extern - cpu.extern == 30


def test_slices_of_an_inlined_node_fuse_only_under_buffer_overlap_scoring():
    """q, k and v: three transposed slices of one projection plus its bias. Their memory reads differ (the
    slice is in the index), so without buffer-overlap scoring (the H200's torch 2.11) they are three
    kernels; with it (torch 2.13) one."""
    from optimus_bridge import inductor_fusion

    w, b = torch.randn(96, 32), torch.randn(96)

    def qkv(x):
        y = x @ w.t() + b
        q, k, v = y.split(32, -1)
        return q.t().contiguous(), k.t().contiguous(), v.t().contiguous()
    old = inductor_fusion.OVERLAP_SCORING
    try:
        inductor_fusion.OVERLAP_SCORING = False
        apart = _predict(qkv, torch.randn(64, 32), device="cuda")
        inductor_fusion.OVERLAP_SCORING = True
        together = _predict(qkv, torch.randn(64, 32), device="cuda")
    finally:
        inductor_fusion.OVERLAP_SCORING = old
    assert (apart.fused, together.fused) == (3, 1)


def test_cuda_a_transposed_pointwise_buffer_and_its_row_reduction_are_two_kernels():
    """A pointwise result stored column-major (a graph output) and a sum over its rows: on CUDA the two loop
    orders differ, two kernels; stored row-major, the same pair is one kernel (16384 rows: no split
    reduction)."""
    def f(x):
        y = torch.tanh(x.t() + 1)  # x.t(): the result keeps the column-major layout
        return y, y.sum(-1)
    x = torch.randn(64, 16384)
    assert _predict(f, x, device="cuda").fused == 2
    x = torch.randn(16384, 64)
    assert _predict(lambda x: (lambda y: (y, y.sum(-1)))(torch.tanh(x + 1)), x, device="cuda").fused == 1


def test_cuda_float32_attention_is_not_fused_without_tf32():
    """Inductor's attention fusion refuses float32 on CUDA unless TF32 is on; a graph traced on CPU and
    predicted for CUDA keeps the two bmm and the softmax (the H200's DHEN attention), on CPU it fuses."""
    def attn(q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1) / 4.0, -1) @ v
    q = torch.randn(8, 4, 32, 16)
    cuda = _predict(attn, q, q.clone(), q.clone(), device="cuda")
    assert cuda.extern == 2 and cuda.fused >= 1
    cpu = _predict(attn, q, q.clone(), q.clone(), device="cpu")
    assert cpu.extern == 1


def _with_overlap_scoring(on: bool, fn, *inputs, device="cuda"):
    from optimus_bridge import inductor_fusion

    old = inductor_fusion.OVERLAP_SCORING
    try:
        inductor_fusion.OVERLAP_SCORING = on
        return _predict(fn, *inputs, device=device)
    finally:
        inductor_fusion.OVERLAP_SCORING = old


@pytest.mark.slow
def test_cuda_cat_writers_are_a_kernel_each_without_buffer_overlap_scoring():
    """The plain-Inductor launch-bound layer in small: 10 branches (mm, then tanh written into a stack), the
    stack unbound and concatenated again (ConcatKernels of more than 8 inputs), plus a residual add. Without
    buffer-overlap scoring (the H200's torch 2.11: 259 kernels measured for 32 branches x 2 layers) each
    writer stores its own buffer: 10 tanh writers, 10 copies of the stack's slices and the add are 21
    kernels, no copy fused with the writer of its slice; with it (torch 2.13) the writers and the copies fuse
    into one kernel, the add reads the whole cat: 2."""
    ws = [torch.randn(8, 8) for _ in range(10)]

    def layer(x):
        ys = [torch.tanh(t @ w) for t, w in zip(x.split(8, 1), ws)]
        return torch.cat(torch.unbind(torch.stack(ys, 1), 1), 1) + x
    x = torch.randn(64, 80)
    apart = _with_overlap_scoring(False, layer, x)
    together = _with_overlap_scoring(True, layer, x)
    assert apart.extern == together.extern == 10
    assert (apart.fused, together.fused) == (21, 2)


def test_cuda_copies_of_graph_inputs_into_a_cat_are_one_foreach_kernel():
    """A cat of more than 8 slices of a graph input: ``ConcatKernel`` registers the copies as one foreach
    list (the H200's ``triton_for_fused``), with or without buffer-overlap scoring."""
    x = torch.randn(64, 80)
    f = lambda x: torch.cat([t.t() for t in x.split(8, 1)], 0)  # noqa: E731 - 10 transposed copies
    assert _with_overlap_scoring(False, f, x).fused == 1
    assert _with_overlap_scoring(True, f, x).fused == 1
