"""A GEMM-heavy program generator for the differential fuzzer (:mod:`fuzzing`), written while hunting wrong
results after the cost model's GEMM occupancy term changed extraction (session 13, breaker13c).

:class:`GemmGen` extends :class:`fuzzing.FuzzGen` with the shapes that :mod:`fuzzing`'s generator rarely
makes: ``batch_gemm_lhs`` candidates (``x @ P`` with a 2-D ``P``, ``torch.matmul`` / ``torch.mm``, bias-free
linears sharing an input, transposed weights ``x @ W.t()``), DLRM / DCN-v2-style cross layers (gates and V
linears on one input, experts as a stacked bmm), uneven splits feeding batched ops, pointwise chains across
cats, and parameters (inputs that require grad) used by two groups. :func:`run_gemm` runs one program with
each strategy under each cost model (launch and CUDA-graph execution, training priced or not) and returns the
outcomes, as :func:`fuzzing.run` does.

Long runs by hand: ``PYTHONPATH=src:bridge:bench:tests python bench/fuzz_gemm.py --programs 1000``.
"""

from __future__ import annotations

import random

import torch

import fuzzing
from fuzzing import DTYPES, FuzzGen, Program
from optimus_eq.cost import GPUCostModel

#: every pre-grad horizontal pattern from groups of 2 (the cost model decides which are worth it)
GEMM_SMALL = {name: {"min_fuse_set_size": 2} for name in (
    "batch_linear_lhs", "batch_linear", "batch_layernorm", "batch_tanh", "batch_sigmoid", "batch_relu",
    "batch_detach", "batch_nan_to_num", "batch_clamp", "batch_gemm_lhs")}

#: the cost models a program is optimized under (name -> model)
COST_MODELS = {
    "launch": GPUCostModel(),
    "cudagraph": GPUCostModel.cudagraph(),
    "launch_fwd": GPUCostModel(training=False),
    "cudagraph_fwd": GPUCostModel.cudagraph(training=False),
}


class GemmGen(FuzzGen):
    """:class:`fuzzing.FuzzGen` with GEMM groups, cross layers, experts, uneven splits and pointwise chains
    across cats (module docstring). Weights are inputs; ``self.params`` remembers them by shape so that a
    later group may reuse one (a parameter read by two groups)."""

    def __init__(self, seed: int, level: str = "pre_grad", dynamic: bool = False, features: dict | None = None):
        super().__init__(seed, level, dynamic, features)
        self.params: dict[tuple, list[str]] = {}

    def _param(self, shape, dtype) -> str:
        """A weight input of ``shape`` (requires grad like a parameter, mostly), or one made earlier."""
        have = self.params.get((tuple(shape), dtype), [])
        if have and self.r.random() < 0.3:
            self.used.add("shared_param")
            return self.r.choice(have)
        name = self._input(tuple(shape), dtype, requires_grad=self.r.random() < 0.85)
        self.params.setdefault((tuple(shape), dtype), []).append(name)
        return name

    def _gemm_input(self):
        vs = [v for v in self.tensors(2) if self.shape(v)[-1] > 0 and self.env[v].is_floating_point()]
        return self.r.choice(vs) if vs else None

    def _gemm(self, v, kind, o) -> str:
        k, dt = self.shape(v)[-1], self.env[v].dtype
        if kind == "matmul_op":
            return f"{v} @ {self._param((k, o), dt)}"
        if kind == "matmul":
            return f"torch.matmul({v}, {self._param((k, o), dt)})"
        if kind == "mm" and len(self.shape(v)) == 2:
            return f"torch.mm({v}, {self._param((k, o), dt)})"
        if kind == "wt":
            return f"{v} @ {self._param((o, k), dt)}.t()"
        if kind == "linear_b":
            return f"torch.nn.functional.linear({v}, {self._param((o, k), dt)}, {self._param((o,), dt)})"
        return f"torch.nn.functional.linear({v}, {self._param((o, k), dt)})"

    def op_gemm_lhs(self):
        """2-4 GEMMs of one input in mixed spellings (batch_gemm_lhs / batch_linear_lhs candidates)."""
        v = self._gemm_input()
        if v is None:
            return
        new = []
        for _ in range(self.r.randint(2, 4)):
            kind = self.r.choice(["matmul_op", "matmul", "mm", "wt", "linear", "linear", "linear_b"])
            t = self.name()
            self.emit(f"{t} = " + self._gemm(v, kind, self.r.choice([0, 1, 2, 3, 4, 8, 8, 40])))
            new.append(t)
        self.groups.append(new)
        self.used.add("gemm_lhs")

    def op_cross(self):
        """A DCN-v2 cross layer ``x0 * (xl @ W + b) + xl`` or a gated mixture: gates ``sigmoid(x @ G_i)`` and
        values ``F.linear(x, V_i)`` on one input, summed ``sum_i g_i * v_i``."""
        v = self._gemm_input()
        if v is None:
            return
        k = self.shape(v)[-1]
        if self.r.random() < 0.4:
            xl = v
            for _ in range(self.r.randint(1, 3)):
                t = self.name()
                self.emit(f"{t} = {v} * {self._gemm(xl, self.r.choice(['linear_b', 'wt', 'matmul_op']), k)} + {xl}")
                xl = t
            self.used.add("cross")
            return
        n, o, terms = self.r.randint(2, 4), self.r.choice([1, 2, 4]), []
        gates, values = [], []
        for _ in range(n):
            g, val = self.name(), self.name()
            self.emit(f"{g} = torch.sigmoid({self._gemm(v, self.r.choice(['matmul_op', 'linear', 'wt']), o)})")
            self.emit(f"{val} = {self._gemm(v, self.r.choice(['linear', 'linear_b', 'matmul']), o)}")
            gates.append(g)
            values.append(val)
            terms.append(f"{g} * {val}")
        t = self.name()
        self.emit(f"{t} = " + " + ".join(terms))
        self.groups += [gates, values]
        self.used.add("gated")

    def op_experts(self):
        """Experts as one stacked bmm: ``torch.stack([x] * E) @ W`` (W ``[E, k, o]``), then unbind."""
        v = self._gemm_input()
        if v is None or len(self.shape(v)) != 2:
            return
        k, dt = self.shape(v)[-1], self.env[v].dtype
        e, o = self.r.randint(2, 4), self.r.choice([1, 2, 4])
        w = self._param((e, k, o), dt)
        t, u = self.name(), self.name()
        if self.r.random() < 0.5:
            self.emit(f"{t} = torch.bmm(torch.stack([{', '.join([v] * e)}]), {w})")
        else:
            self.emit(f"{t} = {v}.unsqueeze(0).expand({e}, -1, -1) @ {w}")
        self.emit(f"{u} = torch.unbind({t}, 0)")
        pieces = []
        for i in range(e):
            p = self.name()
            self.emit(f"{p} = torch.relu({u}[{i}])")
            pieces.append(p)
        del self.env[u]
        self.groups.append(pieces)
        self.used.add("experts")

    def op_uneven(self):
        """An uneven split of the last dim, a linear or pointwise op per piece, a cat back (maybe)."""
        v = self._gemm_input()
        if v is None or self.shape(v)[-1] < 3:
            return
        n = self.shape(v)[-1]
        cut = sorted(self.r.sample(range(1, n), min(n - 1, self.r.randint(1, 3))))
        sizes = [b - a for a, b in zip([0, *cut], [*cut, n])]
        s = self.name()
        self.emit(f"{s} = torch.split({v}, {sizes}, -1)")
        new = []
        op = self.r.choice(["linear", "tanh", "gemm"])
        for i in range(len(sizes)):
            t = self.name()
            p = f"{s}[{i}]"
            if op == "tanh":
                self.emit(f"{t} = torch.tanh({p})")
            else:
                self.env["_p"] = self.env[s][i]
                src = self._gemm("_p", self.r.choice(["linear", "linear_b", "matmul_op"]) if op == "gemm"
                                 else "linear_b", 2).replace("_p", p)
                del self.env["_p"]
                self.emit(f"{t} = {src}")
            new.append(t)
        del self.env[s]
        self.groups.append(new)
        if self.r.random() < 0.6 and len({self.shape(t)[:-1] for t in new}) == 1:
            c = self.name()
            self.emit(f"{c} = torch.cat([{', '.join(new)}], -1)")
        self.used.add("uneven")

    def op_chain_across_cat(self):
        """A cat of a group, a chain of pointwise ops on it, a split back to the pieces' sizes."""
        g = self._group(2)
        if g is None:
            return
        shapes = [self.shape(p) for p in g]
        if len({(len(s), s[:-1]) for s in shapes}) != 1 or len({self.env[p].dtype for p in g}) != 1:
            return
        c = self.name()
        self.emit(f"{c} = torch.cat([{', '.join(g)}], -1)")
        x = c
        for _ in range(self.r.randint(1, 3)):
            t = self.name()
            self.emit(f"{t} = " + self.r.choice(["torch.tanh({})", "({} * 0.5 + 1)", "torch.relu({})",
                                                  "torch.sigmoid({})"]).format(x))
            x = t
        s = self.name()
        self.emit(f"{s} = torch.split({x}, {[sh[-1] for sh in shapes]}, -1)")
        new = []
        for i in range(len(g)):
            p = self.name()
            self.emit(f"{p} = {s}[{i}]")
            new.append(p)
        del self.env[s]
        self.groups.append(new)
        self.used.add("chain_across_cat")

    def generate(self) -> Program:
        r, w = self.r, self.want
        dtype = r.choice([torch.float32] * 4 + [torch.bfloat16])
        self.inputs_: list = []
        for _ in range(r.randint(1, 2)):
            shape = (r.choice([1, 2, 3, 4, 8]),) * r.randint(0, 1) + (r.choice([0, 2, 3, 4, 8, 16, 33]),
                                                                     r.choice([2, 3, 4, 6, 8, 16]))
            self._input(shape, dtype, transposed=r.random() < 0.2)
        gemm = [self.op_gemm_lhs] * 4 + [self.op_cross] * 2 + [self.op_experts, self.op_uneven, self.op_uneven,
                                                                self.op_chain_across_cat, self.op_chain_across_cat]
        other = [self.op_split, self.op_cat, self.op_group, self.op_group, self.op_linears, self.op_layer_norms,
                 self.op_unary, self.op_binary, self.op_view]
        other += [self.op_grad_region, self.op_detach_member] if w["grad_regions"] else []
        for _ in range(r.randint(4, 12)):
            self._try(r.choice(gemm if r.random() < 0.65 else other))
        made = [v for v in self.tensors(0) if not v.startswith("x")]
        outs = made[-r.randint(1, 4):] if made else [n for n, *_ in self.inputs_]
        if made and r.random() < 0.3:
            outs.append(r.choice(made))
        body = "\n".join("    " + line for text in self.lines for line in text.split("\n"))
        f_src = f"def f({', '.join(n for n, *_ in self.inputs_)}):\n{body}\n    return ({', '.join(outs)},)\n"
        if self.dynamic:
            self.used.add("dynamic")
        prog = Program(self.seed_, self.level, self.dynamic, f_src, self.inputs_source(), frozenset(self.used),
                       GEMM_SMALL if r.random() < 0.8 else None)
        made_params = {n for names in self.params.values() for n in names}
        prog.params = [i for i, (n, *_, rg) in enumerate(self.inputs_) if n in made_params and rg]
        return prog


def generate(seed: int, level: str | None = None, dynamic: bool | None = None) -> Program:
    """The GEMM program of ``seed``: pre-grad (post-grad 15%), ``dynamic`` 15%, unless given."""
    r = random.Random(seed * 104729 + 3)
    level = level or ("post_grad" if r.random() < 0.15 else "pre_grad")
    dynamic = r.random() < 0.15 if dynamic is None else dynamic
    g = GemmGen(seed, level, dynamic, {"mutation": False, "aliased_inputs": False, "mixed_dtypes": False})
    g.seed_ = seed
    return g.generate()


def run_gemm(program: Program, strategies=("greedy", "eqsat"), cost_models=("launch", "cudagraph")) -> dict:
    """``(strategy, cost model name) -> fuzzing.Outcome`` for each strategy under each of
    :data:`COST_MODELS` named in ``cost_models``."""
    out = {}
    fn, make_inputs = program.compile()
    for cm in cost_models:
        res = fuzzing.run_program(fn, make_inputs, strategies, level=program.level, dynamic=program.dynamic,
                                  pattern_options=program.pattern_options, cost_model=COST_MODELS[cm])
        out.update({(s, cm): o for s, o in res.items()})
    return out


def run_module(program: Program, strategy: str, cost_model: str = "launch", steps: int = 2,
               compile: bool = False) -> str | None:
    """The program as an ``nn.Module`` whose weights that require grad are ``nn.Parameter`` s, compiled with
    ``optimus_eq.backend(strategy, compile=False)`` (parameter packing on) with the cost model of that name in
    :data:`COST_MODELS`, and run ``steps`` training steps (forward, backward of a fixed weighted sum,
    SGD) beside the same module run eagerly: None when outputs, gradients of every parameter and input (None
    kept None) and parameters after each step agree, else what differed. Pre-grad programs only. ``compile``: let
    Inductor compile the optimized graph (slow on CPU)."""
    import copy

    import optimus_eq

    fn, make_inputs = program.compile()
    args, _ = make_inputs()
    # in float64: float32 and half-precision programs differ from eager by rounding alone (reordered sums)
    args = [a.detach().double().requires_grad_(a.requires_grad) if a.is_floating_point() else a for a in args]
    pidx = set(program.params)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ps = torch.nn.ParameterList([torch.nn.Parameter(args[i].detach().clone()) for i in sorted(pidx)])

        def forward(self, *xs):
            it, full = iter(self.ps), []
            xs = iter(xs)
            for i in range(len(args)):
                full.append(next(it) if i in pidx else next(xs))
            return fn(*full)

    eager = M()
    if not pidx:
        return None
    comp_m = copy.deepcopy(eager)
    torch._dynamo.reset()
    comp = torch.compile(comp_m, backend=optimus_eq.backend(
        strategy=strategy, compile=compile, cost_model=COST_MODELS[cost_model], pattern_options=program.pattern_options), dynamic=program.dynamic)
    xs_e = [a.detach().clone().requires_grad_(a.requires_grad) for i, a in enumerate(args) if i not in pidx]
    xs_c = [a.detach().clone().requires_grad_(a.requires_grad) for i, a in enumerate(args) if i not in pidx]
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_c = torch.optim.SGD(comp_m.parameters(), lr=0.1)
    tol = {"rtol": 1e-7, "atol": 1e-9}
    for step in range(steps):
        oe, oc = fuzzing._flat(eager(*xs_e)), fuzzing._flat(comp(*xs_c))
        for i, (a, e) in enumerate(zip(oc, oe)):
            try:
                torch.testing.assert_close(a, e, **tol)
            except AssertionError as exc:
                return f"step {step} output {i}: {exc}"
            if a.requires_grad != e.requires_grad:
                return f"step {step} output {i}: requires_grad {a.requires_grad} != {e.requires_grad}"
        leaves_e = [*eager.parameters(), *[x for x in xs_e if x.requires_grad]]
        leaves_c = [*comp_m.parameters(), *[x for x in xs_c if x.requires_grad]]
        ge, gc = fuzzing._grads(oe, leaves_e), fuzzing._grads(oc, leaves_c)
        if ge is None:
            return None
        for j, (a, e) in enumerate(zip(gc, ge)):
            if (a is None) != (e is None):
                return f"step {step} leaf {j}: gradient {'None' if a is None else 'a tensor'}, eager's " \
                       f"{'None' if e is None else 'a tensor'}"
            if e is not None:
                try:
                    torch.testing.assert_close(a, e, **tol)
                except AssertionError as exc:
                    return f"step {step} leaf {j} gradient: {exc}"
        for p, g in zip(eager.parameters(), ge):
            p.grad = None if g is None else g.to(p.dtype)
        for p, g in zip(comp_m.parameters(), gc):
            p.grad = None if g is None else g.to(p.dtype)
        opt_e.step()
        opt_c.step()
    return None


__all__ = ["COST_MODELS", "DTYPES", "GEMM_SMALL", "GemmGen", "generate", "run_gemm", "run_module"]
