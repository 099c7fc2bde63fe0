"""The differential fuzzer: random programs over the whole vocabulary, optimized by each strategy and
compared with eager, with every outcome classified.

A program is Python source generated from a seed (:class:`FuzzGen`, an extension of
:class:`test_fuzz_horizontal.HGen`, itself of :class:`test_fuzz.Gen`): split / chunk / unbind /
tensor_split / cat / stack / slicing / views, pointwise unary and binary ops, groups of identical ops,
F.linear and F.layer_norm with weights passed as inputs (some requiring grad, like parameters), and

* in-place ops (``add_``, ``mul_``, ``copy_``, ``relu_``, ``fill_`` through a view) on inputs and
  intermediates, where eager allows them (generation runs on meta tensors with autograd, so an in-place
  op eager would refuse is dropped);
* aliased inputs: two or three graph inputs that are views of one tensor (overlapping or not);
* grad-mode regions: ``with torch.no_grad():`` blocks and ``.detach()``;
* mixed dtypes: fp32 / bf16 / fp16 inputs and casts between them;
* requires_grad on some inputs only;
* symbolic sizes: capture with ``dynamic=True``, some ops reading ``v.shape[d]``.

:func:`run_program` captures the program (dynamo for ``pre_grad``; dynamo and AOTAutograd for
``post_grad``, forward and backward graphs), optimizes it with each strategy (``optimize(...,
level=...)``), runs the optimized and the unoptimized graph on fresh copies of the inputs, and compares
(:func:`compare`): values, dtypes, shapes and observable strides of outputs (``conftest.assert_same_tensor``),
inputs after the call (mutations), aliasing among inputs and outputs (``conftest.alias_pairs``),
``requires_grad`` of every output, and gradients of every leaf, where None must stay None and a tensor must
stay a tensor. Each strategy gets an :class:`Outcome`: ``ok``, ``wrong`` (with the check that failed),
``crash`` (``optimize`` raised, or its graph raised where eager did not), ``fallback`` (``report.fallback``,
bucketed by cause, :func:`fallback_cause`), or ``invalid`` (the program itself failed in eager or capture:
a generator limitation, not counted).

Every program prints as a paste-able script (:meth:`Program.script`). The quick profile runs in CI
(tests/test_fuzz_profile.py), the long one by hand: ``python bench/fuzz.py --programs 10000 --jobs 8``.
"""

from __future__ import annotations

import random
import re
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.utils._pytree import tree_leaves

import optimus_eq
from conftest import _gm_args, assert_same_tensor
from oracle import _copies64, _observable_strides, alias_pairs, assert_values, widened
from optimus_bridge.overlap import may_overlap as _may_overlap
from test_fuzz_horizontal import HGen, SMALL

#: post-grad horizontal patterns with groups from 2 members (the fuzzer's ``pattern_options`` at post-grad)
SMALL_POST_GRAD = {name: {"min_fuse_set_size": 2} for name in (
    "batch_linear_post_grad", "batch_aten_tanh", "batch_aten_sigmoid", "batch_aten_relu", "batch_aten_add",
    "batch_aten_sub", "batch_aten_div", "batch_aten_mul")}
DTYPES = {torch.float32: "torch.float32", torch.bfloat16: "torch.bfloat16", torch.float16: "torch.float16"}


# -- programs --------------------------------------------------------------------------------------

@dataclass
class Program:
    """One generated program: ``f`` (the function under test) and ``make_inputs`` (fresh arguments and the
    leaves whose gradients are compared), as source."""

    seed: int
    level: str                 # "pre_grad" or "post_grad"
    dynamic: bool
    f_src: str
    inputs_src: str
    features: frozenset        # "aliased_inputs", "mutation", "no_grad", "detach", "mixed_dtypes", ...
    pattern_options: dict | None = None

    def compile(self) -> tuple[Callable, Callable]:
        ns: dict = {"torch": torch}
        exec(self.f_src + "\n" + self.inputs_src, ns)  # noqa: S102 -- generated test program
        return ns["f"], ns["make_inputs"]

    def script(self, strategy: str = "eqsat") -> str:
        """A script that reruns this program (run from the repository root with
        ``PYTHONPATH=src:bridge:bench:tests``)."""
        return (f"# optimus-eq fuzz program: seed {self.seed}, level {self.level}, dynamic={self.dynamic}, "
                f"features {sorted(self.features)}\nimport torch\n\n{self.f_src}\n{self.inputs_src}\n"
                f"if __name__ == '__main__':\n    from fuzzing import run_program\n"
                f"    print(run_program(f, make_inputs, [{strategy!r}], level={self.level!r}, "
                f"dynamic={self.dynamic}, pattern_options={self.pattern_options!r}))\n")


class FuzzGen(HGen):
    """:class:`test_fuzz_horizontal.HGen` (split/cat/views, op groups, linears, layer norms) plus in-place
    ops, aliased inputs, grad-mode regions, casts, per-input requires_grad and symbolic-size ops.

    Shapes are tracked on the meta device with autograd (``requires_grad`` inputs), so an op that eager
    would reject (an in-place op on a leaf that requires grad, or on a view of one) raises here and is
    dropped, with every line and binding it made."""

    def __init__(self, seed: int, level: str = "pre_grad", dynamic: bool = False, features: dict | None = None):
        super().__init__(seed)
        self.level, self.dynamic = level, dynamic
        r = self.r
        f = {"aliased_inputs": r.random() < 0.25, "mutation": r.random() < 0.4, "grad_regions": r.random() < 0.35,
             "mixed_dtypes": r.random() < 0.25, "some_requires_grad": r.random() < 0.5, "grad": r.random() < 0.75}
        f.update(features or {})
        self.want = f
        self.used: set[str] = set()
        self.alias_src: list[str] = []   # make_inputs lines of aliased inputs
        self.leaves: list[str] = []      # inputs (or bases) that require grad
        self.extra_outs: list[str] = []  # results an op wants returned

    # -- inputs --
    def _input(self, shape, dtype, transposed=False, requires_grad=None) -> str:
        if requires_grad is None:
            requires_grad = self.want["grad"] and (not self.want["some_requires_grad"] or self.r.random() < 0.6)
        name = super()._input(shape, dtype, transposed)
        self.inputs_[-1] = (*self.inputs_[-1], requires_grad)
        if requires_grad:
            self.env[name] = self.env[name].detach().requires_grad_(True)
            self.leaves.append(name)
        return name

    def _aliased_inputs(self, dtype) -> None:
        """Two or three inputs that are views of one base tensor (which no one requires grad of)."""
        r = self.r
        rows, cols = r.choice([2, 3, 4, 6]), r.choice([2, 4, 6])
        base = torch.empty((rows, cols), device="meta", dtype=dtype)
        b = f"b{len(self.alias_src)}"
        views = [("{b}", lambda t: t), ("{b}[:, :%d]" % (cols // 2), lambda t: t[:, :cols // 2]),
                 ("{b}[:, %d:]" % (cols // 2), lambda t: t[:, cols // 2:]), ("{b}[1:]", lambda t: t[1:]),
                 ("{b}.t()", lambda t: t.t()), ("{b}.view(-1)", lambda t: t.view(-1)),
                 ("{b}[0]", lambda t: t[0])]
        picks = r.sample(views, r.randint(2, 3))
        self.alias_src.append(f"    {b} = torch.randn({(rows, cols)}, generator=g).to({DTYPES[dtype]})")
        for src, view in picks:
            name = f"x{len(self.inputs_)}"
            self.inputs_.append((name, None, dtype, False, False))
            self.env[name] = view(base)
            self.alias_src.append(f"    {name} = {src.format(b=b)}")
        self.used.add("aliased_inputs")

    def inputs_source(self) -> str:
        lines = ["def make_inputs():", f"    g = torch.Generator().manual_seed({self.r.randrange(2**31)})"]
        alias = iter(self.alias_src)
        names = []
        for name, shape, dt, transposed, rg in self.inputs_:
            names.append(name)
            if shape is None:  # an aliased input: its line (and its base's) in order
                for line in alias:
                    lines.append(line)
                    if line.startswith(f"    {name} = "):
                        break
                continue
            rev = tuple(reversed(shape)) if transposed else tuple(shape)
            expr = f"torch.randn({rev}, generator=g).to({DTYPES[dt]})"
            if transposed:
                expr += f".permute({tuple(reversed(range(len(shape))))})"
            if rg:
                expr += ".requires_grad_()"
            lines.append(f"    {name} = {expr}")
        lines.append(f"    return [{', '.join(names)}], [{', '.join(self.leaves)}]")
        return "\n".join(lines) + "\n"

    # -- ops --
    def op_mutate(self):
        """An in-place op on an input, a piece or a result (dropped where eager refuses it)."""
        v = self.r.choice(self.tensors(0))
        s, roll = self.shape(v), self.r.random()
        if roll < 0.3:
            self.emit(f"{v}.add_(1)")
        elif roll < 0.45:
            self.emit(f"{v}.mul_(-2)")
        elif roll < 0.55:
            self.emit(f"{v}.relu_()")
        elif roll < 0.65 and s and s[0] > 0:
            self.emit(f"{v}.select(0, 0).fill_(3.0)")
        else:
            same = [w for w in self.tensors(0) if self.shape(w) == s and w != v]
            if not same:
                return self.emit(f"{v}.add_(1)")
            self.emit(f"{v}.copy_({self.r.choice(same)})")
        self.used.add("mutation")

    def op_grad_region(self):
        v = self.r.choice(self.tensors())
        t = self.name()
        if self.r.random() < 0.5:
            self.emit(f"{t} = {v}.detach()")
            self.used.add("detach")
        else:
            f = self.r.choice(["torch.tanh({})", "({} * 3)", "{}.relu()", "torch.sigmoid({})"])
            self.emit(f"with torch.no_grad():\n    {t} = {f.format(v)}")
            self.used.add("no_grad")

    def op_cast(self):
        v = self.r.choice(self.tensors())
        dt = self.r.choice([d for d in DTYPES if d != self.env[v].dtype])
        t = self.name()
        self.emit(f"{t} = {v}.to({DTYPES[dt]})" if self.r.random() < 0.7 else
                  f"{t} = {v}.float()" if dt == torch.float32 else f"{t} = {v}.to({DTYPES[dt]}) * 1")
        self.used.add("casts")

    def op_symbolic(self):
        """Ops whose sizes read the tensor's own (symbolic under dynamic=True) shape."""
        v = self.r.choice(self.tensors())
        s = self.shape(v)
        d, t, roll = self.r.randrange(len(s)), self.name(), self.r.random()
        if roll < 0.3 and len(s) >= 2:
            self.emit(f"{t} = {v}.reshape({v}.shape[0], -1)")
        elif roll < 0.6 and s[d] >= 2:
            self.emit(f"{t} = {v}.narrow({d}, 1, {v}.shape[{d}] - 1)")
        elif roll < 0.8:
            self.emit(f"{t} = {v}.view({', '.join(f'{v}.shape[{i}]' for i in range(len(s)))})")
        else:
            self.emit(f"{t} = {v}[{', '.join([':'] * d + [f':{v}.shape[{d}] // 2'])}]")
        self.used.add("symbolic")

    def op_view_chain(self):
        """A chain of views that passes through the tensor's own shape (``v.view(n, -1).view(*own).view(n, -1)``)."""
        v = self.r.choice([w for w in self.tensors(2)] or self.tensors())
        s = self.shape(v)
        own = ", ".join(f"{v}.shape[{i}]" if self.dynamic else str(n) for i, n in enumerate(s))
        head = f"{v}.shape[0]" if self.dynamic else str(s[0])
        t = self.name()
        self.emit(f"{t} = {v}.reshape({head}, -1).view({own}).reshape({head}, -1)")
        self.used.add("view_chain")

    def op_output_views(self):
        """Two views of one intermediate (outputs that may overlap in eager)."""
        v = self.r.choice([w for w in self.tensors() if not w.startswith("x")] or self.tensors())
        a, b = self.name(), self.name()
        s = self.shape(v)
        self.emit(f"{a} = {v}.unsqueeze(0)")
        self.emit(f"{b} = {v}[{s[0] // 2}:]" if s[0] >= 2 else f"{b} = {v}.view(-1)")
        self.used.add("view_outputs")

    def op_alias_hazard(self):
        """Read an aliased input before and after an in-place op on another view of its base (the same
        op both times, so the two reads look alike to an optimizer that assumes inputs never alias)."""
        names = [n for n, shape, *_ in self.inputs_ if shape is None]
        a, b = self.r.sample(names, 2)
        f = self.r.choice(["torch.tanh({})", "({} * 2)", "{}.split(1, 0)[0]", "torch.cat([{0}, {0}], 0)"])
        t1, t2 = self.name(), self.name()
        self.emit(f"{t1} = " + f.format(b))
        self.emit(f"{a}.{self.r.choice(['add_(1)', 'mul_(-2)', 'relu_()'])}")
        self.emit(f"{t2} = " + f.format(b))
        self.extra_outs += [t1, t2]  # returned, so the difference is observable
        self.used.add("mutation")

    def op_detach_member(self):
        """A group of linears, then one member's result detached (its weight gets no gradient in eager)."""
        before = len(self.groups)
        self.op_linears()
        if len(self.groups) > before:
            g = self.groups[-1]
            i = self.r.randrange(len(g))
            t = self.name()
            self.emit(f"{t} = {g[i]}.detach()")
            g[i] = t
            self.used.add("detach")

    def _try(self, op) -> None:
        n_lines, keys, groups, n = len(self.lines), dict(self.env), len(self.groups), self.n
        used = set(self.used)
        try:
            op()
        except (IndexError, ValueError, RuntimeError, TypeError, ZeroDivisionError):
            del self.lines[n_lines:]
            self.env.clear()
            self.env.update(keys)
            del self.groups[groups:]
            self.n, self.used = n, used

    def generate(self) -> Program:
        r, w = self.r, self.want
        dtype = r.choice([torch.float32, torch.float32, torch.bfloat16, torch.float16])
        self.inputs_: list = []  # (name, shape | None, dtype, transposed, requires_grad)
        for _ in range(r.randint(1, 3)):
            rank = r.randint(1, 4)
            shape = tuple(r.choice([1, 2, 3, 4, 6, 8]) if r.random() > 0.05 else 0 for _ in range(rank))
            dt = r.choice(list(DTYPES)) if w["mixed_dtypes"] else dtype
            self._input(shape, dt, transposed=rank >= 2 and r.random() < 0.25)
        if w["aliased_inputs"]:
            self._aliased_inputs(dtype)
        ops = [self.op_split, self.op_split, self.op_cat, self.op_cat, lambda: self.op_cat(True), self.op_group,
               self.op_group, self.op_linears, self.op_linears, self.op_layer_norms, self.op_view2, self.op_unary, self.op_binary,
               self.op_slice, self.op_view, self.op_output_views, self.op_view_chain]
        ops += [self.op_mutate] * (3 if w["mutation"] else 0)
        ops += [self.op_alias_hazard] * (3 if w["aliased_inputs"] else 0)
        ops += [self.op_grad_region, self.op_detach_member] * (2 if w["grad_regions"] else 0)
        ops += [self.op_cast] * (2 if w["mixed_dtypes"] else 0)
        ops += [self.op_symbolic] * (2 if self.dynamic else 0)
        for _ in range(r.randint(5, 16)):
            self._try(r.choice(ops))
        made = [v for v in self.tensors(0) if not v.startswith("x")]
        outs = made[-r.randint(1, 4):] if made else [n for n, *_ in self.inputs_]
        outs += [v for v in self.extra_outs if v in self.env and v not in outs]
        roll = r.random()
        if roll < 0.15:
            outs.append(r.choice(self.tensors(0)))
        elif roll < 0.25:
            outs.append(outs[0])
        elif roll < 0.35:
            outs.append("x0")
        body = "\n".join("    " + line for text in self.lines for line in text.split("\n"))
        f_src = f"def f({', '.join(n for n, *_ in self.inputs_)}):\n{body}\n    return ({', '.join(outs)},)\n"
        if len({dt for _, _, dt, *_ in self.inputs_}) > 1:
            self.used.add("mixed_dtypes")
        if self.leaves and len(self.leaves) < sum(1 for i in self.inputs_ if i[2].is_floating_point):
            self.used.add("some_requires_grad")
        if self.dynamic:
            self.used.add("dynamic")
        opts = SMALL if r.random() < 0.7 else None
        return Program(self.seed_, self.level, self.dynamic, f_src, self.inputs_source(), frozenset(self.used), opts)


def generate(seed: int, level: str | None = None, dynamic: bool | None = None, **features) -> Program:
    """The program of ``seed``: level (``pre_grad`` 80%, ``post_grad`` 20%) and ``dynamic`` (30%) drawn
    from the seed unless given; ``features`` force generator switches (``aliased_inputs``, ``mutation``,
    ``grad_regions``, ``mixed_dtypes``, ``some_requires_grad``, ``grad``)."""
    r = random.Random(seed * 7919 + 17)
    level = level or ("post_grad" if r.random() < 0.2 else "pre_grad")
    dynamic = r.random() < 0.3 if dynamic is None else dynamic
    g = FuzzGen(seed, level, dynamic, features)
    g.seed_ = seed
    return g.generate()


# -- comparison ------------------------------------------------------------------------------------

class Mismatch(AssertionError):
    """A differential check failed: ``kind`` names the check (see :func:`compare`)."""

    def __init__(self, kind: str, msg: str) -> None:
        super().__init__(f"{kind}: {msg}")
        self.kind = kind


def _same(a, e, what: str) -> None:
    try:
        assert_same_tensor(a, e, what)
    except AssertionError as exc:
        msg = str(exc)
        kind = next((k for k in ("expected a tensor", "shape", "dtype", "strides") if f"{what}: {k}" in msg), "values")
        raise Mismatch("values" if kind == "values" else kind.replace("expected a tensor", "type"), msg) from None


def compare(exp_flat, act_flat, ref_in, opt_in, values: bool = True) -> None:
    """Raise :class:`Mismatch` at the first difference between eager's (``exp_flat``, ``ref_in`` after the
    call) and the optimized run's results. Kinds: ``count``, ``type``, ``shape``, ``dtype``, ``strides``,
    ``values`` (outputs), ``mutation`` (an input after the call), ``aliasing_extra`` / ``aliasing_lost``,
    ``requires_grad``."""
    if len(act_flat) != len(exp_flat):
        raise Mismatch("count", f"{len(act_flat)} outputs, eager has {len(exp_flat)}")
    for i, (a, e) in enumerate(zip(act_flat, exp_flat)):
        if values or not isinstance(e, torch.Tensor) or not isinstance(a, torch.Tensor):
            _same(a, e, f"output {i}")
        else:  # values judged against the float64 reference: the rest of assert_same_tensor
            for k in ("shape", "dtype"):
                if getattr(a, k) != getattr(e, k):
                    raise Mismatch(k, f"output {i}: {k} {getattr(a, k)} != eager's {getattr(e, k)}")
            if e.numel() > 1 and _observable_strides(a) != _observable_strides(e):
                raise Mismatch("strides", f"output {i}: strides {a.stride()} != eager's {e.stride()}")
    for j, (a, e) in enumerate(zip(opt_in, ref_in)):
        try:
            assert_same_tensor(a, e, f"input {j} after the call")
        except AssertionError as exc:
            raise Mismatch("mutation", str(exc)) from None
    extra = alias_pairs(act_flat, opt_in) - alias_pairs(exp_flat, ref_in)
    if extra:
        raise Mismatch("aliasing_extra", f"optimized outputs alias where eager's do not: {sorted(extra)}")
    lost = {p for p in alias_pairs(exp_flat, ref_in) - alias_pairs(act_flat, opt_in)
            if p[0] == "in" or _may_overlap(exp_flat[p[1]], exp_flat[p[2]])}
    if lost:
        raise Mismatch("aliasing_lost", f"eager's outputs are views of inputs or overlap where ours do not: {sorted(lost)}")
    for i, (a, e) in enumerate(zip(act_flat, exp_flat)):
        if isinstance(e, torch.Tensor) and a.requires_grad != e.requires_grad:
            raise Mismatch("requires_grad", f"output {i}: requires_grad {a.requires_grad}, eager's {e.requires_grad}")


def compare_grads(ge, ga, ref64: "Reference64 | None" = None, precision=None) -> None:
    """Gradients of the leaves (:func:`_grads` of both runs): None stays None, a tensor stays a tensor
    (kinds ``grad_none_became_tensor``, ``grad_tensor_became_none``), values close (``grad_values``): equal
    to eager's within ``assert_close``'s tolerance, or else as close to ``ref64``'s float64 gradient as
    eager's by :mod:`oracle`'s rule (a batched linear sums its weight gradient in another order).
    ``precision``: the coarsest dtype of the outputs the gradients flow back from (:func:`_precision`)."""
    if ge is None:
        return
    for j, (a, e) in enumerate(zip(ga, ge)):
        if e is None and a is not None:
            raise Mismatch("grad_none_became_tensor", f"leaf {j}: eager's gradient is None, ours a tensor")
        if e is not None and a is None:
            raise Mismatch("grad_tensor_became_none", f"leaf {j}: eager's gradient is a tensor, ours None")
        if e is None:
            continue
        tol = {"rtol": 4e-2, "atol": 1e-2} if e.dtype in (torch.bfloat16, torch.float16) else {}
        try:
            assert a.shape == e.shape and a.dtype == e.dtype, f"{a.shape} {a.dtype} vs {e.shape} {e.dtype}"
            torch.testing.assert_close(a, e, equal_nan=True, **tol)
        except AssertionError as exc:
            g64 = ref64.grads() if ref64 is not None and a.shape == e.shape and a.dtype == e.dtype else None
            if g64 is None or g64[j] is None:
                raise Mismatch("grad_values", f"leaf {j}: {exc}") from None
            try:
                assert_values(a, e, g64[j], f"leaf {j}'s gradient", grad=True, precision=precision)
            except AssertionError as exc64:
                raise Mismatch("grad_values", str(exc64)) from None


# -- outcomes --------------------------------------------------------------------------------------

@dataclass
class Outcome:
    """``kind``: ok / wrong / crash / fallback / invalid; ``cause``: the failed check (wrong), the exception
    (crash, invalid) or the bucketed fallback cause; ``detail``: the full message."""

    kind: str
    cause: str = ""
    detail: str = ""
    reports: list = field(default_factory=list)

    def __repr__(self) -> str:
        return f"Outcome({self.kind}{', ' + self.cause if self.cause else ''})" + (
            f"\n{self.detail}" if self.kind != "ok" else "")


def fallback_cause(text: str) -> str:
    """A fallback message without its particulars (numbers, names, shapes): the bucket it counts in."""
    t = text.split("\n")[0]
    t = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", t)
    t = re.sub(r"\[[^\]]*\]|\([^)]*\)", "(…)", t)
    t = re.sub(r"\d+", "N", t)
    return t[:110]


def _exc_cause(exc: BaseException) -> str:
    return fallback_cause(f"{type(exc).__name__}: {exc}")


def _exc_detail(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])


def _flat(x) -> list:
    return list(tree_leaves(x))


def _optimize(gm, example_inputs, strategy, level, pattern_options, cost_model=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if level == "post_grad" and pattern_options:
            pattern_options = SMALL_POST_GRAD
        return optimus_eq.optimize(gm, example_inputs, strategy=strategy, level=level,
                                   pattern_options=pattern_options, cost_model=cost_model)


def run_program(fn: Callable, make_inputs: Callable, strategies, *, level: str = "pre_grad",
                dynamic: bool = False, pattern_options: dict | None = None, cost_model=None) -> dict:
    """Capture ``fn`` at ``level``, optimize with each strategy, compare with eager: strategy ->
    :class:`Outcome`. ``make_inputs()`` returns fresh ``(arguments, leaves)`` each call. ``cost_model``:
    passed to ``optimize`` (None: its default)."""
    if level == "pre_grad":
        return _run_pre_grad(fn, make_inputs, strategies, dynamic, pattern_options, cost_model)
    return _run_post_grad(fn, make_inputs, strategies, dynamic, pattern_options, cost_model)


def _run_pre_grad(fn, make_inputs, strategies, dynamic, pattern_options, cost_model=None) -> dict:
    graphs, calls = [], []

    def capture(gm, example_inputs):
        graphs.append((gm, example_inputs))

        def call(*args):  # the runtime arguments: concrete ints where the graph has SymInt placeholders
            calls.append(args)
            return gm(*args)

        return call

    trace_in, _ = make_inputs()
    torch._dynamo.reset()
    try:
        torch.compile(fn, backend=capture, dynamic=dynamic, fullgraph=True)(*trace_in)
        assert len(graphs) == 1 and len(calls) == 1, f"dynamo made {len(graphs)} graphs"
        gm, example_inputs = graphs[0]

        def eager():
            ref_in, ref_leaves = make_inputs()
            exp_flat = _flat(gm(*_gm_args(calls[0], trace_in, ref_in)))
            return exp_flat, ref_in, ref_leaves, _grads(exp_flat, ref_leaves)

        reference = eager()
        _check_meta_strides(gm, reference[0])
    except Exception as exc:  # noqa: BLE001 -- the program is invalid (generator's limits), not our bug
        return {s: Outcome("invalid", _exc_cause(exc), _exc_detail(exc)) for s in strategies}
    out = {}
    for strategy in strategies:
        try:
            gm2, report = _optimize(gm, example_inputs, strategy, "pre_grad", pattern_options, cost_model)
        except Exception as exc:  # noqa: BLE001
            out[strategy] = Outcome("crash", "optimize raised " + _exc_cause(exc), _exc_detail(exc))
            continue
        opt_in, opt_leaves = make_inputs()
        try:
            act_flat = _flat(gm2(*_gm_args(calls[0], trace_in, opt_in)))
        except Exception as exc:  # noqa: BLE001
            out[strategy] = Outcome("crash", "optimized graph raised " + _exc_cause(exc), _exc_detail(exc), [report])
            continue
        ref64 = Reference64(lambda args: gm(*_gm_args(calls[0], trace_in, args)), make_inputs,
                            _diff_outputs(reference[0]))
        out[strategy] = _judge(reference, (act_flat, opt_in, opt_leaves), [report], ref64)
    return out


def _check_meta_strides(gm, exp_flat) -> None:
    """RuntimeError when an output's strides in dynamo's FakeTensor meta differ from eager's: the layout is
    then unknowable when compiling (FakeTensor's Python references pick other strides for size-1 dims than
    the C++ kernels, and a later cat or cast follows them), and torch.compile itself returns the meta's."""
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    flat: list = []
    torch.fx.node.map_arg(out.args[0], flat.append)
    for i, (n, e) in enumerate(zip(flat, exp_flat)):
        m = n.meta.get("example_value", n.meta.get("val"))
        if (isinstance(m, torch.Tensor) and isinstance(e, torch.Tensor) and e.numel() > 1
                and all(type(d) is int for d in (*m.shape, *m.stride()))
                and _observable_strides(m) != _observable_strides(e)):
            raise RuntimeError(f"dynamo's meta strides {m.stride()} of output {i} differ from eager's {e.stride()}")


def _grads(flat, leaves, diff=None):
    """Gradients of a fixed random weighted sum of the outputs that require grad (None: no such output).
    ``diff``: the indices of those outputs (default: read from ``flat``)."""
    if diff is None:
        diff = [i for i, e in enumerate(flat) if isinstance(e, torch.Tensor) and e.requires_grad]
    if not leaves or not diff:
        return None
    g = torch.Generator().manual_seed(1234)
    loss = sum((flat[i].double() * torch.randn(flat[i].shape, generator=g).double()).sum() for i in diff)
    return torch.autograd.grad(loss, leaves, allow_unused=True)


class Reference64:
    """The program run once in float64 (lazily, on the first question): its flat outputs and the float64
    gradients of :func:`_grads`' weighted sum, the reference of :mod:`oracle` for outputs and gradients
    that differ from eager's. ``run(args)`` runs the program (eager, or the captured graph) on the
    arguments that ``make_inputs()`` gives, widened to float64 (casts inside too: :class:`oracle.widened`);
    the leaves become float64 leaves. ``outputs``/``grads`` are None when the program cannot run so."""

    def __init__(self, run: Callable, make_inputs: Callable, diff: list[int]) -> None:
        self._run, self._make_inputs, self._diff = run, make_inputs, diff
        self._done = False
        self._outputs = self._grads = None

    def _compute(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            args, leaves = self._make_inputs()
            args64 = _copies64(args)  # inputs that share storage share it in float64 too
            wide = {id(a): c for a, c in zip(args, args64)}
            leaves64 = [wide[id(x)] for x in leaves]
            assert all(x.requires_grad for x in leaves64), "a leaf that is not an argument"
            with torch.random.fork_rng(devices=[]), warnings.catch_warnings(), widened():
                warnings.simplefilter("ignore")
                flat = _flat(self._run(args64))
            self._outputs = flat
            self._grads = _grads(flat, leaves64, self._diff) if leaves64 else None
        except Exception:  # noqa: BLE001 -- the program cannot run in float64 (mixed-dtype linear, ...)
            self._outputs = self._grads = None

    def outputs(self):
        self._compute()
        return self._outputs

    def grads(self):
        self._compute()
        return self._grads


def _diff_outputs(flat) -> list[int]:
    return [i for i, e in enumerate(flat) if isinstance(e, torch.Tensor) and e.requires_grad]


def _fair_values(exp_flat, act_flat, ref64) -> bool:
    """Whether every output that differs from eager's is as right as eager's by the oracle's rule
    (:func:`oracle.assert_values` against the float64 reference: a rewrite that reorders a float sum, or
    computes a bf16 op in float32, may differ from eager where eager is the less exact one). False without
    a reference."""
    r64 = ref64.outputs() if ref64 is not None else None
    if r64 is None or len(r64) != len(exp_flat):
        return False
    for i, (a, e, r) in enumerate(zip(act_flat, exp_flat, r64)):
        if not isinstance(e, torch.Tensor) or not isinstance(a, torch.Tensor) or a.shape != e.shape:
            continue
        try:
            assert_values(a, e, r if isinstance(r, torch.Tensor) else None, f"output {i}")
        except AssertionError:
            return False
    return True


def _precision(flat):
    """The coarsest floating dtype of the outputs that require grad (None when there is none): gradients flow
    back through it, so a float32 leaf's gradient is no more exact than that (seed 902187: two float16 tanh
    outputs of one value, merged, sum their gradients before the tanh backward, eager after)."""
    dts = [t.dtype for t in flat if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()]
    return max(dts, key=lambda d: torch.finfo(d).eps) if dts else None


def _judge(reference, actual, reports, ref64=None) -> Outcome:
    exp_flat, ref_in, ref_leaves, ge = reference
    act_flat, opt_in, opt_leaves = actual
    try:
        try:
            compare(exp_flat, act_flat, ref_in, opt_in)
        except Mismatch as exc:
            if exc.kind != "values" or not _fair_values(exp_flat, act_flat, ref64):
                raise
            compare(exp_flat, act_flat, ref_in, opt_in, values=False)
        ga = _grads(act_flat, opt_leaves) if ge is not None else None
        compare_grads(ge, ga, ref64, _precision(exp_flat))
    except Mismatch as exc:
        return Outcome("wrong", exc.kind, str(exc), reports)
    except Exception as exc:  # noqa: BLE001 -- backward of the optimized graph raised
        return Outcome("crash", "backward raised " + _exc_cause(exc), _exc_detail(exc), reports)
    fb = next((r.fallback for r in reports if r.fallback), None)
    if fb:
        return Outcome("fallback", fallback_cause(fb), fb, reports)
    return Outcome("ok", reports=reports)


def _aot_compile(fn, dynamic, strategy, reports, pattern_options=None, cost_model=None):
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func
    from torch._inductor.decomposition import select_decomp_table

    def compiler(gm, example_inputs):
        if strategy is None:
            return make_boxed_func(gm)
        gm2, report = _optimize(gm, example_inputs, strategy, "post_grad", pattern_options, cost_model)
        reports.append(report)
        return make_boxed_func(gm2)

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=compiler, bw_compiler=compiler, decompositions=select_decomp_table())
    return torch.compile(fn, backend=backend, dynamic=dynamic, fullgraph=True)


def _run_post_grad(fn, make_inputs, strategies, dynamic, pattern_options=None, cost_model=None) -> dict:
    """Post-grad: dynamo + AOTAutograd with the optimizer as forward and backward compiler. The reference
    is the same compile without the optimizer (so AOTAutograd's own layouts are not charged to us),
    checked against eager ``fn`` first (a mismatch there makes the program invalid)."""
    def attempt(strategy):
        reports: list = []
        compiled = _aot_compile(fn, dynamic, strategy, reports, pattern_options, cost_model)
        opt_in, opt_leaves = make_inputs()
        act_flat = _flat(compiled(*opt_in))
        return act_flat, opt_in, opt_leaves, reports

    try:
        ref_in, ref_leaves = make_inputs()
        eager = _flat(fn(*ref_in))
        eager_grads = _grads(eager, ref_leaves)
        exp_flat, ctl_in, ctl_leaves, _ = attempt(None)
        reference = (exp_flat, ctl_in, ctl_leaves, _grads(exp_flat, ctl_leaves))
        try:
            compare(eager, exp_flat, ref_in, ctl_in)
            compare_grads(eager_grads, reference[3])
        except Mismatch as exc:
            raise RuntimeError(f"without the optimizer: {exc}") from None
    except Exception as exc:  # noqa: BLE001 -- the program is invalid (generator's limits), not our bug
        return {s: Outcome("invalid", _exc_cause(exc), _exc_detail(exc)) for s in strategies}
    out = {}
    for strategy in strategies:
        try:
            act_flat, opt_in, opt_leaves, reports = attempt(strategy)
        except Exception as exc:  # noqa: BLE001 -- the control compiled, so this is ours
            out[strategy] = Outcome("crash", "compile raised " + _exc_cause(exc), _exc_detail(exc))
            continue
        ref64 = Reference64(lambda args: fn(*args), make_inputs, _diff_outputs(reference[0]))
        out[strategy] = _judge(reference, (act_flat, opt_in, opt_leaves), reports, ref64)
    return out


def run(program: Program, strategies=("greedy", "eqsat")) -> dict:
    """:func:`run_program` on a generated :class:`Program`."""
    fn, make_inputs = program.compile()
    return run_program(fn, make_inputs, strategies, level=program.level, dynamic=program.dynamic,
                       pattern_options=program.pattern_options)


# -- the known wrong-result classes of issue 11 ----------------------------------------------------

def known_class(program: Program, outcome: Outcome) -> str | None:
    """Issue 11's wrong-result class a wrong outcome belongs to (None: a new bug). Class 1: wrong values or
    mutations with aliased inputs; 2: a None gradient became a tensor; 3: a tensor gradient became None;
    4: requires_grad differs; 5: aliasing among outputs and inputs differs."""
    if outcome.kind != "wrong":
        return None
    c = outcome.cause
    if c == "grad_none_became_tensor":
        return "class 2"
    if c == "grad_tensor_became_none":
        return "class 3"
    if c == "requires_grad":
        return "class 4"
    if c.startswith("aliasing"):
        return "class 5"
    if "aliased_inputs" in program.features and c in ("values", "mutation", "grad_values"):
        return "class 1"
    return None


def minimize(program: Program, strategy: str, budget: int = 200) -> Program:
    """A smaller program with the same outcome (kind and cause) under ``strategy``: drop body lines and
    returned values one at a time while the outcome stays (delta debugging, one element at a time; at most
    ``budget`` runs). For turning a fuzz failure into a regression test."""
    from dataclasses import replace

    def outcome(p):
        o = run(p, (strategy,))[strategy]
        return o.kind, o.cause

    want = outcome(program)
    runs = 0

    def parts(p):
        head, *body = p.f_src.rstrip("\n").split("\n")
        return head, body[:-1], body[-1]

    changed = True
    while changed and runs < budget:
        changed = False
        head, body, ret = parts(program)
        outs = [o.strip() for o in ret.strip()[len("return ("):-1].split(",") if o.strip()]
        candidates = [("line", i) for i in reversed(range(len(body)))] + [("out", i) for i in range(len(outs))]
        for kind, i in candidates:
            if runs >= budget:
                break
            if kind == "line":
                if body[i].startswith("        "):  # inside a with block: goes with its header
                    continue
                j = i + 1
                while j < len(body) and body[j].startswith("        "):
                    j += 1
                new_body, new_outs = body[:i] + body[j:], outs
            else:
                if len(outs) == 1:
                    continue
                new_body, new_outs = body, outs[:i] + outs[i + 1:]
            src = "\n".join([head, *new_body, f"    return ({', '.join(new_outs)},)"]) + "\n"
            cand = replace(program, f_src=src)
            runs += 1
            try:
                same = outcome(cand) == want
            except Exception:  # noqa: BLE001 -- a broken candidate
                same = False
            if same:
                program, changed = cand, True
                break
    return program
