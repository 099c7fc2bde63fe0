"""Differential fuzzing beyond split/cat chains: random programs that also hold groups of identical ops
(tanh/sigmoid/relu/clamp/nan_to_num/detach, F.linear with shared or separate weights and optional bias,
layer_norm over 1 or 2 dims with mixed affine parameters and eps), movedim / unflatten / permute / expand /
tensor_split / squeeze views, transposed (non-contiguous) inputs, size-0 and size-1 dims, fp32 / bf16 / fp16,
and outputs that repeat a result or return an input. Horizontal patterns fuse from 2 members. Compared
with eager by :func:`conftest.check` (values, dtypes, strides, aliasing, gradients). Written while hunting
bugs (session fuzz3); each failure prints a program one can paste.
"""

from __future__ import annotations

import pytest
import torch

from conftest import check
from test_fuzz import Gen

HORIZONTAL = ["batch_linear_lhs", "batch_linear", "batch_layernorm", "batch_tanh", "batch_sigmoid", "batch_relu",
              "batch_detach", "batch_nan_to_num", "batch_clamp", "batch_dropout"]
SMALL = {name: {"min_fuse_set_size": 2} for name in HORIZONTAL}
GROUP_OPS = ["torch.tanh({})", "torch.sigmoid({})", "torch.relu({})", "{}.clamp(-0.3, 0.4)", "torch.nan_to_num({})",
             "{}.detach()", "torch.nn.functional.relu({})", "{}.clamp(min=0.1)"]


class HGen(Gen):
    """:class:`test_fuzz.Gen` plus op groups, linears and layer norms (their weights become inputs) and more
    views; inputs may be passed transposed."""

    def build(self):
        r = self.r
        dtype = r.choice([torch.float32, torch.float32, torch.bfloat16, torch.float16])
        self.inputs_: list = []  # (name, shape, dtype, transposed)
        for _ in range(r.randint(1, 3)):
            rank = r.randint(1, 4)
            shape = tuple(r.choice([1, 2, 3, 4, 6, 8]) if r.random() > 0.05 else 0 for _ in range(rank))
            self._input(shape, dtype, transposed=rank >= 2 and r.random() < 0.3)
        ops = [self.op_split, self.op_split, self.op_cat, self.op_cat, lambda: self.op_cat(True), self.op_group,
               self.op_group, self.op_linears, self.op_layer_norms, self.op_view2, self.op_view2, self.op_unary,
               self.op_binary, self.op_slice, self.op_view]
        for _ in range(r.randint(4, 12)):
            try:
                r.choice(ops)()
            except (IndexError, ValueError, RuntimeError):  # the generated op is invalid here: drop it
                if self.lines:
                    self.lines.pop()
        made = [v for v in self.tensors(0) if not v.startswith("x")]
        outs = made[-r.randint(1, 4):] if made else [n for n, *_ in self.inputs_]
        roll = r.random()
        if roll < 0.15:
            outs.append(r.choice(self.tensors(0)))
        elif roll < 0.25:
            outs.append(outs[0])
        elif roll < 0.35:
            outs.append("x0")
        body = "\n".join("    " + line for line in self.lines)
        src = f"def f({', '.join(n for n, *_ in self.inputs_)}):\n{body}\n    return ({', '.join(outs)},)\n"
        g = torch.Generator().manual_seed(r.randrange(2**31))
        inputs = []
        for _, shape, dt, transposed in self.inputs_:
            if transposed:
                t = torch.randn(tuple(reversed(shape)), generator=g).to(dt)
                inputs.append(t.permute(*reversed(range(len(shape)))))
            else:
                inputs.append(torch.randn(shape, generator=g).to(dt))
        return src, inputs

    def _input(self, shape, dtype, transposed=False) -> str:
        name = f"x{len(self.inputs_)}"
        self.inputs_.append((name, shape, dtype, transposed))
        t = torch.empty(tuple(reversed(shape)) if transposed else shape, device="meta", dtype=dtype)
        self.env[name] = t.permute(*reversed(range(len(shape)))) if transposed else t
        return name

    def _group(self, min_len=1):
        groups = [g for g in self.groups if all(p in self.env for p in g) and len(g) >= min_len]
        return self.r.choice(groups) if groups else None

    def op_group(self):
        g = self._group() if self.r.random() < 0.6 else None
        if g is None:
            v = self.r.choice(self.tensors())
            g = [w for w in self.tensors() if self.shape(w) == self.shape(v) and self.env[w].dtype == self.env[v].dtype]
        f = self.r.choice(GROUP_OPS)
        new = []
        for p in g:
            t = self.name()
            self.emit(f"{t} = " + f.format(p))
            new.append(t)
        self.groups.append(new)

    def op_linears(self):
        g = self._group(2)
        if g is None or any(self.shape(p)[-1] == 0 for p in g):
            return
        dt, o = self.env[g[0]].dtype, self.r.randint(1, 4)
        shared_w, w0, new = self.r.random() < 0.2, None, []
        for p in ([g[0]] * len(g) if self.r.random() < 0.2 else g):
            k = self.shape(p)[-1]
            w = w0 if shared_w and w0 is not None and self.shape(w0)[1] == k else self._input((o, k), dt)
            w0 = w
            b = self._input((o,), dt) if self.r.random() < 0.6 else None
            t = self.name()
            self.emit(f"{t} = torch.nn.functional.linear({p}, {w}, {b})")
            new.append(t)
        self.groups.append(new)

    def op_layer_norms(self):
        g = self._group(2)
        if g is None:
            return
        dt, eps, new = self.env[g[0]].dtype, self.r.choice([1e-5, 1e-5, 0.1]), []
        for p in g:
            s = self.shape(p)
            ns = s[-(self.r.choice([1, 1, 2]) if len(s) >= 2 else 1):]
            aff = self.r.random()
            w = self._input(ns, dt) if aff < 0.7 else None
            b = self._input(ns, dt) if aff < 0.5 or aff > 0.9 else None
            t = self.name()
            self.emit(f"{t} = torch.nn.functional.layer_norm({p}, {list(ns)}, {w}, {b}, {eps})")
            new.append(t)
        self.groups.append(new)

    def op_view2(self):
        v = self.r.choice(self.tensors())
        s = self.shape(v)
        rk, t, c = len(s), self.name(), self.r.random()
        if c < 0.2 and rk >= 2:
            self.emit(f"{t} = torch.movedim({v}, {self.r.randrange(-rk, rk)}, {self.r.randrange(-rk, rk)})")
        elif c < 0.35:
            d = self.r.randrange(rk)
            if s[d] % 2 == 0 and s[d] > 0:
                self.emit(f"{t} = {v}.unflatten({d - rk if self.r.random() < 0.5 else d}, (2, {s[d] // 2}))")
            else:
                self.emit(f"{t} = {v}.contiguous()")
        elif c < 0.5 and rk >= 2:
            perm = list(range(rk))
            self.r.shuffle(perm)
            self.emit(f"{t} = {v}.permute({perm})")
        elif c < 0.6:
            d = self.r.randrange(rk)
            if s[d] == 1:
                self.emit(f"{t} = {v}.expand({', '.join(str(n if i != d else 3) for i, n in enumerate(s))})")
            else:
                self.emit(f"{t} = {v}.unsqueeze({d}).squeeze({d})")
        elif c < 0.75:
            pieces = self.name()
            self.emit(f"{pieces} = torch.tensor_split({v}, {self.r.randint(1, 4)}, {self.r.randrange(rk)})")
            ps = []
            for i in range(len(self.env[pieces])):
                p = self.name()
                self.emit(f"{p} = {pieces}[{i}]")
                ps.append(p)
            del self.env[pieces]
            self.groups.append(ps)
        elif c < 0.85:
            self.emit(f"{t} = {v}.contiguous(memory_format=torch.channels_last)" if rk == 4 else f"{t} = {v}.flatten()")
        else:
            self.emit(f"{t} = {v}.squeeze()")


def program(seed: int):
    src, inputs = HGen(seed).build()
    ns: dict = {"torch": torch}
    exec(src, ns)  # noqa: S102 -- generated test program
    return ns["f"], inputs, src


@pytest.mark.parametrize("strategy", ["greedy", "eqsat", "tensat"])
@pytest.mark.parametrize("seed", range(10))
def test_fuzz_horizontal_and_views(seed, strategy):
    fn, inputs, src = program(seed)
    try:
        c = check(fn, inputs, strategy, source="fx", fallback_ok=True, pattern_options=SMALL)
    except AssertionError as exc:
        raise AssertionError(f"seed {seed}, {strategy}; program:\n{src}\n{exc}") from None
    assert c.report.fallback is None or "LoweringError" in c.report.fallback, f"{c.report.fallback}\n{src}"
