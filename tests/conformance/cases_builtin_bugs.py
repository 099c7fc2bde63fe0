"""Cases where the built-in Optimus passes are known to go wrong (issue 3's list). Each is a case like
the ported ones, with ``builtin_bug=True``: ours must be right on both strategies; what the built-in of
the installed torch does is recorded in docs/conformance.md, not asserted (a later torch may fix it)."""

from __future__ import annotations

import torch

from conformance import Case, rand

I = "issue 3: built-in known to go wrong"
SEVEN = {"normalization_pass": {}, "remove_split_with_size_one_pass": {}, "merge_getitem_cat_pass": {},
         "merge_splits_pass": {}, "mutate_cat_pass": {}, "split_cat_pass": {}, "unbind_stack_pass": {}}


def permuted_unbind_stack(x):
    u = torch.unbind(x, 1)
    return torch.stack([u[2], u[0], u[1], u[3]], 1)


def permuted_unbind_cat(x):
    u = torch.unbind(x, 1)
    return torch.cat([u[1], u[0], u[3], u[2]], 1)


def permuted_unbind_stack_other_dim(x):
    u = torch.unbind(x, 0)
    return torch.stack([u[3], u[2], u[1], u[0]], 1)


def permuted_split_cat(x):
    s = torch.split(x, 2, 1)
    return torch.cat([s[1], s[0], s[2], s[3]], 1)


def piece_twice_split_cat(x):
    s = torch.split(x, 2, 1)
    return torch.cat([s[0], s[0], s[1], s[2], s[3]], 1)


def piece_twice_unbind_stack(x):
    u = torch.unbind(x, 1)
    return torch.stack([u[0], u[1], u[1], u[2], u[3]], 1)


def two_splits_cat(x, y):
    a, b = torch.split(x, 2, 1), torch.split(y, 2, 1)
    return torch.cat([a[0], a[1], b[2], b[3]], 1)


def two_splits_interleaved_cat(x, y):
    a, b = torch.split(x, 2, 1), torch.split(y, 2, 1)
    return torch.cat([a[0], b[1], a[2], b[3]], 1)


def two_unbinds_stack(x, y):
    a, b = torch.unbind(x, 1), torch.unbind(y, 1)
    return torch.stack([a[0], a[1], b[2], b[3]], 1)


def two_unbinds_cat_to_view(x, y):
    a, b = torch.unbind(x, 0), torch.unbind(y, 0)
    return torch.cat([a[0], a[1], b[2], b[3]], 1)


class UnevenSplitAten(torch.nn.Module):
    """Width 10 split into pieces of 4 (4, 4, 2) at Aten-IR, pieces concatenated with another tensor."""

    def forward(self, x, z):
        s = torch.ops.aten.split.Tensor(x, 4, 1)
        return torch.ops.aten.cat.default([s[0], s[1], s[2], z], 1), torch.ops.aten.cat.default([s[1], s[2]], 1)


class AddSubAlpha(torch.nn.Module):
    """Independent adds and subs with different alphas: a group must not mix alphas."""

    def forward(self, *xs):
        outs = [torch.add(xs[i], xs[i + 1], alpha=a) for i, a in zip(range(0, 8, 2), (1, 2, 1, 3))]
        outs += [torch.sub(xs[i], xs[i + 1], alpha=a) for i, a in zip(range(0, 8, 2), (2, 1, 2, 1))]
        return torch.cat(outs, 1)


class MixedDtypes(torch.nn.Module):
    """tanh/relu/sigmoid on fp32 and bf16 pieces side by side: never fused together, dtypes kept."""

    def forward(self, x, y):
        xs, ys = torch.split(x, 4, 1), torch.split(y, 4, 1)
        return [torch.tanh(t) for t in xs] + [torch.tanh(t) for t in ys] + [torch.relu(t) for t in (*xs, *ys)]


class MutatedFusedOutputs(torch.nn.Module):
    """Outputs of a clamp group mutated in place, one through a view, with gradients (clamp's backward
    reads its input, so mutating its output is legal in eager)."""

    def forward(self, x):
        r = [torch.clamp(t, -1.0, 1.0) for t in torch.split(x, 4, 1)]
        r[0].add_(1.0)
        r[1].view(-1).mul_(2.0)
        return torch.cat(r, 1) * 3.0


def _b(name, build, inputs, pre=None, post=None, note="", **kw) -> Case:
    return Case(name=f"bug_{name}", upstream=I, build=build, inputs=inputs, pre_grad=pre, post_grad=post,
                builtin_bug=True, note=note, **kw)


X = lambda: [rand(3, 4, 5)]  # noqa: E731
X2 = lambda: [rand(3, 8, 5)]  # noqa: E731
XY = lambda: [rand(3, 8, 5), rand(3, 8, 5, seed=1)]  # noqa: E731
UXY = lambda: [rand(4, 3, 5), rand(4, 3, 5, seed=1)]  # noqa: E731

CASES = [
    _b("permuted_unbind_stack", lambda: permuted_unbind_stack, X, SEVEN, note="unbind pieces stacked out of order"),
    _b("permuted_unbind_cat", lambda: permuted_unbind_cat, X, {"unbind_cat_to_view_pass": {}, **SEVEN},
       note="unbind pieces concatenated out of order"),
    _b("permuted_unbind_stack_other_dim", lambda: permuted_unbind_stack_other_dim, lambda: [rand(4, 3, 5)],
       {"unbind_stack_to_slices_pass": {}, **SEVEN}, note="reversed unbind pieces stacked along another dim"),
    _b("permuted_split_cat", lambda: permuted_split_cat, X2, {"split_cat_to_slices_pass": {}, **SEVEN}),
    _b("piece_twice_split_cat", lambda: piece_twice_split_cat, X2, {"split_cat_to_slices_pass": {}, **SEVEN},
       note="one split piece twice in a cat"),
    _b("piece_twice_unbind_stack", lambda: piece_twice_unbind_stack, X, {"unbind_stack_to_slices_pass": {}, **SEVEN},
       note="one unbind piece twice in a stack"),
    _b("two_splits_cat", lambda: two_splits_cat, XY, {"split_cat_to_slices_pass": {}, **SEVEN},
       note="a cat of pieces of splits of two different tensors"),
    _b("two_splits_interleaved_cat", lambda: two_splits_interleaved_cat, XY, {"split_cat_to_slices_pass": {}, **SEVEN}),
    _b("two_unbinds_stack", lambda: two_unbinds_stack, lambda: [rand(3, 4, 5), rand(3, 4, 5, seed=1)],
       {"unbind_stack_to_slices_pass": {}, **SEVEN}, note="a stack of pieces of unbinds of two different tensors"),
    _b("two_unbinds_cat_to_view", lambda: two_unbinds_cat_to_view, UXY, {"unbind_cat_to_view_pass": {}, **SEVEN}),
    _b("uneven_split_aten", UnevenSplitAten, lambda: [rand(6, 10), rand(6, 3, seed=1)],
       post={"normalization_aten_pass": {}, "split_cat_aten_pass": {"threshold_to_cat": 2}},
       note="width 10 split in pieces of 4 at Aten-IR"),
    _b("add_sub_alpha", AddSubAlpha, lambda: [rand(4, 6, seed=i) for i in range(8)],
       post={"batch_aten_add": {}, "batch_aten_sub": {}}, note="add/sub with different alpha in one group"),
    _b("mixed_dtypes", MixedDtypes, lambda: [rand(3, 16), rand(3, 16, dtype=torch.bfloat16, seed=1)],
       pre={"batch_tanh": {}, "batch_relu": {}}, note="fp32 and bf16 ops of one kind side by side"),
    _b("mutated_fused_outputs", MutatedFusedOutputs, lambda: [rand(3, 16)], pre={"batch_clamp": {}},
       note="outputs of a fused group mutated in place, through a view too"),
]
