"""The vertical split/cat family (Optimus pre-grad: torch/_inductor/fx_passes/split_cat.py), as rewrites
over the narrow/select canonical forms of :mod:`optimus_eq.terms`.

Rules whose right-hand side is a bare variable guard it with ``(shape v)``: in egglog 13.2.0 a query
can bind a variable to a stale e-class id (one with no e-node) after a self-loop e-node was rebuilt,
and a union with it merges unrelated classes (found here: tanh(x) merged with x). Stale ids have no
``shape`` row, so the guard filters them (docs/DESIGN.md, "egglog 13.2.0 issues").

Every split, chunk or slice output is ``Narrow(x, d, start, length, n)``, every unbind output or integer
index is ``Select(x, d, i, n)``, and ``stack`` is ``Cat`` of ``Unsqueeze``. A cat then folds when its list
holds a run of adjacent narrows of one tensor, found by the ``RunEnd``/``RunRest`` analysis: order,
source and sizes are checked by construction (a permuted cat, or pieces of two tensors, never fold).
"""

from __future__ import annotations

from dataclasses import replace

from optimus_eq.registry import Pattern, Rule, renamed
from optimus_eq.terms import MAX_RANK

_HEAD = "(Cons d (Narrow x d s l n) R)"
_RUN = ("(= shx (shape x))", f"(= e (RunEnd {_HEAD} x d s))", f"(= R2 (RunRest {_HEAD} x d s e))", "(> e (+ s l))")
_MERGED = "(Cons d (Narrow x d s (- e s) n) R2)"

normalization_pass = Pattern(
    name="normalization_pass",
    levels=("pre_grad",),
    kind="canonical",
    rules=(),
    doc="""Every spelling of split, chunk, unbind, cat and stack becomes one canonical form.

    torch.split(x, 2, -1) / x.split([2, 2], dim=1) / torch.chunk(x, 2, 1) / x[:, 0:2]
        => Narrow(x, 1, 0, 2, 4), Narrow(x, 1, 2, 2, 4)
    torch.concat / torch.concatenate / torch.cat  => Cat;  torch.stack(xs, d) => Cat(Unsqueeze(x, d)...)
    Realized by the bridge's translator (optimus_bridge.translate), which counts each node it normalizes.
    """,
)

#: A length-1 slice reshaped to drop its dim is a select: x[:, i:i+1].view(B, D) == x.select(1, i)
#: (n == 1 is left out: then the slice is x, and select_size_one states the same equality backwards).
SQUEEZED_UNIT_PIECE = Rule("remove_split_with_size_one/squeezed_unit_piece", "(Reshape (Narrow x d i 1 n) v)",
                           "(Select x d i n)", ("(> n 1)", "(= sh (shape x))", "(= v (vec-remove sh d))"))

remove_split_with_size_one_pass = Pattern(
    name="remove_split_with_size_one_pass",
    levels=("pre_grad", "post_grad"),
    kind="vertical",
    rules=(
        Rule("remove_split_with_size_one/narrow_full", "(Narrow x d 0 n n)", "x", ("(= sh (shape x))",)),
        Rule("remove_split_with_size_one/select_size_one", "(Select x d 0 1)", "(Reshape x (vec-remove sh d))",
             ("(= sh (shape x))",)),
        SQUEEZED_UNIT_PIECE,
    ),
    doc="""A split with one section, or an unbind of a size-1 dim, is the tensor itself (or a squeeze); a
    size-1 split piece squeezed is an unbind piece (upstream does this one in split_cat_pass's
    merge_split_squeeze; here it comes first so that the stack rules see unbind pieces).

    torch.split(x, 4, 1)[0]  where x: [B, 4]   =>  x
    torch.unbind(x, 1)[0]    where x: [B, 1, D] =>  x.reshape(B, D)
    torch.split(x, 1, 1)[i].squeeze(1)          =>  x.select(1, i)
    """,
)

merge_splits_pass = Pattern(
    name="merge_splits_pass",
    levels=("pre_grad", "post_grad"),
    kind="vertical",
    rules=(
        Rule("merge_splits/narrow_narrow", "(Narrow (Narrow x d s1 l1 n) d s2 l2 m)", "(Narrow x d (+ s1 s2) l2 n)",
             ("(= sh (shape x))",)),
        Rule("merge_splits/select_narrow", "(Select (Narrow x d s l n) d i m)", "(Select x d (+ s i) n)",
             ("(= sh (shape x))",)),
    ),
    doc="""A split of a split piece along the same dim is one split of the original tensor.

    a, b = torch.split(x, [4, 4], 1); c, d = torch.split(b, [1, 3], 1)
        =>  c = x[:, 4:5], d = x[:, 5:8]
    """,
)

split_of_cat_pass = Pattern(
    name="split_of_cat_pass",
    levels=("pre_grad",),
    kind="vertical",
    rules=(
        Rule("split_of_cat/whole_input", "(Narrow (Cat L) d s l n)", "x",
             ("(CatOffset L (Cons d x R) d s)", "(= shx (shape x))", "(= l (vec-get shx d))", "(> l 0)")),
    ),
    doc="""A split piece of a cat that is exactly one of the cat's inputs is that input (no pass of
    upstream Optimus; Inductor's pointwise cat lowering gets the same effect when the cat has at most
    ``max_pointwise_cat_inputs`` inputs, by inlining the cat into its readers).

    p = torch.cat([a, b, c], 1); x, y, z = torch.split(p, [2, 3, 4], 1)  =>  x, y, z = a, b, c
    torch.stack([d, *torch.split(torch.cat(bags, 1), D, 1)], 1)  =>  torch.stack([d, *bags], 1)
    (DLRM's KeyedTensor: pooled embeddings concatenated, then split per feature. Without this rule
    the stack became a cat of d and a view of the pooled cat: two copies where one suffices)
    A piece that straddles two inputs, or covers part of one, is left alone; so is a zero-length piece
    (every zero-length input at its offset would match, and the rule merged x with x.detach() where
    both had zero length: an e-graph extraction refuses as inconsistent; found by the fuzzer). The input is found by the
    ``CatOffset`` analysis (:mod:`optimus_eq.terms`): n rows per narrowed cat of n inputs.
    Pre-grad only: in a backward graph the gradient of a cat is split, and those pieces are graph
    outputs whose strides Inductor has fixed (views of the cat); the post-grad lowering cannot re-stride
    an output, so the rewrite would make the whole graph fall back.
    """,
)

unbind_stack_pass = Pattern(
    name="unbind_stack_pass",
    levels=("pre_grad",),
    kind="vertical",
    rules=(Rule("unbind_stack/unsqueeze_select", "(Unsqueeze (Select x d i n) d)", "(Narrow x d i 1 n)",
                ("(= sh (shape x))",)),),
    doc="""A stacked unbind piece is a length-1 slice, so unbind -> stack in order folds to the tensor.

    torch.stack(torch.unbind(x, 1), 1)       =>  x
    torch.stack([x.unbind(1)[2], x.unbind(1)[0]], 1)  =>  cat of x[:, 2:3] and x[:, 0:1] (a permuted
        stack keeps its order; no fold)
    """,
)

unbind_stack_to_slices_pass = Pattern(
    name="unbind_stack_to_slices_pass",
    levels=("pre_grad",),
    kind="vertical",
    rules=(
        Rule(
            "unbind_stack_to_slices/other_dim",
            "(Unsqueeze (Select x d i n) c)",
            "(Unsqueeze (Select (Permute x p) c i n) c)",
            ("(!= c d)", "(= sh (shape x))", "(= p (MovePerm (vec-length sh) d c))"),
        ),
    ),
    doc="""Unbind pieces stacked along another dim are slices of a permuted view.

    x: [B, N, D];  torch.stack(torch.unbind(x, 1), 2)  =>  x.permute(0, 2, 1)
    (x.select(1, i) is x.movedim(1, 2).select(2, i); stacked along 2 they become adjacent slices)
    """,
)


def unflatten_shape(dim: int, outer: str, inner: str) -> str:
    """egglog text of the shape ``sh`` (any rank > ``dim``) with dim ``dim`` split into ``[outer, inner]``:
    the target of ``x.unflatten(dim, (outer, inner))``. egglog's vectors have no insert, so the sizes after
    ``dim`` are ``sh`` with its first ``dim + 1`` entries removed."""
    head = " ".join([f"(vec-get sh {i})" for i in range(dim)] + [outer, inner])
    tail = "sh"
    for _ in range(dim + 1):
        tail = f"(vec-remove {tail} 0)"
    return f"(vec-append (vec-of {head}) {tail})"


#: the ranks of x the split_stack_to_cats rules accept: above the split dim, below MAX_RANK (the view adds a dim)
_RANKS = ("(= sh (shape x))", f"(< (vec-length sh) {MAX_RANK})")


def _split_stack_rule(dim: int) -> Rule:
    """``Unsqueeze(Narrow(x, dim, s, l, n), dim)`` is a length-1 slice of x viewed as [.., n/l, l, ..] (one
    rule for every rank: one rule per rank cost each rule pass a join per rank)."""
    return Rule(
        f"split_stack_to_cats/dim{dim}",
        f"(Unsqueeze (Narrow x {dim} s l n) {dim})",
        f"(Narrow (Reshape x {unflatten_shape(dim, '(/ n l)', 'l')}) {dim} (/ s l) 1 (/ n l))",
        (*_RANKS, f"(> (vec-length sh) {dim})", "(> l 0)", "(>= n 0)", "(= (% s l) 0)", "(= (% n l) 0)"),
    )


def _split_stack_other_dim_rule(dim: int) -> Rule:
    """``Unsqueeze(Narrow(x, dim, s, l, n), c)``, c != dim, is a length-1 slice at c of x viewed as
    [.., n/l, l, ..] with the n/l dim moved to c (stacking along c the pieces x.split(l, dim))."""
    return Rule(
        f"split_stack_to_cats/dim{dim}_other",
        f"(Unsqueeze (Narrow x {dim} s l n) c)",
        f"(Narrow (Permute (Reshape x {unflatten_shape(dim, '(/ n l)', 'l')}) p) c (/ s l) 1 (/ n l))",
        ("(!= c " + str(dim) + ")", *_RANKS, f"(> (vec-length sh) {dim})", "(> l 0)", "(>= n 0)",
         "(= (% s l) 0)", "(= (% n l) 0)", f"(= p (MovePerm (+ (vec-length sh) 1) {dim} c))"),
    )


split_stack_to_cats_pass = Pattern(
    name="split_stack_to_cats_pass",
    levels=("pre_grad",),
    kind="vertical",
    rules=tuple(_split_stack_rule(d) for d in range(MAX_RANK - 1))
    + tuple(_split_stack_other_dim_rule(d) for d in range(MAX_RANK - 1)),
    doc="""Equal split pieces stacked along the split dim are slices of an unflattening view; stacked
    along another dim, of that view with the pieces' dim moved there.

    x: [B, N * D];  torch.stack(torch.split(x, D, 1), 1)  =>  x.view(B, N, D)
    x: [B, N * D];  torch.stack(torch.split(x, D, 1), 0)  =>  x.view(B, N, D).permute(1, 0, 2)
    (the second is how the stacked inputs of a batch_linear over split pieces become a view)
    """,
)

unbind_cat_to_view_pass = Pattern(
    name="unbind_cat_to_view_pass",
    levels=("pre_grad",),
    kind="vertical",
    rules=(
        Rule(
            "unbind_cat_to_view/select_in_cat",
            "(Cons d (Select x d i n) R)",
            "(Cons d (Narrow (Reshape x (vec-set (vec-remove sh d) d (* n k))) d (* i k) k (* n k)) R)",
            ("(= sh (shape x))", "(< (+ d 1) (vec-length sh))", "(= k (vec-get sh (+ d 1)))", "(>= k 0)", "(>= n 0)"),
        ),
        Rule(
            "unbind_cat_to_view/other_dim",
            "(Cons c (Select x d i n) R)",
            "(Cons c (Select (Permute x p) c i n) R)",
            ("(!= c d)", "(= sh (shape x))", "(= p (MovePerm (vec-length sh) d c))"),
        ),
    ),
    doc="""Unbind pieces concatenated along the unbind dim are slices of a flattening view; along another
    dim c, first x.select(d, i) == x.movedim(d, c).select(c, i).

    x: [B, N, D];  torch.cat(torch.unbind(x, 1), 1)  =>  x.reshape(B, N * D)
    (each piece x.select(1, i) is x.reshape(B, N*D)[:, i*D:(i+1)*D]; adjacent slices then merge)
    x: [N, B, D];  torch.cat(torch.unbind(x, 0), 1)  =>  x.permute(1, 0, 2).reshape(B, N * D)
    (along another dim c: x.select(d, i) is x.movedim(d, c).select(c, i), then as above)
    Y: [N, B, O];  torch.cat(torch.unbind(Y, 0), 1)  =>  Y.permute(1, 0, 2).reshape(B, N * O)
    (the cat after a batch_linear over split pieces)
    """,
)

_FULL_RUN = Rule("split_cat/full_run", _HEAD, "(Cons d x R2)", _RUN + ("(= s 0)", "(= e n)"))


def run_base(dim: int, full: bool) -> tuple[str, tuple[str, ...]]:
    """The tensor that a run ``s..e`` of pieces of x along ``dim`` covers, and the guard of that variant:
    x itself when the run is all of x (so that no full narrow is left for another pattern to remove),
    else ``x.narrow(dim, s, e - s)``."""
    if full:
        return "x", ("(= s 0)", "(= e n)")
    return f"(Narrow x {dim} s (- e s) n)", ("(!= (- e s) n)",)


def _cat_other_dim_rule(dim: int, full: bool) -> Rule:
    """A cat along c != dim whose inputs are exactly the adjacent equal pieces x[.., s + i*l : s + (i+1)*l]
    (i < m, m >= 2) of x along ``dim`` is ``x.narrow(dim, s, m*l).unflatten(dim, (m, l)).movedim(dim, c)
    .flatten(c, c + 1)``: piece i is the unflattened view's select(dim, i) == (moved).select(c, i), and a
    cat along c of a tensor's selects along c is its flatten of c and c + 1."""
    m = "(/ (- e s) l)"
    base, guard = run_base(dim, full)
    return Rule(
        f"split_cat/other_dim{dim}{'_whole' if full else ''}",
        "(Cat L)",
        f"(Reshape (Permute (Reshape {base} {unflatten_shape(dim, m, 'l')}) p) "
        f"(vec-set (vec-set sh {dim} l) c (* {m} (vec-get sh c))))",
        (f"(= L (Cons c (Narrow x {dim} s l n) R))", "(= sh (shape x))",
         f"(= e (OtherRunEnd L x {dim} c l s))", f"(= (Nil) (OtherRunRest L x {dim} c l s e))", "(> e (+ s l))",
         *guard, "(>= (vec-get sh c) 0)", f"(= p (MovePerm (+ (vec-length sh) 1) {dim} c))"),
    )


split_cat_pass = Pattern(
    name="split_cat_pass",
    levels=("pre_grad",),
    kind="vertical",
    rules=(_FULL_RUN,)
    + tuple(_cat_other_dim_rule(d, full) for d in range(MAX_RANK - 1) for full in (True, False)),
    doc="""A cat of all split pieces of x in order, along the split dim, is x itself; extra cat inputs
    before or after the run stay. A cat that holds only equal split pieces in order, along another dim,
    is one unflatten / movedim / flatten of x (upstream: torch/_inductor/fx_passes/split_cat.py,
    ``SplitCatSimplifier.get_transform_params``).

    a, b, c = torch.split(x, [2, 3, 4], 1); torch.cat([y, a, b, c], 1)  =>  torch.cat([y, x], 1)
    torch.cat([b, a], 1)  =>  unchanged (permuted)
    x: [B, 8 * 4, H, W];  torch.cat(torch.split(x, 4, 1), 2)
        =>  x.reshape(B, 8, 4, H, W).permute(0, 2, 1, 3, 4).reshape(B, 4, 8 * H, W)
    (a copy, like the cat it replaces: one kernel either way. Only when the pieces are the whole cat: with
    other inputs the flatten would be a copy more, which upstream pays and we do not. A run over part of
    x, e.g. pieces 1 and 2 of the 8 above, starts from the narrow x[:, 4:12].)
    """,
)

merge_getitem_cat_pass = Pattern(
    name="merge_getitem_cat_pass",
    levels=("pre_grad",),
    kind="vertical",
    rules=(
        Rule("merge_getitem_cat/prefix_run", _HEAD, _MERGED, _RUN + ("(= s 0)", "(!= e n)")),
        Rule("merge_getitem_cat/inner_run", _HEAD, _MERGED, _RUN + ("(!= s 0)",)),
    ),
    doc="""Adjacent split pieces inside a cat merge into one slice (the cat keeps its other inputs).

    a, b, c, d = torch.split(x, 2, 1); torch.cat([b, c, y], 1)  =>  torch.cat([x[:, 2:6], y], 1)
    """,
)

mutate_cat_pass = Pattern(
    name="mutate_cat_pass",
    levels=("pre_grad",),
    kind="vertical",
    rules=(Rule("mutate_cat/single_input", "(Cat (Cons d a (Nil)))", "a", ("(= sh (shape a))",)),),
    doc="""A cat left with a single input (after its pieces merged) is that input: a copy becomes a view.

    a, b, c, d = torch.split(x, 2, 1); torch.cat([b, c], 1)  =>  x[:, 2:6]
    """,
)

#: split_cat_pass without its other-dim rules, for the patterns that reuse its run algebra (upstream's
#: split_cat_to_slices and the post-grad split/cat passes fold cats along the split dim only).
split_cat_same_dim = replace(split_cat_pass, rules=(_FULL_RUN,))


split_cat_to_slices_pass = Pattern(
    name="split_cat_to_slices_pass",
    levels=("pre_grad",),
    kind="vertical",
    rules=renamed("split_cat_to_slices", split_cat_same_dim.rules + merge_getitem_cat_pass.rules
                  + mutate_cat_pass.rules),
    doc="""Consecutive split pieces inside a cat become one slice of the split's input (all pieces: the
    input itself); a cat left with one input is removed.

    a, b, c, d = torch.split(x, 2, 1); torch.cat([y, a, b, c, d], 1)  =>  torch.cat([y, x], 1)
    torch.cat([y, b, c], 1)  =>  torch.cat([y, x[:, 2:6]], 1);   torch.cat([b, c], 1)  =>  x[:, 2:6]

    Upstream (torch/_inductor/fx_passes/split_cat.py, ``split_cat_to_slices``) rewrites a cat of split
    getitems with ``construct_cat_args``: a run of consecutive getitems of one split becomes a slice when
    it is at least ``threshold_to_cat`` long (default 10), the whole split becomes its input. Here the
    pattern is an alias of the run algebra: its rules are those of split_cat_pass (full run),
    merge_getitem_cat_pass (partial run) and mutate_cat_pass (single input), under their own names so
    that it can be selected alone. ``threshold_to_cat`` is accepted and stored on the selection but not
    used: a merged run is never more expensive than its pieces (a view instead of a copy per piece).
    """,
)
