"""Tests of the test oracle itself (tests/oracle.py): it passes a result that only reorders a float
sum, and fails a wrong value, a gradient that is zeros where eager's is None (and the reverse), a
requires_grad that differs from eager's, an extra alias. Each runs the oracle on hand-made "ours"
results next to a real eager run, so a broken oracle fails here rather than silently passing
everything elsewhere."""

from __future__ import annotations

import pytest
import torch

import oracle


def _sum_rows(x):
    return x.sum(1)


def _reassociated_sum_rows(x):
    """The same sum in another order: pairwise over 7 chunks, then the partial sums."""
    return torch.stack([c.sum(1) for c in x.chunk(7, 1)], 1).sum(1)


def _big_rows(seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(64, 4096, generator=g) * 1000).to(dtype)


def test_reassociated_sum_passes_where_a_fixed_tolerance_fails():
    """(a + b) + c against a + (b + c), elementwise (IEEE, so the same on every machine): large terms that
    nearly cancel differ by an ulp of the terms, far more than assert_close's tolerance for the small
    result (the CI failure's shape), yet ours is as close to the float64 sum as eager's."""
    n = 1000
    a = torch.linspace(-3000, 3000, n)
    b = torch.linspace(-1, 1, n) * 0.37
    c = -a * 0.999

    def eager_fn(a, b, c):
        return (a + b) + c

    ref = oracle.float64_reference(eager_fn, [a, b, c])
    eager, ours = eager_fn(a, b, c), a + (b + c)
    assert not torch.equal(eager, ours)  # the orders really differ
    with pytest.raises(AssertionError):
        torch.testing.assert_close(ours, eager)
    oracle.assert_values(ours, eager, ref.outputs[0])


def test_reassociated_row_sums_pass():
    x = _big_rows()
    ref = oracle.float64_reference(_sum_rows, [x])
    oracle.assert_values(_reassociated_sum_rows(x), _sum_rows(x), ref.outputs[0])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reassociated_sum_passes_in_low_precision(dtype):
    x = _big_rows(dtype=dtype) / 1000
    ref = oracle.float64_reference(_sum_rows, [x])
    oracle.assert_values(_reassociated_sum_rows(x), _sum_rows(x), ref.outputs[0])


def test_wrong_by_1e_3_relative_fails():
    x = _big_rows(1)
    ref = oracle.float64_reference(_sum_rows, [x])
    eager = _sum_rows(x)
    ours = eager.clone()
    ours[17] *= 1 + 1e-3
    with pytest.raises(AssertionError, match="from the float64 reference"):
        oracle.assert_values(ours, eager, ref.outputs[0])


def test_wrong_bf16_value_fails():
    x = _big_rows(2, torch.bfloat16) / 1000
    ref = oracle.float64_reference(_sum_rows, [x])
    eager = _sum_rows(x)
    ours = eager.clone()
    ours[3] += 0.25 * float(eager.abs().max())
    with pytest.raises(AssertionError):
        oracle.assert_values(ours, eager, ref.outputs[0])


def test_nan_in_ours_fails_and_shared_nan_passes():
    x = torch.randn(5, 6)
    x[2, 3] = float("nan")
    ref = oracle.float64_reference(_sum_rows, [x])
    eager = _sum_rows(x)
    oracle.assert_values(eager.clone(), eager, ref.outputs[0])
    ours = eager.clone()
    ours[0] = float("nan")
    with pytest.raises(AssertionError):
        oracle.assert_values(ours, eager, ref.outputs[0])


def _two_linears(x, w1, w2):
    return x @ w1, (x @ w2).detach()


def _run(fn, inputs, grad=True):
    ref_in = [t.detach().clone().requires_grad_(grad) for t in inputs]
    opt_in = [t.detach().clone().requires_grad_(grad) for t in inputs]
    ref = oracle.float64_reference(fn, ref_in)
    return ref, fn(*ref_in), ref_in, opt_in


def test_zeros_where_eager_gradient_is_none_fails():
    """w2 reaches only a detached output: eager's gradient is None; ours giving zeros is wrong (an
    optimizer with weight decay would update w2)."""
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn(3, 4, generator=g), torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g)]
    ref, expected, ref_in, opt_in = _run(_two_linears, inputs)
    good = _two_linears(*opt_in)
    oracle.compare_runs(good, expected, opt_in, ref_in, ref)  # the same function passes
    bad_in = [t.detach().clone().requires_grad_() for t in inputs]
    bad = (bad_in[0] @ bad_in[1] + 0 * bad_in[2].sum(), (bad_in[0] @ bad_in[2]).detach())
    with pytest.raises(AssertionError, match="eager has none"):
        oracle.compare_runs(bad, expected, bad_in, ref_in, ref)


def test_none_where_eager_gradient_is_zeros_fails():
    """Eager's gradient of w2 is zeros (w2 is multiplied by 0, still connected); ours cutting w2 off
    (None) is wrong."""
    def f(x, w1, w2):
        return x @ w1 + 0 * (x @ w2)

    g = torch.Generator().manual_seed(1)
    inputs = [torch.randn(3, 4, generator=g), torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g)]
    ref, expected, ref_in, opt_in = _run(f, inputs)
    ours = opt_in[0] @ opt_in[1]
    with pytest.raises(AssertionError, match="missing"):
        oracle.compare_runs(ours, expected, opt_in, ref_in, ref)


def test_requires_grad_mismatch_fails():
    """Eager's second output is detached; ours requiring grad there (a batch member leaking
    requires_grad) is wrong, even with equal values and gradients."""
    g = torch.Generator().manual_seed(2)
    inputs = [torch.randn(3, 4, generator=g), torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g)]
    ref, expected, ref_in, opt_in = _run(_two_linears, inputs)
    ours = (opt_in[0] @ opt_in[1], opt_in[0].detach() @ opt_in[2].detach() + 0 * opt_in[1].sum())
    with pytest.raises(AssertionError, match="requires_grad=True, eager's is False"):
        oracle.compare_runs(ours, expected, opt_in, ref_in, ref)


def test_reassociated_gradient_passes():
    """Two linears that share an input, fused into one matmul (what batch_linear_lhs does): the input
    gradient sums the two contributions in another order; the oracle accepts it."""
    g = torch.Generator().manual_seed(3)
    inputs = [torch.randn(64, 512, generator=g) * 30, torch.randn(512, 256, generator=g) * 30,
              torch.randn(512, 256, generator=g) * 30]

    def eager(x, w1, w2):
        return x @ w1, x @ w2

    def fused(x, w1, w2):
        return [t.contiguous() for t in (x @ torch.cat([w1, w2], 1)).split(256, 1)]

    ref, expected, ref_in, opt_in = _run(eager, inputs)
    oracle.compare_runs(fused(*opt_in), expected, opt_in, ref_in, ref)


def test_extra_alias_fails():
    """Eager returns a copy; ours returning the input itself would let a later write reach the input."""
    x = torch.randn(4)
    ref, expected, ref_in, opt_in = _run(lambda t: t.clone(), [x], grad=False)
    with pytest.raises(AssertionError, match="alias"):
        oracle.compare_runs(opt_in[0], expected, opt_in, ref_in, ref, grad=False)


def test_mutation_and_aliased_inputs_run_in_float64():
    """A function that mutates one of two inputs sharing a storage: the float64 run keeps them sharing
    one storage, so the other input sees the write (as in eager) and the reference is exact."""
    def f(a, b):
        a.add_(1)
        return b * 2

    base = torch.randint(-9, 9, (6,)).float()  # exact in float32: the float64 run must agree bit for bit
    a, b = base[:4], base[2:]
    ref = oracle.float64_reference(f, [a, b])
    assert ref.why_not is None
    expected = f(a, b)
    assert torch.equal(ref.outputs[0], expected.double())
    assert torch.equal(ref.of(a), a.double())


def test_dtype_specific_function_falls_back_to_eager():
    """A function with a float32 constant in a matmul cannot run in float64: the oracle says why and
    compares with eager directly (counted)."""
    w = torch.randn(4, 3)

    def f(x):
        return x @ w

    x = torch.randn(2, 4)
    ref = oracle.float64_reference(f, [x])
    assert ref.outputs is None and ref.why_not
    before = sum(oracle.FALLBACKS.values())
    oracle.assert_values(f(x), f(x), None)
    assert sum(oracle.FALLBACKS.values()) == before + 1
    with pytest.raises(AssertionError):
        oracle.assert_values(f(x) + 1e-3, f(x), None)


def test_module_parameters_run_in_float64():
    """An nn.Module's parameters are widened in a copy (the module itself is left as it was), and their
    float64 copies can be looked up for gradients."""
    m = torch.nn.Linear(8, 3)
    x = torch.randn(5, 8)
    ref = oracle.float64_reference(m, [x])
    assert ref.why_not is None and ref.outputs[0].dtype == torch.float64
    assert m.weight.dtype == torch.float32
    assert ref.of(m.weight).dtype == torch.float64
    torch.testing.assert_close(ref.outputs[0].float(), m(x))


def _cast_sum_rows(x):
    """A float32 function with a bfloat16 step inside (the fuzzer's ``casts``)."""
    return x.to(torch.bfloat16).sum(1).float()


def _cast_reassociated_sum_rows(x):
    return torch.stack([c.sum(1) for c in x.to(torch.bfloat16).chunk(7, 1)], 1).sum(1).float()


def test_casts_inside_run_in_float64():
    """A cast inside the function runs as a cast to float64 (``oracle.widened``), so a function with a
    bf16 step still has a float64 reference: a bf16 sum in another order passes (eager is as far from the
    reference), and an error of 10% of the largest value fails."""
    x = _big_rows(3)[:, :64] / 1000
    ref = oracle.float64_reference(_cast_sum_rows, [x])
    assert ref.why_not is None and ref.outputs[0].dtype == torch.float64
    eager = _cast_sum_rows(x)
    oracle.assert_values(_cast_reassociated_sum_rows(x), eager, ref.outputs[0])
    ours = eager.clone()
    ours[5] += 0.1 * float(eager.abs().max())
    with pytest.raises(AssertionError, match="from the float64 reference"):
        oracle.assert_values(ours, eager, ref.outputs[0])


def test_widened_keeps_integer_casts():
    """Only floating dtypes widen: an integer cast inside stays one."""
    with oracle.widened():
        y = torch.tensor([1.7, -2.2], dtype=torch.float64).to(torch.int32)
        z = torch.zeros(2, dtype=torch.float16)
    assert y.dtype == torch.int32 and y.tolist() == [1, -2]
    assert z.dtype == torch.float64
