"""Differential fuzzing: random split / chunk / unbind / cat / stack / slice / view / pointwise programs,
optimized by both strategies and compared with eager (values, dtypes, shapes, strides, aliasing,
gradients: :func:`conftest.check`).

Programs are generated as Python source from a seed, so that a failure prints a program one can paste.
Cats are biased towards runs of pieces of one split (in order, permuted, partial, mixed with other
tensors), which is where folding rules can go wrong.
"""

from __future__ import annotations

import random

import pytest
import torch

from conftest import STRATEGIES, check

UNARY = ["torch.tanh({})", "{}.relu()", "torch.sigmoid({})", "({} * 2.0)", "({} - 1)", "{}.clamp(-0.5, 0.5)"]


class Gen:
    """Builds one random program; tensors are tracked on the meta device to know shapes."""

    def __init__(self, seed: int, mutate: bool = False) -> None:
        self.r = random.Random(seed)
        self.mutate = mutate
        self.lines: list[str] = []
        self.env: dict[str, torch.Tensor] = {}
        self.groups: list[list[str]] = []  # pieces of one split/unbind, in order
        self.n = 0

    def name(self) -> str:
        self.n += 1
        return f"v{self.n}"

    def emit(self, line: str, out: str | None = None) -> None:
        self.lines.append(line)
        exec(line, {"torch": torch}, self.env)  # noqa: S102 -- generated test program

    def shape(self, v):
        return tuple(self.env[v].shape)

    def tensors(self, min_rank=1):
        return [v for v, t in self.env.items() if isinstance(t, torch.Tensor) and t.dim() >= min_rank]

    def dim(self, rank: int) -> int:
        d = self.r.randrange(rank)
        return d - rank if self.r.random() < 0.4 else d

    # -- ops ------------------------------------------------------------------------------------
    def op_split(self):
        v = self.r.choice(self.tensors())
        rank = len(self.shape(v))
        d = self.dim(rank)
        n = self.shape(v)[d]
        kind = self.r.choice(["split_int", "split_list", "method", "chunk", "unbind", "unbind"])
        t = self.name()
        if kind == "unbind":
            if rank < 2:
                return
            self.emit(f"{t} = torch.unbind({v}, {d})")
            count = n
        elif kind == "chunk":
            c = self.r.randint(1, max(1, n))
            self.emit(f"{t} = torch.chunk({v}, {c}, {d})")
            count = len(self.env[t])
        elif kind in ("split_int", "method"):
            k = self.r.randint(1, max(1, n))
            self.emit(f"{t} = {v}.split({k}, {d})" if kind == "method" else f"{t} = torch.split({v}, {k}, dim={d})")
            count = len(self.env[t])
        else:
            sizes, left = [], n
            while left > 0:
                s = self.r.randint(0 if self.r.random() < 0.15 else 1, left)
                sizes.append(s)
                left -= s
            if not sizes or self.r.random() < 0.1:
                sizes.append(0)
            self.emit(f"{t} = torch.split({v}, {sizes}, {d})")
            count = len(sizes)
        pieces = []
        for i in range(count):
            p = self.name()
            self.emit(f"{p} = {t}[{i}]")
            pieces.append(p)
        del self.env[t]
        self.groups.append(pieces)

    def _compatible(self, base: str, d: int, stack: bool):
        sb = self.shape(base)
        out = []
        for v in self.tensors():
            sv = self.shape(v)
            if len(sv) != len(sb) or self.env[v].dtype != self.env[base].dtype:
                continue
            if stack and sv == sb or not stack and all(a == b for i, (a, b) in enumerate(zip(sv, sb)) if i != d % len(sb)):
                out.append(v)
        return out

    def op_cat(self, stack: bool = False):
        groups = [g for g in self.groups if all(p in self.env for p in g) and len(g) >= 1]
        if groups and self.r.random() < 0.8:
            g = self.r.choice(groups)
            lo = self.r.randrange(len(g))
            hi = self.r.randint(lo + 1, len(g)) if self.r.random() < 0.5 else len(g)
            if self.r.random() < 0.5:
                lo = 0
            items = g[lo:hi]
        else:
            items = [self.r.choice(self.tensors())]
        base = items[0]
        rank = len(self.shape(base))
        if stack:
            d = self.r.randrange(-rank - 1, rank + 1)
        else:
            # mostly the dim the pieces were split along (the only one where they differ)
            diff = [i for i in range(rank) if len({self.shape(p)[i] for p in items}) > 1]
            d = diff[0] if diff else self.r.randrange(rank)
            if self.r.random() < 0.4:
                d -= rank
        pool = self._compatible(base, d, stack)
        items = [p for p in items if p in pool]
        if not items:
            return
        roll = self.r.random()
        if roll < 0.15 and len(items) > 1:
            self.r.shuffle(items)
        elif roll < 0.3:
            items.insert(self.r.randint(0, len(items)), self.r.choice(pool))
        elif roll < 0.4:
            items.append(items[0])
        t = self.name()
        fn = "torch.stack" if stack else self.r.choice(["torch.cat", "torch.cat", "torch.concat"])
        self.emit(f"{t} = {fn}([{', '.join(items)}], {d})")

    def op_unary(self):
        v = self.r.choice(self.tensors())
        t = self.name()
        self.emit(f"{t} = " + self.r.choice(UNARY).format(v))

    def op_pointwise_pieces(self):
        groups = [g for g in self.groups if all(p in self.env for p in g)]
        if not groups:
            return self.op_unary()
        g = self.r.choice(groups)
        f = self.r.choice(UNARY)
        new = []
        for p in g:
            t = self.name()
            self.emit(f"{t} = " + f.format(p))
            new.append(t)
        self.groups.append(new)

    def op_binary(self):
        v = self.r.choice(self.tensors())
        same = [w for w in self.tensors() if self.shape(w) == self.shape(v) and self.env[w].dtype == self.env[v].dtype]
        w = self.r.choice(same)
        t = self.name()
        self.emit(f"{t} = {v} {self.r.choice(['+', '*', '-'])} {w}")

    def op_view(self):
        v = self.r.choice(self.tensors())
        s = self.shape(v)
        t = self.name()
        choice = self.r.random()
        if len(s) >= 2 and choice < 0.3:
            self.emit(f"{t} = {v}.flatten({len(s) - 2})")
        elif choice < 0.6:
            self.emit(f"{t} = {v}.unsqueeze({self.r.randrange(-len(s) - 1, len(s) + 1)})")
        elif len(s) >= 2 and choice < 0.8:
            self.emit(f"{t} = {v}.transpose(0, -1)")
        else:
            self.emit(f"{t} = {v}.reshape({', '.join(map(str, s))})")

    def op_slice(self):
        v = self.r.choice(self.tensors())
        s = self.shape(v)
        d = self.r.randrange(len(s))
        n = s[d]
        a = self.r.randint(0, n)
        b = self.r.randint(a, n)
        t = self.name()
        if self.r.random() < 0.5:
            self.emit(f"{t} = {v}.narrow({d}, {a}, {b - a})")
        else:
            self.emit(f"{t} = {v}[{'(slice(None),) * ' + str(d) + ' + ' if d else ''}(slice({a}, {b}),)]")

    def op_mutate(self):
        v = self.r.choice(self.tensors())
        s = self.shape(v)
        roll = self.r.random()
        if roll < 0.4:
            self.emit(f"{v}.add_(1)")
        elif roll < 0.6:
            self.emit(f"{v}.mul_(-2)")
        elif roll < 0.8 and s[0] > 0:
            self.emit(f"{v}.select(0, 0).fill_(3.0)")  # symbolic_trace cannot record v[0] = 3.0
        else:
            w = self.r.choice([w for w in self.tensors() if self.shape(w) == s])
            if w != v:
                self.emit(f"{v}.copy_({w})")

    def build(self):
        r = self.r
        dtype = r.choice(["torch.float32", "torch.float32", "torch.bfloat16"])
        nin = r.randint(1, 2)
        shapes = []
        for i in range(nin):
            rank = r.randint(2, 3)
            shapes.append(tuple(r.randint(1, 6) for _ in range(rank)))
        ins = [f"x{i}" for i in range(nin)]
        for i, s in enumerate(shapes):
            self.env[f"x{i}"] = torch.empty(s, device="meta", dtype=eval(dtype))  # noqa: S307
        ops = [self.op_split, self.op_split, self.op_cat, self.op_cat, self.op_cat, lambda: self.op_cat(True),
               self.op_pointwise_pieces, self.op_unary, self.op_binary, self.op_view, self.op_slice]
        if self.mutate:
            ops += [self.op_mutate, self.op_mutate]
        for _ in range(r.randint(3, 9)):
            r.choice(ops)()
        made = [v for v in self.tensors(0) if not v.startswith("x")]
        outs = made[-r.randint(1, 3):] if made else ins
        if r.random() < 0.3:
            outs.append(r.choice(self.tensors(0)))
        body = "\n".join("    " + line for line in self.lines)
        src = f"def f({', '.join(ins)}):\n{body}\n    return ({', '.join(outs)},)\n"
        g = torch.Generator().manual_seed(self.r.randrange(2**31))
        inputs = [torch.randn(s, generator=g).to(eval(dtype)) for s in shapes]  # noqa: S307
        return src, inputs


def program(seed: int, mutate: bool = False):
    src, inputs = Gen(seed, mutate).build()
    ns: dict = {"torch": torch}
    exec(src, ns)  # noqa: S102 -- generated test program
    return ns["f"], inputs, src


def _run(seed, strategy, source, mutate=False):
    fn, inputs, src = program(seed, mutate)
    try:
        c = check(fn, inputs, strategy, source=source, fallback_ok=True, grad=not mutate)
    except AssertionError as exc:
        raise AssertionError(f"seed {seed}, {strategy}, {source}; program:\n{src}\n{exc}") from None
    return c


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("seed", range(40))
def test_fuzz_symbolic_trace(seed, strategy):
    c = _run(seed, strategy, "fx")
    assert c.report.fallback is None or "LoweringError" in c.report.fallback, c.report.fallback


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("seed", range(1000, 1006))
def test_fuzz_dynamo(seed, strategy):
    c = _run(seed, strategy, "dynamo")
    assert c.report.fallback is None or "LoweringError" in c.report.fallback, c.report.fallback


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("seed", range(2000, 2030))
def test_fuzz_with_mutation(seed, strategy):
    """Programs with in-place ops (add_, mul_, fill_ through a view, copy_) on inputs, pieces and results."""
    c = _run(seed, strategy, "fx", mutate=True)
    assert c.report.fallback is None or "LoweringError" in c.report.fallback, c.report.fallback


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("seed", range(3000, 3004))
def test_fuzz_with_mutation_dynamo(seed, strategy):
    c = _run(seed, strategy, "dynamo", mutate=True)
    assert c.report.fallback is None or "LoweringError" in c.report.fallback, c.report.fallback
