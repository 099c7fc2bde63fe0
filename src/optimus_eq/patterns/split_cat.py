"""The vertical split/cat family (Optimus pre-grad: torch/_inductor/fx_passes/split_cat.py), as rewrites
over the narrow/select canonical forms of :mod:`optimus_eq.terms`, and the view-chain algebra it leans on
(reshapes fold, a reshape to the tensor's own shape is the tensor).

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

from optimus_eq.registry import BOTH_LEVELS, PRE_GRAD, Rule, canonical, renamed, vertical
from optimus_eq.terms import MAX_RANK

_HEAD = "(Cons d (Narrow x d s l n) R)"
_RUN = ("(= shx (shape x))", f"(= e (RunEnd {_HEAD} x d s))", f"(= R2 (RunRest {_HEAD} x d s e))", "(> e (+ s l))")
_MERGED = "(Cons d (Narrow x d s (- e s) n) R2)"

normalization_pass = canonical("normalization_pass", PRE_GRAD,
    doc="""Every spelling of split, chunk, unbind, cat and stack becomes one canonical form.

    torch.split(x, 2, -1) / x.split([2, 2], dim=1) / torch.chunk(x, 2, 1) / x[:, 0:2]
        => Narrow(x, 1, 0, 2, 4), Narrow(x, 1, 2, 2, 4)
    torch.concat / torch.concatenate / torch.cat  => Cat;  torch.stack(xs, d) => Cat(Unsqueeze(x, d)...)
    Realized by the bridge's translator (optimus_bridge.translate), which counts each node it normalizes.
    """, builtin=PRE_GRAD)

#: A length-1 slice reshaped to drop its dim is a select: x[:, i:i+1].view(B, D) == x.select(1, i)
#: (n == 1 is left out: then the slice is x, and select_size_one states the same equality backwards).
SQUEEZED_UNIT_PIECE = Rule("remove_split_with_size_one/squeezed_unit_piece", "(Reshape (Narrow x d i 1 n) v)",
                           "(Select x d i n)", ("(> n 1)", "(= sh (shape x))", "(= v (vec-remove sh d))"))

remove_split_with_size_one_pass = vertical("remove_split_with_size_one_pass", BOTH_LEVELS, rules=(
    Rule("remove_split_with_size_one/narrow_full", "(Narrow x d 0 n n)", "x", ("(= sh (shape x))",)),
    Rule("remove_split_with_size_one/select_size_one", "(Select x d 0 1)", "(Reshape x (vec-remove sh d))",
         ("(= sh (shape x))",)),
    SQUEEZED_UNIT_PIECE,
), doc="""A split with one section, or an unbind of a size-1 dim, is the tensor itself (or a squeeze); a
    size-1 split piece squeezed is an unbind piece (upstream does this one in split_cat_pass's
    merge_split_squeeze; here it comes first so that the stack rules see unbind pieces).

    torch.split(x, 4, 1)[0]  where x: [B, 4]   =>  x
    torch.unbind(x, 1)[0]    where x: [B, 1, D] =>  x.reshape(B, D)
    torch.split(x, 1, 1)[i].squeeze(1)          =>  x.select(1, i)
    """, builtin=PRE_GRAD)

merge_splits_pass = vertical("merge_splits_pass", BOTH_LEVELS, rules=(
    Rule("merge_splits/narrow_narrow", "(Narrow (Narrow x d s1 l1 n) d s2 l2 m)", "(Narrow x d (+ s1 s2) l2 n)",
         ("(= sh (shape x))",)),
    Rule("merge_splits/select_narrow", "(Select (Narrow x d s l n) d i m)", "(Select x d (+ s i) n)",
         ("(= sh (shape x))",)),
), doc="""A split of a split piece along the same dim is one split of the original tensor.

    a, b = torch.split(x, [4, 4], 1); c, d = torch.split(b, [1, 3], 1)
        =>  c = x[:, 4:5], d = x[:, 5:8]
    """, builtin=PRE_GRAD)

split_of_cat_pass = vertical("split_of_cat_pass", PRE_GRAD, rules=(
    Rule("split_of_cat/whole_input", "(Narrow (Cat L) d s l n)", "x",
         ("(CatOffset L (Cons d x R) d s)", "(= shx (shape x))", "(= l (vec-get shx d))", "(> l 0)")),
), doc="""A split piece of a cat that is exactly one of the cat's inputs is that input (no pass of
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
    """)

unbind_stack_pass = vertical("unbind_stack_pass", PRE_GRAD,
    rules=(Rule("unbind_stack/unsqueeze_select", "(Unsqueeze (Select x d i n) d)", "(Narrow x d i 1 n)",
                ("(= sh (shape x))",)),),
    doc="""A stacked unbind piece is a length-1 slice, so unbind -> stack in order folds to the tensor.

    torch.stack(torch.unbind(x, 1), 1)       =>  x
    torch.stack([x.unbind(1)[2], x.unbind(1)[0]], 1)  =>  cat of x[:, 2:3] and x[:, 0:1] (a permuted
        stack keeps its order; no fold)
    """, builtin=PRE_GRAD,
    also=("unbind_stack_to_slices_pass", "unbind_cat_to_view_pass", "split_cat_pass", "merge_getitem_cat_pass",
          "mutate_cat_pass"))

#: the guard of ``x.select(d, i) == x.movedim(d, c).select(c, i)`` (c != d; p: the movedim's permutation)
_MOVED_SELECT = ("(!= c d)", "(= sh (shape x))", "(= p (MovePerm (vec-length sh) d c))")

unbind_stack_to_slices_pass = vertical("unbind_stack_to_slices_pass", PRE_GRAD, rules=(
    Rule("unbind_stack_to_slices/other_dim", "(Unsqueeze (Select x d i n) c)",
         "(Unsqueeze (Select (Permute x p) c i n) c)",
         _MOVED_SELECT),
), doc="""Unbind pieces stacked along another dim are slices of a permuted view.

    x: [B, N, D];  torch.stack(torch.unbind(x, 1), 2)  =>  x.permute(0, 2, 1)
    (x.select(1, i) is x.movedim(1, 2).select(2, i); stacked along 2 they become adjacent slices)
    """, builtin=PRE_GRAD,
    also=("unbind_stack_pass", "split_cat_pass", "merge_getitem_cat_pass", "mutate_cat_pass"))


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


split_stack_to_cats_pass = vertical("split_stack_to_cats_pass", PRE_GRAD,
    rules=tuple(_split_stack_rule(d) for d in range(MAX_RANK - 1))
    + tuple(_split_stack_other_dim_rule(d) for d in range(MAX_RANK - 1)),
    doc="""Equal split pieces stacked along the split dim are slices of an unflattening view; stacked
    along another dim, of that view with the pieces' dim moved there.

    x: [B, N * D];  torch.stack(torch.split(x, D, 1), 1)  =>  x.view(B, N, D)
    x: [B, N * D];  torch.stack(torch.split(x, D, 1), 0)  =>  x.view(B, N, D).permute(1, 0, 2)
    (the second is how the stacked inputs of a batched linear over split pieces become a view)
    """, builtin=PRE_GRAD,
    also=("unbind_stack_pass", "split_cat_pass", "merge_getitem_cat_pass", "mutate_cat_pass"))

unbind_cat_to_view_pass = vertical("unbind_cat_to_view_pass", PRE_GRAD, rules=(
    Rule("unbind_cat_to_view/select_in_cat", "(Cons d (Select x d i n) R)",
         "(Cons d (Narrow (Reshape x (vec-set (vec-remove sh d) d (* n k))) d (* i k) k (* n k)) R)",
         ("(= sh (shape x))", "(< (+ d 1) (vec-length sh))", "(= k (vec-get sh (+ d 1)))", "(>= k 0)", "(>= n 0)")),
    Rule("unbind_cat_to_view/other_dim", "(Cons c (Select x d i n) R)",
         "(Cons c (Select (Permute x p) c i n) R)",
         _MOVED_SELECT),
), doc="""Unbind pieces concatenated along the unbind dim are slices of a flattening view; along another
    dim c, first x.select(d, i) == x.movedim(d, c).select(c, i).

    x: [B, N, D];  torch.cat(torch.unbind(x, 1), 1)  =>  x.reshape(B, N * D)
    (each piece x.select(1, i) is x.reshape(B, N*D)[:, i*D:(i+1)*D]; adjacent slices then merge)
    x: [N, B, D];  torch.cat(torch.unbind(x, 0), 1)  =>  x.permute(1, 0, 2).reshape(B, N * D)
    (along another dim c: x.select(d, i) is x.movedim(d, c).select(c, i), then as above)
    Y: [N, B, O];  torch.cat(torch.unbind(Y, 0), 1)  =>  Y.permute(1, 0, 2).reshape(B, N * O)
    (the cat after a batched linear over split pieces)
    """, builtin=PRE_GRAD,
    also=("split_cat_pass", "merge_getitem_cat_pass", "mutate_cat_pass"))

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


split_cat_pass = vertical("split_cat_pass", PRE_GRAD, rules=(_FULL_RUN,)
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
    """, builtin=PRE_GRAD,
    also=("remove_split_with_size_one_pass", "split_stack_to_cats_pass", "unbind_stack_to_slices_pass",
          "unbind_stack_pass", "merge_getitem_cat_pass", "mutate_cat_pass"))

merge_getitem_cat_pass = vertical("merge_getitem_cat_pass", PRE_GRAD, rules=(
    Rule("merge_getitem_cat/prefix_run", _HEAD, _MERGED, _RUN + ("(= s 0)", "(!= e n)")),
    Rule("merge_getitem_cat/inner_run", _HEAD, _MERGED, _RUN + ("(!= s 0)",)),
), doc="""Adjacent split pieces inside a cat merge into one slice (the cat keeps its other inputs).

    a, b, c, d = torch.split(x, 2, 1); torch.cat([b, c, y], 1)  =>  torch.cat([x[:, 2:6], y], 1)
    """, builtin=PRE_GRAD)

mutate_cat_pass = vertical("mutate_cat_pass", PRE_GRAD,
    rules=(Rule("mutate_cat/single_input", "(Cat (Cons d a (Nil)))", "a", ("(= sh (shape a))",)),),
    doc="""A cat left with a single input (after its pieces merged) is that input: a copy becomes a view.

    a, b, c, d = torch.split(x, 2, 1); torch.cat([b, c], 1)  =>  x[:, 2:6]
    """, builtin=PRE_GRAD)

#: The run algebra along the split dim (a full run is the tensor, a partial run one slice, a cat of one input
#: that input), for the patterns that reuse it: upstream's split_cat_to_slices and the post-grad split/cat
#: passes fold cats along the split dim only.
RUN_RULES = (_FULL_RUN, *merge_getitem_cat_pass.rules, *mutate_cat_pass.rules)


split_cat_to_slices_pass = vertical("split_cat_to_slices_pass", PRE_GRAD,
    rules=renamed("split_cat_to_slices", RUN_RULES),
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
    """, builtin=PRE_GRAD)

fold_view_chain = vertical("fold_view_chain", BOTH_LEVELS, rules=(
    Rule("fold_view_chain/reshape_reshape", "(Reshape (Reshape x a) b)", "(Reshape x b)", ("(= sh (shape x))",)),
    Rule("fold_view_chain/reshape_unsqueeze", "(Reshape (Unsqueeze x d) b)", "(Reshape x b)", ("(= sh (shape x))",)),
    Rule("fold_view_chain/reshape_same", "(Reshape x sh)", "x", ("(= sh (shape x))",)),
), doc="""A reshape of a reshape is one reshape; a reshape to the same shape is the tensor itself.

    x: [B, N*D];  x.view(B, N, D).flatten(1)  =>  x
    """)


def _unit_dim_rule(rank: int, pos: int) -> Rule:
    """``Reshape(y, shape(y) with a 1 inserted at pos)`` is ``Unsqueeze(y, pos)``."""
    sizes = [f"(vec-get sh {i})" for i in range(pos)] + ["1"] + [f"(vec-get sh {i})" for i in range(pos, rank)]
    return Rule(
        f"move_reshape_out_of_split_stack/rank{rank}_unit{pos}",
        "(Reshape y v)",
        f"(Unsqueeze y {pos})",
        ("(= sh (shape y))", f"(= (vec-length sh) {rank})", f"(= v (vec-of {' '.join(sizes)}))"),
    )


_STACKED = "(Cons c (Unsqueeze (Reshape (Narrow x {dim} s l n) v) c) R)"


def _reshape_run_rule(dim: int, full: bool, at_front: bool) -> Rule:
    """In a stack along c, the adjacent cells ``x[.., s + i*l : s + (i+1)*l].reshape(v)`` (i < m, m >= 2) are
    one cell ``x.narrow(dim, s, m*l).unflatten(dim, (m, l)).movedim(dim, 0).reshape(m, *v).movedim(0, c)``:
    row i of the moved unflatten is piece i, and reshaping [m, ...] to [m, *v] reshapes each row to v.
    Variants: the run is all of x or a part (``full``); c is 0 (``at_front``: no last movedim) or not; for
    ``dim`` 0 the first movedim is the identity and is left out."""
    head = _STACKED.format(dim=dim)
    m = "(/ (- e s) l)"
    base, guard = run_base(dim, full)
    rows = f"(Reshape {base} {unflatten_shape(dim, m, 'l')})"
    if dim:
        rows = f"(Permute {rows} p)"
    cell = f"(Reshape {rows} (vec-append (vec-of {m}) v))"
    if not at_front:
        cell = f"(Permute {cell} q)"
    return Rule(
        f"move_reshape_out_of_split_stack/dim{dim}{'_whole' if full else ''}{'' if at_front else '_moved'}",
        head,
        f"(Cons c {cell} R2)",
        ("(= sh (shape x))", f"(= e (ReshapeRunEnd {head} x {dim} c l v s))",
         f"(= R2 (ReshapeRunRest {head} x {dim} c l v s e))", "(> e (+ s l))", *guard,
         *((f"(= p (MovePerm (+ (vec-length sh) 1) {dim} 0))",) if dim else ()),
         *(("(= c 0)",) if at_front else ("(!= c 0)", "(= q (MovePerm (+ (vec-length v) 1) 0 c))"))),
    )


move_reshape_out_of_split_stack_pass = vertical("move_reshape_out_of_split_stack_pass", PRE_GRAD,
    rules=tuple(_unit_dim_rule(r, k) for r in range(1, MAX_RANK) for k in range(r + 1))
    + tuple(_reshape_run_rule(d, full, front) for d in range(MAX_RANK - 1) for full in (True, False)
            for front in (True, False)),
    doc="""A reshape that only inserts a unit dim is an unsqueeze, so split -> per-piece reshape -> cat
    folds like split -> stack (the reshape moves out: one view of the whole tensor). Any other reshape
    of equal split pieces that are stacked in order moves out of the stack as one reshape of the split's
    input (upstream: torch/_inductor/fx_passes/split_cat.py, ``move_reshape_out_of_split_stack``).

    x: [B, N * D];  torch.cat([p.reshape(B, 1, D) for p in x.split(D, 1)], 1)  =>  x.view(B, N, D)
    x: [50000, 5];  torch.stack([p.reshape(-1, 5) for p in x.split(1, 1)], 0)
        =>  x.reshape(50000, 5, 1).permute(1, 0, 2).reshape(5, 10000, 5)
    (a view where the pieces' reshapes are views, else one copy instead of one per piece; a run of at
    least two pieces inside a longer stack becomes one cell of it; a run of part of x is narrowed first.)
    """, builtin=PRE_GRAD,
    also=("split_stack_to_cats_pass", "fold_view_chain", "split_cat_pass", "merge_getitem_cat_pass",
          "mutate_cat_pass"))

#: Rules the post-grad family (:mod:`optimus_eq.patterns.aten`) reuses: a reshape folds into the one after it;
#: stacked unbind pieces are slices; unbind pieces in a cat are slices of a view.
VIEW_FOLD_RULES = fold_view_chain.rules
STACKED_SELECT_RULES = unbind_stack_pass.rules + unbind_stack_to_slices_pass.rules
SELECT_IN_CAT_RULES = unbind_cat_to_view_pass.rules

#: The family in greedy's pass order, in the stages :mod:`optimus_eq.patterns` interleaves with the other
#: families: normalization first, then (after the horizontal fusions) the splits and views, then (after the
#: pointwise family) the stack and cat folds.
NORMALIZE = (normalization_pass,)
EARLY = (remove_split_with_size_one_pass, merge_splits_pass, split_of_cat_pass, fold_view_chain,
         move_reshape_out_of_split_stack_pass)
LATE = (unbind_stack_to_slices_pass, unbind_stack_pass, split_stack_to_cats_pass, unbind_cat_to_view_pass,
        merge_getitem_cat_pass, split_cat_pass, split_cat_to_slices_pass, mutate_cat_pass)
