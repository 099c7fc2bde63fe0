"""The Aten-IR (post-grad) split/cat family, under the Optimus post-grad option names
(torch/_inductor/fx_passes/split_cat.py, the ``*_aten_*`` passes, and
test/inductor/test_split_cat_fx_aten_passes.py upstream).

At Aten-IR a split is ``aten.split.Tensor`` / ``aten.split_with_sizes`` with getitems, an unbind is
``aten.unbind.int`` or ``aten.select.int`` nodes, a stack is ``aten.cat`` of ``aten.unsqueeze`` or an
``aten.cat`` followed by an ``aten.reshape``, and views are ``aten.reshape``/``aten.view``. The translator
(:mod:`optimus_bridge.aten`) maps them to the same canonical terms as Torch-IR, so most rules are the
pre-grad algebra's, reused under the aten pass names (each pattern carries the run-merging rules it
needs, so any subset of passes works alone). One rule is new: a reshape of a slice inside a cat becomes
a slice of a reshape of the whole tensor (``move_view_after_cat_aten_pass``), after which the slices
merge like split pieces.

What upstream does and where we differ:

* ``split_cat_aten_pass`` (upstream: runs of consecutive getitems of one split inside a cat become one
  ``slice``, or the split input when the run is the whole split, if the run is at least
  ``threshold_to_cat`` long): here every run merges (the option is not read yet).
* ``select_cat_aten_pass`` (upstream: a cat of all ``select(x, d, i)`` in order along d is
  ``view(x)``): the same, partial runs too, and selects along another dim than the cat's.
* ``unbind_stack_aten_pass`` (upstream: cat of ``unsqueeze(select(x, d, i), d)`` for all i in order is x,
  if x has no other user): the same without the user condition (the e-graph keeps other users), and
  stacks along another dim than the unbind's become a permute.
* ``move_view_after_cat_aten_pass`` (upstream: cat of ``reshape(getitem(split))`` for all pieces in order
  is a reshape (after a permute when the dims differ) of the split input).
"""

from __future__ import annotations

from optimus_eq.patterns import split_cat
from optimus_eq.registry import POST_GRAD, Rule, canonical, renamed, vertical


def _runs(prefix: str) -> tuple[Rule, ...]:
    """Merge runs of adjacent slices of one tensor inside a cat; a full run is the tensor; a cat of
    one input is that input; the view the fold leaves folds into the view after it (the pre-grad run
    algebra and view folds: Aten-IR spells a stack as cat + view, so greedy, which never revisits the
    view folds, needs the fold inside the pass)."""
    return renamed(prefix, split_cat.RUN_RULES + split_cat.VIEW_FOLD_RULES)


#: x: [A, n, B] (A, B: products of the sizes before and after dim d), a slice x[:, s:s+l, :] reshaped to
#: S = [..P.., m, ..Q..] with the cat dim c at m. If prod(S[:c]) == A, the reshape only regroups the
#: elements after dim d, so the piece is rows s*B/Q .. (s+l)*B/Q of x reshaped to S with n*B/Q at c.
#: Pieces of adjacent slices are then adjacent slices of one view of x, and merge.
_RESHAPE_NARROW_IN_CAT = Rule(
    "reshape_narrow_in_cat",
    "(Cons c (Reshape (Narrow x d s l n) S) R)",
    "(Cons c (Narrow (Reshape x (vec-set S c (/ (* n B) Q))) c (/ (* s B) Q) (/ (* l B) Q) (/ (* n B) Q)) R)",
    ("(= shx (shape x))", "(> l 0)", "(= N (prefix shx (vec-length shx)))", "(> N 0)",
     "(= A (prefix shx d))", "(= A (prefix S c))",
     "(= B (/ N (prefix shx (+ d 1))))", "(= Q (/ (prefix S (vec-length S)) (prefix S (+ c 1))))",
     "(= (% (* n B) Q) 0)", "(= (% (* s B) Q) 0)"),
)


normalization_aten_pass = canonical("normalization_aten_pass", POST_GRAD,
    doc="""Every Aten-IR spelling of split, unbind, slicing, select, cat and views becomes one canonical form.

    aten.split.Tensor(x, 2, -1) / aten.split_with_sizes(x, [2, 2], 1) / aten.slice.Tensor(x, 1, 0, 2)
        => Narrow(x, 1, 0, 2, 4) ...;  aten.select.int(x, 1, i) => Select(x, 1, i, n)
    aten.cat(xs, -1) => Cat along the non-negative dim;  aten.view / _unsafe_view / reshape => Reshape
    Realized by the bridge's Aten-IR translator (optimus_bridge.aten), which counts each node it normalizes.
    """, builtin=POST_GRAD)

split_cat_aten_pass = vertical("split_cat_aten_pass", POST_GRAD, rules=_runs("split_cat_aten"),
    doc="""Split pieces concatenated in order along the split dim fold into the input or one slice.

    s = aten.split.Tensor(x, 32, 1); aten.cat([s[0], ..., s[7]], 1)  =>  x
    aten.cat([z, s[1], s[2], s[3], y], 1)  =>  aten.cat([z, aten.slice(x, 1, 32, 128), y], 1)
    """, builtin=POST_GRAD)

# the select-in-cat rules include other_dim: a select along d inside a cat along c != d
select_cat_aten_pass = vertical("select_cat_aten_pass", POST_GRAD,
    rules=renamed("select_cat_aten", split_cat.SELECT_IN_CAT_RULES) + _runs("select_cat_aten"),
    doc="""Selects of one tensor concatenated in order along the select dim are a view of it.

    x: [B, N, D];  aten.cat([aten.select(x, 1, i) for i in range(N)], 1)  =>  aten.reshape(x, [B, N*D])
    aten.cat([aten.select(x, 1, 0), aten.select(x, 1, 1)], 1)  =>  aten.slice(aten.reshape(x, [B, N*D]), 1, 0, 2*D)
    """, builtin=POST_GRAD)

unbind_stack_aten_pass = vertical("unbind_stack_aten_pass", POST_GRAD,
    rules=renamed("unbind_stack_aten", split_cat.STACKED_SELECT_RULES)
    + _runs("unbind_stack_aten"),
    doc="""Unbind pieces stacked (cat of unsqueezes) in order along the unbind dim are the tensor itself.

    u = aten.unbind(x, 1); aten.cat([aten.unsqueeze(u[i], 1) for i in range(N)], 1)  =>  x
    the same stacked along dim 2  =>  aten.permute(x, [0, 2, 1])
    """, builtin=POST_GRAD)

# a unit slice viewed without its dim is a select (split_cat.SQUEEZED_UNIT_PIECE), which the select rules fold
move_view_after_cat_aten_pass = vertical("move_view_after_cat_aten_pass", POST_GRAD,
    rules=renamed("move_view_after_cat_aten", (_RESHAPE_NARROW_IN_CAT, split_cat.SQUEEZED_UNIT_PIECE,
                                               *split_cat.SELECT_IN_CAT_RULES))
    + _runs("move_view_after_cat_aten"),
    doc="""A cat of views of split pieces is one view of the split input (the cat disappears).

    x: [B, N*D];  aten.cat([aten.reshape(p, [B, 1, D]) for p in aten.split(x, D, 1)], 1)  =>  aten.reshape(x, [B, N, D])
    x: [N, B, D];  aten.cat([aten.view(p, [B, D]) for p in aten.split(x, 1)], 1)
        =>  aten.reshape(aten.permute(x, [1, 0, 2]), [B, N*D])
    """, builtin=POST_GRAD)

#: The family in greedy's pass order: normalization before the post-grad horizontal fusions, the rest after.
NORMALIZE = (normalization_aten_pass,)
PATTERNS = (split_cat_aten_pass, select_cat_aten_pass, unbind_stack_aten_pass, move_view_after_cat_aten_pass)
