"""The differential-test oracle: is an optimized run as right as eager's, fairly to reassociation?

A rewrite that fuses two linears reading one input, batches layer norms, or folds a split into a
matmul reorders float sums, so its results differ from eager's in the last bits, and by more than a
fixed ``assert_close`` tolerance wherever the sums are long or large (``batch_linear_lhs``'s input
gradient: 1.6e-5 against an allowed 1e-5). Neither side is "the" answer; both are roundings of the
exact result. So the oracle recomputes the eager function in float64 (the *reference*) and asks that
ours be no further from it than eager is, by a small factor:

    max |ours - ref64|  <=  K * max |eager - ref64|  +  ULPS * eps(dtype) * max |ref64|

over every element of a floating output, input after the call, or gradient, where eager's value and
the reference are finite (elsewhere ours must hold eager's NaN / inf). ``K = 4``: two roundings of
the same sum in different orders have errors of the same size, and the larger of the two over a
tensor is rarely more than twice the other; 4 leaves room without hiding a real bug, whose error
(a wrong operand, a dropped term: relative 1e-3 or more) is orders of magnitude above eager's.
``ULPS = 4`` units in the last place of the largest reference value: the floor for outputs where eager
happens to be exact (a copy, a sum of few terms) while ours rounds once more. bfloat16 and float16
get the same rule with their own eps; the float64 reference makes it as fair for them as for float32.

Exact checks (no tolerance): types, shapes, dtypes, strides where eager's output has more than one
element (dims of size 1 excluded: their stride is unobservable), integer and bool values,
``requires_grad`` of every output, each gradient's None-ness (eager None -> ours None; eager a
tensor, zeros included -> ours a tensor), and aliasing among inputs and outputs (:func:`alias_pairs`).

Fallback, where no float64 reference is fair: when the function cannot run on float64 copies of its
inputs (it raises: a dtype-specific op such as a matmul with a float32 constant, an op without a
float64 kernel), when its float64 run returns an output of another dtype, shape or structure than
float64 (casts inside run as casts to float64: :class:`widened`), and for outputs that eager itself computes
in float64 or complex (there is no wider reference), the values are compared with eager's directly by
``torch.testing.assert_close`` at its defaults for the dtype (bf16/fp16 gradients: rtol 4e-2,
atol 1e-2, as before). Each fallback is counted in :data:`FALLBACKS` by reason. Functions that mutate
their inputs run in float64 too (the float64 inputs are mutated the same way and compared after the
call); inputs that share a storage keep sharing one float64 storage, so mutation through one is seen
through the other as in eager. Random ops cannot be reproduced in float64; callers that compare their
values do not use them (the conformance suite's ``values=False``).
"""

from __future__ import annotations

import copy
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch.utils._pytree import tree_leaves

#: ours may be this many times further from the float64 reference than eager (max norm over a tensor)
K = 4.0
#: plus this many units in the last place (of the output's dtype) of the largest |reference| value
ULPS = 4.0

#: reason -> how many comparisons fell back to ``assert_close`` against eager (module docstring)
FALLBACKS: Counter = Counter()
#: the closest call so far: (ours' error / allowed bound, what); printed in pytest's terminal summary
CLOSEST: list = [0.0, ""]

_LOW_PRECISION = (torch.bfloat16, torch.float16)


# -- the float64 reference -------------------------------------------------------------------------

#: floating dtypes a cast inside the function may name; the float64 run casts to float64 instead
_NARROW_FLOATS = (torch.float32, torch.bfloat16, torch.float16)
#: Tensor methods that cast to a fixed floating dtype
_NARROWING_METHODS = {torch.Tensor.float, torch.Tensor.half, torch.Tensor.bfloat16}


class widened(torch.overrides.TorchFunctionMode):
    """Within this mode, every floating dtype named in a torch call (``x.to(torch.bfloat16)``,
    ``torch.zeros(..., dtype=torch.float16)``, ``x.half()``) is float64, so that a function with casts
    inside runs wholly in float64: its float64 run is then a reference for its outputs as for a function
    without casts (eager's error against it includes the roundings of its low-precision steps, which
    ours may make in another order)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _NARROWING_METHODS:
            return args[0].double()
        wide = lambda a: torch.float64 if isinstance(a, torch.dtype) and a in _NARROW_FLOATS else a  # noqa: E731
        return func(*[wide(a) for a in args], **{k: wide(v) for k, v in kwargs.items()})


@dataclass
class Reference:
    """The eager function run on float64 copies of its arguments.

    Attributes:
        outputs: the flat outputs (``tree_leaves``) of the float64 run; None when it could not run.
        why_not: why there is no float64 run (None when there is one).
        copies: ``id`` of an original argument, parameter or buffer -> its float64 copy (after the call:
            mutated as eager mutated the original).
    """

    outputs: list | None = None
    why_not: str | None = None
    copies: dict = field(default_factory=dict)

    def of(self, original) -> torch.Tensor | None:
        """The float64 counterpart of an eager argument or parameter (None if it has none)."""
        return self.copies.get(id(original))

    def grads(self, loss: Callable[[list], torch.Tensor], originals: Sequence) -> list:
        """Gradients of ``loss(outputs)`` (the float64 outputs, flat) with respect to the float64 copies of
        ``originals`` (eager arguments or parameters that require grad): one float64 tensor, or None, per
        original; all None when there is no float64 run (the caller then compares with eager alone)."""
        leaves = [self.of(x) for x in originals]
        if self.outputs is None or not all(isinstance(x, torch.Tensor) and x.requires_grad for x in leaves):
            return [None] * len(originals)
        return list(torch.autograd.grad(loss(self.outputs), leaves, allow_unused=True, retain_graph=True))


def _is_float(t) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point()


def _copies64(args: Sequence) -> list:
    """Float64 copies of ``args`` (other tensors cloned, non-tensors as they are).

    A tensor that requires grad becomes a float64 leaf that requires grad. Others are rebuilt over one
    copy of their storage per storage (widened to float64 where floating), at the same sizes, strides
    and offset, so that inputs that alias in eager alias in the reference too.
    """
    out: list = [None] * len(args)
    bases: dict = {}
    for j, x in enumerate(args):
        if not isinstance(x, torch.Tensor):
            out[j] = x
        elif x.requires_grad or x.numel() == 0 or x.is_sparse or x.layout != torch.strided:
            c = x.detach().clone()
            c = c.double() if c.is_floating_point() else c
            out[j] = c.requires_grad_(x.requires_grad and c.is_floating_point())
        else:
            st = x.untyped_storage()
            key = (st.data_ptr(), x.dtype)
            if key not in bases:
                flat = torch.empty(0, dtype=x.dtype, device=x.device).set_(
                    st, 0, (st.nbytes() // x.element_size(),), (1,)).clone()
                bases[key] = flat.double() if flat.is_floating_point() else flat
            out[j] = bases[key].as_strided(x.shape, x.stride(), x.storage_offset())
    return out


def _module64(m: torch.nn.Module, copies: dict) -> torch.nn.Module:
    """A float64 copy of ``m`` (its floating parameters and buffers widened), recorded in ``copies``."""
    named = dict(m.named_parameters(remove_duplicate=False)) | dict(m.named_buffers(remove_duplicate=False))
    if not any(t.is_floating_point() for t in named.values()):
        return m
    m64 = copy.deepcopy(m).to(torch.float64)
    named64 = dict(m64.named_parameters(remove_duplicate=False)) | dict(m64.named_buffers(remove_duplicate=False))
    for name, t in named.items():
        copies[id(t)] = named64[name]
    return m64


def float64_reference(fn: Callable[..., Any], args: Sequence, module: torch.nn.Module | None = None) -> Reference:
    """Run ``fn(*args)`` on float64 copies of ``args`` (and of ``fn``'s parameters and buffers when it is
    an ``nn.Module``, a GraphModule included). With ``module``, ``fn(module64, *args64)`` runs instead, on
    a float64 copy of ``module`` (for a call that is not ``module(*args)``: keyword arguments, a loss).
    Call it *before* the eager run: it copies the arguments' current values, and the module's state
    before a training-mode forward updates it. The global RNG state is left as it was; warnings of the
    float64 run are suppressed.

    Never raises: a function that cannot run in float64 gives a Reference with ``why_not`` set.
    """
    ref = Reference()
    try:
        args64 = _copies64(args)
        for x, c in zip(args, args64):
            if isinstance(x, torch.Tensor):
                ref.copies[id(x)] = c
        if module is not None:
            m64 = _module64(module, ref.copies)
            run = lambda *a: fn(m64, *a)  # noqa: E731
        else:
            run = _module64(fn, ref.copies) if isinstance(fn, torch.nn.Module) else fn
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings(), widened():
            warnings.simplefilter("ignore")
            ref.outputs = tree_leaves(run(*args64))
    except Exception as exc:  # the function cannot run in float64: compare with eager directly
        ref.outputs, ref.why_not = None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
        FALLBACKS[f"function cannot run in float64 ({ref.why_not})"] += 1
    return ref


# -- values ----------------------------------------------------------------------------------------

def _fallback(actual: torch.Tensor, expected: torch.Tensor, what: str, reason: str, grad: bool) -> None:
    FALLBACKS[reason] += 1
    tol = {"rtol": 4e-2, "atol": 1e-2} if grad and expected.dtype in _LOW_PRECISION else {}
    torch.testing.assert_close(actual, expected, equal_nan=True, **tol,
                               msg=lambda m: f"{what} (against eager: {reason}): {m}")


def assert_values(actual: torch.Tensor, expected: torch.Tensor, ref64, what: str = "output",
                  grad: bool = False, why_not: str = "no reference given", precision=None) -> None:
    """Values of ``actual`` (ours) are as right as ``expected`` (eager's), judged by ``ref64``, the same
    value computed in float64 (or None: no reference); the rule is in the module docstring.

    Shapes must already agree. Integer and bool tensors must be equal. ``grad``: a gradient (only the
    fallback tolerance of bf16/fp16 differs). ``precision``: the coarsest floating dtype the value was
    computed through, when coarser than its own (a float32 gradient that flowed back through float16 outputs):
    the ulp floor is that dtype's. Raises AssertionError with the errors found.
    """
    a, e = actual.detach(), expected.detach()
    if not (e.is_floating_point() or e.is_complex()):
        assert torch.equal(a, e), f"{what}: values differ from eager's ({int((a != e).sum())} of {e.numel()} elements)"
        return
    if e.dtype == torch.float64 or e.is_complex():
        return _fallback(a, e, what, "eager computes in float64 or complex", grad)
    if not isinstance(ref64, torch.Tensor):
        return _fallback(a, e, what, why_not, grad)
    if ref64.shape != e.shape or ref64.dtype != torch.float64:
        return _fallback(a, e, what, "float64 run gave another shape or dtype", grad)
    if e.numel() == 0:
        return
    r, a64, e64 = ref64.detach(), a.double(), e.double()
    special = ~torch.isfinite(e64) | ~torch.isfinite(r)
    if special.any():  # NaN / inf where eager has them: ours must have the same there
        torch.testing.assert_close(a64[special], e64[special], rtol=0, atol=0, equal_nan=True,
                                   msg=lambda m: f"{what}: non-finite values differ from eager's: {m}")
    fin = ~special
    if not fin.any():
        return
    err_a, err_e = (a64 - r).abs()[fin], (e64 - r).abs()[fin]
    eps = max(torch.finfo(e.dtype).eps, torch.finfo(precision).eps if precision is not None else 0.0)
    floor = ULPS * eps * float(r.abs()[fin].max())
    bound = K * float(err_e.max()) + floor
    worst = float(err_a.max())
    if bound > 0 and CLOSEST[0] < worst / bound <= 1:
        CLOSEST[:] = [worst / bound, f"{what} ({e.dtype}, {tuple(e.shape)})"]
    if not worst <= bound:  # also catches NaN in ours
        idx = tuple(int(i) for i in torch.nonzero(fin)[int(torch.nan_to_num(err_a, nan=float("inf")).argmax())])
        raise AssertionError(
            f"{what}: ours is {worst:.3g} from the float64 reference (at index {idx}: ours {float(a64[idx]):.9g}, "
            f"eager {float(e64[idx]):.9g}, float64 {float(r[idx]):.9g}); eager is at most {float(err_e.max()):.3g} "
            f"from it; allowed {K:g} x that + {ULPS:g} ulp of max|ref| = {bound:.3g} "
            f"({e.dtype if precision is None else f'{e.dtype}, through {precision}'})")


def _observable_strides(t: torch.Tensor) -> tuple:
    return tuple(s for s, n in zip(t.stride(), t.shape) if n != 1)


def assert_same_tensor(actual, expected, what: str = "output", ref64=None, why_not: str = "no reference given") -> None:
    """Same type, shape, dtype, (observable) strides, and values by :func:`assert_values` against the
    float64 reference ``ref64`` (None: ``assert_close`` against eager, counted as a fallback). A
    non-tensor must be equal."""
    if not isinstance(expected, torch.Tensor):
        assert actual == expected, f"{what}: {actual!r} != {expected!r}"
        return
    assert isinstance(actual, torch.Tensor), f"{what}: expected a tensor, got {type(actual).__name__}"
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    if expected.numel() > 1:
        assert _observable_strides(actual) == _observable_strides(expected), (
            f"{what}: strides {actual.stride()} != eager's {expected.stride()} (shape {tuple(expected.shape)})")
    assert_values(actual, expected, ref64, what, why_not=why_not)


# -- aliasing --------------------------------------------------------------------------------------

def _storage(t):
    if not isinstance(t, torch.Tensor) or t.numel() == 0:
        return None
    return t.untyped_storage().data_ptr()


def alias_pairs(outs: Sequence, ins: Sequence) -> set:
    """{("in", j, i)}: output i shares storage with input j; {("out", k, i)}: with output k < i."""
    pairs = set()
    for i, o in enumerate(outs):
        so = _storage(o)
        if so is None:
            continue
        for j, x in enumerate(ins):
            if _storage(x) == so:
                pairs.add(("in", j, i))
        for k in range(i):
            if _storage(outs[k]) == so:
                pairs.add(("out", k, i))
    return pairs


def assert_same_aliasing(act_flat, exp_flat, opt_in, ref_in, lost: bool = True) -> None:
    """Ours' outputs share storage with inputs or other outputs only where eager's do; and (``lost``)
    wherever eager's output is a view of an input, or overlaps another output, ours is too (a write into
    it must still reach the other; two outputs that share a storage without overlapping are exempt)."""
    from optimus_bridge.overlap import may_overlap as _may_overlap

    extra = alias_pairs(act_flat, opt_in) - alias_pairs(exp_flat, ref_in)
    assert not extra, f"outputs alias where eager's do not: {sorted(extra)}"
    if lost:
        gone = {p for p in alias_pairs(exp_flat, ref_in) - alias_pairs(act_flat, opt_in)
                if p[0] == "in" or _may_overlap(exp_flat[p[1]], exp_flat[p[2]])}
        assert not gone, f"eager's outputs are views of inputs or overlap where the optimized ones do not: {sorted(gone)}"


# -- gradients -------------------------------------------------------------------------------------

def assert_same_grads(act_flat, exp_flat, opt_in, ref_in, ref: Reference | None = None, seed: int = 1234) -> None:
    """Gradients of every input of ``ref_in`` that requires grad (and its counterpart in ``opt_in``)
    through one random weighted sum of the outputs that require grad in eager, compared exactly in
    None-ness, shape and dtype and by :func:`assert_values` in value (reference: the same weighted sum
    of ``ref``'s float64 outputs, differentiated with respect to the float64 copies of the inputs).

    ``requires_grad`` of the outputs is checked by :func:`compare_runs`; here only that ours' outputs
    are differentiable where eager's are.
    """
    leaves = [i for i, x in enumerate(ref_in) if isinstance(x, torch.Tensor) and x.requires_grad]
    diff = [i for i, e in enumerate(exp_flat) if isinstance(e, torch.Tensor) and e.requires_grad]
    if not leaves or not diff:
        return
    g = torch.Generator().manual_seed(seed)
    weights = [torch.randn(exp_flat[i].shape, generator=g).to(exp_flat[i].dtype) for i in diff]
    for i in diff:
        assert isinstance(act_flat[i], torch.Tensor) and act_flat[i].requires_grad, f"output {i} lost requires_grad"
    loss_e = sum((exp_flat[i].float() * w.float()).sum() for i, w in zip(diff, weights))
    loss_a = sum((act_flat[i].float() * w.float()).sum() for i, w in zip(diff, weights))
    ge = torch.autograd.grad(loss_e, [ref_in[i] for i in leaves], allow_unused=True, retain_graph=True)
    ga = torch.autograd.grad(loss_a, [opt_in[i] for i in leaves], allow_unused=True)
    gr = _grads64(ref, exp_flat, diff, weights, [ref_in[i] for i in leaves])
    for k, (i, a, e) in enumerate(zip(leaves, ga, ge)):
        if e is None:
            assert a is None, f"grad of input {i}: eager has none (not connected to the outputs), ours is a tensor"
            continue
        assert a is not None, f"grad of input {i} is missing (eager's is a tensor)"
        assert a.shape == e.shape and a.dtype == e.dtype, f"grad of input {i}: {a.shape} {a.dtype} vs {e.shape} {e.dtype}"
        assert_values(a, e, gr[k], f"grad of input {i}", grad=True)


def _grads64(ref: Reference | None, exp_flat, diff, weights, leaves) -> list:
    """The float64 gradients of the weighted sum, one per leaf (None where there is no reference)."""
    none = [None] * len(leaves)
    if ref is None or ref.outputs is None or len(ref.outputs) != len(exp_flat):
        return none
    outs = [ref.outputs[i] for i in diff]
    leaves64 = [ref.of(x) for x in leaves]
    if not all(_is_float(o) and o.requires_grad and o.dtype == torch.float64 for o in outs):
        return none
    if not all(isinstance(x, torch.Tensor) and x.requires_grad for x in leaves64):
        return none
    loss = sum((o * w.double()).sum() for o, w in zip(outs, weights))
    try:
        return list(torch.autograd.grad(loss, leaves64, allow_unused=True, retain_graph=True))
    except RuntimeError:
        return none


# -- one run against another -----------------------------------------------------------------------

def compare_runs(actual, expected, opt_in: Sequence, ref_in: Sequence, ref: Reference | None = None, *,
                 grad: bool = True, values: bool = True, lost_aliases: bool = True) -> None:
    """Assert that ours (``actual`` outputs, ``opt_in`` arguments after the call) matches eager
    (``expected``, ``ref_in``), judged by the float64 reference ``ref`` (:func:`float64_reference` of
    the eager function on ``ref_in``, taken before the eager run; None: compare with eager directly).

    Checks, in order: number of outputs; each output's type, shape, dtype, strides, value and
    ``requires_grad``; each tensor argument after the call (in-place mutations); aliasing
    (:func:`assert_same_aliasing`); gradients (:func:`assert_same_grads`) when ``grad``. ``values=False``
    (random ops): shapes, dtypes and requires_grad only, no gradients.
    """
    exp_flat, act_flat = tree_leaves(expected), tree_leaves(actual)
    assert len(act_flat) == len(exp_flat), f"{len(act_flat)} outputs, eager has {len(exp_flat)}"
    ref_out = ref.outputs if ref is not None and ref.outputs is not None and len(ref.outputs) == len(exp_flat) else None
    for i, (a, e) in enumerate(zip(act_flat, exp_flat)):
        if values:
            assert_same_tensor(a, e, f"output {i}", ref_out[i] if ref_out is not None else None,
                               why_not="no float64 run" if ref is None or ref.outputs is None else
                               "the float64 run returned another number of outputs")
        elif isinstance(e, torch.Tensor):
            assert isinstance(a, torch.Tensor) and (a.shape, a.dtype) == (e.shape, e.dtype), (
                f"output {i}: {getattr(a, 'shape', a)} {getattr(a, 'dtype', '')} vs {e.shape} {e.dtype}")
        if isinstance(e, torch.Tensor):
            assert a.requires_grad == e.requires_grad, (
                f"output {i}: requires_grad={a.requires_grad}, eager's is {e.requires_grad}")
    if values:
        for j, (a, e) in enumerate(zip(opt_in, ref_in)):
            if isinstance(e, torch.Tensor):
                assert_same_tensor(a, e, f"input {j} after the call", ref.of(e) if ref is not None else None,
                                   why_not="not an argument of the eager function (unused by the graph)")
    assert_same_aliasing(act_flat, exp_flat, opt_in, ref_in, lost=lost_aliases)
    if grad and values:
        assert_same_grads(act_flat, exp_flat, opt_in, ref_in, ref)
