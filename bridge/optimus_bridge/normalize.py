"""The pre-grad normalization (a canonical pattern): the op table of the Torch-IR translator, one handler per spelling.

Canonical forms: split / chunk outputs and basic slices are ``Narrow(x, d, start, length, n)``, unbind outputs
and integer indices are ``Select(x, d, i, n)``, ``stack`` is ``Cat`` of ``Unsqueeze``, every view-like reshape
is ``Reshape(x, static_shape)``, permute / transpose / movedim / t are ``Permute(x, perm)``; dims are normalized
to be non-negative, sizes come from FakeTensor meta. Pure ops (``tanh``, ``add``, ``linear``, ...) become
``Unary`` / ``Binary`` / ``Apply`` terms whose integer key names the op, its constant arguments and its types,
with a :class:`optimus_eq.recipe.Recipe` to lower it.

:class:`Normalization` is mixed into :class:`optimus_bridge.translate.Translator`, which supplies the row
writer (:class:`optimus_bridge.translation.RowWriter`: ``_new``, ``_term``, ``_size``, ...) and the vocabulary.
A handler raises :class:`optimus_bridge.fx_meta.Unsupported` for a spelling it does not know: the node stays
opaque.
"""

from __future__ import annotations

import torch
from torch.fx import Node

from optimus_bridge.fx_meta import Unsupported, concrete_int, dropout_draws, meta_val, node_arg, norm_dim
from optimus_eq.recipe import Recipe, Slot, einsum_operands


class Normalization:
    """The op handlers of the translator (module docstring): :meth:`_split` for the tuple-valued ops, and
    :meth:`_tensor_op`, which looks an op with one tensor result up in :attr:`WHOLE_NODE_OPS` (ops that read
    their node as a whole) or, after checking its first input, in :attr:`ONE_INPUT_OPS`, the vocabulary's
    reshape ops and its pure ops."""

    # -- split / chunk / unbind: a tuple of pieces ----------------------------------------------
    def _split(self, node: Node, name: str, val) -> None:
        kw = node.kwargs
        x = node.args[0] if node.args else kw.get("input", kw.get("self", kw.get("tensor")))  # torch.split(tensor=x)
        xv = self._term(x)
        x_val = meta_val(x)
        if not self._shaped(x_val) or not isinstance(val, (tuple, list)):
            raise Unsupported("split of a tensor without known shape")
        if not all(self._shaped(p) for p in val):
            raise Unsupported("split outputs without known shape")
        rank = x_val.dim()
        default_dim = 0
        dim = norm_dim(node_arg(node, 2 if name != "unbind" else 1, "dim", default_dim), rank)
        n = self._static_size(x_val.shape[dim])
        if name != "unbind":
            size_arg = node_arg(node, 1, "split_size_or_sections" if name == "split" else "chunks")
            if size_arg is None:
                size_arg = node.kwargs.get("split_size", node.kwargs.get("split_sizes"))
            # a SymInt argument whose value Dynamo specialized (``x.size(2)`` of a static dim) is an int
            items = size_arg if isinstance(size_arg, (list, tuple)) else [size_arg]
            if any(not isinstance(s, int) and concrete_int(s) is None for s in items):
                raise Unsupported("split sizes are not plain ints")
        vars_: list[int] = []
        start = 0
        for p in val:
            if name == "unbind":
                vars_.append(self._new("SelectIn", xv, dim, len(vars_), n))
            else:
                length = self._static_size(p.shape[dim])
                vars_.append(self._new("NarrowIn", xv, dim, start, length, n))
                start += length
        if name != "unbind" and start != n:
            raise Unsupported("split sections do not cover the tensor")
        self.t.pieces[node] = vars_

    # -- ops with one tensor result -------------------------------------------------------------
    def _tensor_op(self, node: Node, name: str, val) -> int:
        """The term of ``node``, op ``name``, whose value ``val`` is one tensor (Unsupported if unknown)."""
        whole = self.WHOLE_NODE_OPS.get(name)
        if whole is not None:
            return whole(self, node, name, val)
        x = node.args[0] if node.args else None
        xv = self._term(x)
        x_val = meta_val(x)
        if not self._shaped(x_val):
            raise Unsupported("input without known shape")
        if name not in self.vocab.FRESH_OPS and (val.dtype != x_val.dtype or val.device != x_val.device):
            raise Unsupported("a view that changes dtype or device (x.view(torch.int32))")
        op = self.ONE_INPUT_OPS.get(name)
        if op is None and name in self.vocab.RESHAPE_OPS:
            op = Normalization._reshape
        elif op is None and (name in self.vocab.UNARY_OPS or name in self.vocab.ARITH_OPS
                             or name in self.vocab.APPLY_OPS):
            op = Normalization._pure_op
        if op is None:
            raise Unsupported(name)
        return op(self, node, name, val, xv, x_val)

    def _einsum(self, node: Node, name: str, val) -> int:
        """einsum(equation, a, b) or einsum(equation, [a, b]): a pure op of two tensors."""
        _, operands = einsum_operands(node.args)
        if node.kwargs or len(operands) != 2 or not all(isinstance(a, Node) for a in operands):
            raise Unsupported("einsum with other than two tensor operands")
        return self._pure(node, name, val)

    def _narrow(self, node: Node, name: str, val, xv: int, x_val) -> int:
        rank = x_val.dim()
        dim = norm_dim(node_arg(node, 1, "dim"), rank)
        start, length = node_arg(node, 2, "start"), node_arg(node, 3, "length")
        if not isinstance(start, int) or not isinstance(length, int):
            raise Unsupported("narrow bounds are not ints")
        n = self._static_size(x_val.shape[dim])
        start = start % n if start < 0 else start
        return self._new("NarrowIn", xv, dim, start, length, n)

    def _unsqueeze(self, node: Node, name: str, val, xv: int, x_val) -> int:
        dim = norm_dim(node_arg(node, 1, "dim"), x_val.dim() + 1)
        return self._new("UnsqueezeIn", xv, dim)

    def _reshape(self, node: Node, name: str, val, xv: int, x_val) -> int:
        shape = self._shape(val.shape)
        if shape == self._shape(x_val.shape):
            return xv
        return self._new("ReshapeIn", xv, self._vec(shape))

    def _permute(self, node: Node, name: str, val, xv: int, x_val) -> int:
        """permute, transpose, movedim, t."""
        rank = x_val.dim()
        perm = self._perm(node, name, rank)
        if perm == list(range(rank)):
            return xv
        return self._new("PermuteIn", xv, self._vec(perm))

    def _contiguous(self, node: Node, name: str, val, xv: int, x_val) -> int:
        if node_arg(node, 1, "memory_format", torch.contiguous_format) is not torch.contiguous_format:
            raise Unsupported("contiguous with a memory format")
        return xv

    def _dropout(self, node: Node, name: str, val, xv: int, x_val) -> int:
        if not dropout_draws(node):
            return xv
        if _fallback_random():  # the user wants eager's random stream
            raise Unsupported("dropout in training mode with fallback_random")
        # random: a term with a key of its own (never merged with another dropout), which
        # the batched dropout may fuse (docs/DESIGN.md, "Safety": random ops)
        return self._pure(node, name, val, unique=True)

    def _pure_op(self, node: Node, name: str, val, xv: int, x_val) -> int:
        return self._pure(node, name, val)

    def _perm(self, node: Node, name: str, rank: int) -> list[int]:
        if name == "t":
            return list(range(rank))[::-1] if rank == 2 else list(range(rank))
        if name == "permute":
            dims = node.args[1:] if node.op == "call_method" else (node_arg(node, 1, "dims"),)
            if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
                dims = dims[0]
            if not dims and "dims" in node.kwargs:
                dims = node.kwargs["dims"]
            perm = [norm_dim(d, rank) for d in dims]
            if sorted(perm) != list(range(rank)):
                raise Unsupported("not a permutation")
            return perm
        if name == "transpose":
            d0, d1 = norm_dim(node_arg(node, 1, "dim0"), rank), norm_dim(node_arg(node, 2, "dim1"), rank)
            perm = list(range(rank))
            perm[d0], perm[d1] = perm[d1], perm[d0]
            return perm
        src, dst = node_arg(node, 1, "source"), node_arg(node, 2, "destination")
        if not isinstance(src, int) or not isinstance(dst, int):
            raise Unsupported("movedim with several dims")
        src, dst = norm_dim(src, rank), norm_dim(dst, rank)
        order = [d for d in range(rank) if d != src]
        order.insert(dst, src)
        return order


    def _getitem(self, node: Node, name: str, val) -> int:
        src, idx = node.args
        if src in self.t.pieces:
            if not isinstance(idx, int):
                raise Unsupported("tuple index is not an int")
            return self.t.pieces[src][idx]
        xv = self._term(src)
        x_val = meta_val(src)
        if not self._shaped(x_val):
            raise Unsupported("input without known shape")
        items = list(idx) if isinstance(idx, tuple) else [idx]
        if sum(1 for i in items if i is Ellipsis) > 1:
            raise Unsupported("two ellipses")
        consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
        if consumed > x_val.dim():
            raise Unsupported("too many indices")
        expanded: list = []
        for i in items:
            if i is Ellipsis:
                expanded.extend([slice(None)] * (x_val.dim() - consumed))
            else:
                expanded.append(i)
        cur, shape = xv, list(self._shape(x_val.shape))
        dim = 0
        for i in expanded:
            if i is None:
                cur = self._new("UnsqueezeIn", cur, dim)
                shape.insert(dim, 1)
                dim += 1
            elif isinstance(i, bool) or not isinstance(i, (int, slice)):
                raise Unsupported("advanced or symbolic index")
            elif isinstance(i, int):
                n = shape[dim]
                if n < 0:  # a symbolic dim: Dynamo's trace checked i < n; Select carries the token
                    if i < 0:
                        raise Unsupported("negative index into a symbolic dim")
                    cur = self._new("SelectIn", cur, dim, i, n)
                    shape.pop(dim)
                    continue
                if not -n <= i < n:
                    raise Unsupported("index out of range")
                cur = self._new("SelectIn", cur, dim, i % n, n)
                shape.pop(dim)
            else:
                if any(isinstance(v, Node) for v in (i.start, i.stop, i.step)):
                    raise Unsupported("symbolic slice")
                if i == slice(None):
                    dim += 1
                    continue
                n = shape[dim]
                if n < 0:
                    raise Unsupported("slice of a symbolic dim")
                start, stop, step = i.indices(n)
                if step != 1:
                    raise Unsupported("strided slice")
                length = max(0, stop - start)
                if (start, length) != (0, n):
                    cur = self._new("NarrowIn", cur, dim, start, length, n)
                    shape[dim] = length
                dim += 1
        if tuple(shape) != self._shape(val.shape):
            raise Unsupported("index result shape disagrees with meta")
        return cur

    def _cat(self, node: Node, name: str, val) -> int:
        tensors = node_arg(node, 0, "tensors")
        dim_arg = node_arg(node, 1, "dim", node.kwargs.get("axis", 0))
        if isinstance(tensors, Node) and tensors in self.t.pieces:
            elems = list(self.t.pieces[tensors])
            metas = list(meta_val(tensors))
        elif isinstance(tensors, (list, tuple)) and tensors:
            elems = [self._term(a) for a in tensors]
            metas = [meta_val(a) for a in tensors]
        else:
            raise Unsupported("cat of an unknown list")
        if any(m.dtype != val.dtype or m.device != val.device for m in metas):
            raise Unsupported("cat with type promotion")
        rank = val.dim()
        dim = norm_dim(dim_arg, rank)
        if name == "cat" and any(m.dim() != rank for m in metas):
            raise Unsupported("legacy cat of 1-d empty tensors")
        if name == "cat":  # the rules add sizes along the cat dim (CatOffset): static there
            for m in metas:
                self._static_size(m.shape[dim])
        if name == "stack":
            elems = [self._new("UnsqueezeIn", e, dim) for e in elems]
        return self._new("CatIn", self._list(dim, elems))

    def _pure(self, node: Node, name: str, val, unique: bool = False) -> int:
        """Unary / Binary / Apply of a deterministic op; its key names the op, its constant args and the
        dtypes and devices of its inputs and output. ``unique``: a random op, an ``Apply`` whose key is
        unique to ``node`` (never merged with another node)."""
        slots: list[int] = []
        in_types: list[tuple[str, str]] = []

        def sub(a):
            if isinstance(a, Node):
                slots.append(self._term(a))
                m = meta_val(a)
                in_types.append(_type_text(m.dtype, m.device) if isinstance(m, torch.Tensor) else ("?", "?"))
                return Slot(len(slots) - 1)
            if isinstance(a, (list, tuple)):
                return type(a)(sub(x) for x in a)
            if isinstance(a, dict):
                return {k: sub(v) for k, v in a.items()}
            if isinstance(a, (int, float, bool, str, type(None), torch.dtype, torch.device, torch.memory_format)):
                return a
            raise Unsupported(f"argument of type {type(a).__name__}")

        try:
            args, kwargs = sub(tuple(node.args)), sub(dict(node.kwargs))
        finally:
            del sub  # a recursive closure is a reference cycle: it would keep the Translator alive until a GC
        if not slots:
            raise Unsupported("no tensor input")
        types = (tuple(in_types), _type_text(val.dtype, val.device))
        key = self._key(f"{name}|{node.op}|{_target_name(node.target)}|{args!r}|{sorted(kwargs.items())!r}|"
                        f"{types!r}" + (f"|node:{node.name}" if unique else ""))
        self.t.recipes[key] = Recipe(name, node.op, node.target, args, kwargs)
        self.t.types[key] = types
        if unique:
            return self._new("ApplyIn", key, self._arglist(slots))
        if len(slots) == 1 and (name in self.vocab.UNARY_OPS or name in self.vocab.ARITH_OPS):
            return self._new("UnaryIn", key, slots[0])
        if len(slots) == 2 and name in self.vocab.ARITH_OPS:
            return self._new("BinaryIn", key, slots[0], slots[1])
        return self._new("ApplyIn", key, self._arglist(slots))

    #: ops that read their node as a whole (no single tensor input checked first)
    WHOLE_NODE_OPS = {"getitem": _getitem, "einsum": _einsum, "cat": _cat, "stack": _cat}
    #: ops with one tensor input (the first argument); the vocabulary's reshape and pure ops come after
    ONE_INPUT_OPS = {"narrow": _narrow, "unsqueeze": _unsqueeze, "permute": _permute, "transpose": _permute,
                     "movedim": _permute, "t": _permute, "contiguous": _contiguous, "dropout": _dropout}


def _fallback_random() -> bool:
    """Inductor's ``fallback_random``: the user asked for eager's random numbers, so random ops stay put."""
    import torch._inductor.config as inductor_config

    return bool(inductor_config.fallback_random)


_TYPE_TEXT: dict = {}


def _type_text(dtype, device) -> tuple[str, str]:
    """``(str(dtype), str(device))``, memoized (read for every tensor argument of every pure op)."""
    got = _TYPE_TEXT.get((dtype, device))
    if got is None:
        got = _TYPE_TEXT[(dtype, device)] = (str(dtype), str(device))
    return got


def _target_name(target) -> str:
    if isinstance(target, str):
        return target
    mod = getattr(target, "__module__", None) or ""
    return f"{mod}.{getattr(target, '__qualname__', getattr(target, '__name__', repr(target)))}"

