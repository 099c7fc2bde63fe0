"""View-chain algebra: reshapes fold, and a reshape to the tensor's own shape is the tensor."""

from __future__ import annotations

from optimus_eq.registry import BOTH_LEVELS, PRE_GRAD, Rule, vertical
from optimus_eq.patterns.split_cat import run_base, unflatten_shape
from optimus_eq.terms import MAX_RANK

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
    """)

PATTERNS = (fold_view_chain, move_reshape_out_of_split_stack_pass)
