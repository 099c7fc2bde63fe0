"""View-chain algebra: reshapes fold, and a reshape to the tensor's own shape is the tensor."""

from __future__ import annotations

from optimus_eq.patterns.registry import Pattern, Rule
from optimus_eq.terms import MAX_RANK

fold_view_chain = Pattern(
    name="fold_view_chain",
    levels=("pre_grad", "post_grad"),
    kind="vertical",
    rules=(
        Rule("fold_view_chain/reshape_reshape", "(Reshape (Reshape x a) b)", "(Reshape x b)", ("(= sh (shape x))",)),
        Rule("fold_view_chain/reshape_unsqueeze", "(Reshape (Unsqueeze x d) b)", "(Reshape x b)", ("(= sh (shape x))",)),
        Rule("fold_view_chain/reshape_same", "(Reshape x sh)", "x", ("(= sh (shape x))",)),
    ),
    doc="""A reshape of a reshape is one reshape; a reshape to the same shape is the tensor itself.

    x: [B, N*D];  x.view(B, N, D).flatten(1)  =>  x
    """,
)

def _unit_dim_rule(rank: int, pos: int) -> Rule:
    """``Reshape(y, shape(y) with a 1 inserted at pos)`` is ``Unsqueeze(y, pos)``."""
    sizes = [f"(vec-get sh {i})" for i in range(pos)] + ["1"] + [f"(vec-get sh {i})" for i in range(pos, rank)]
    return Rule(
        f"move_reshape_out_of_split_stack/rank{rank}_unit{pos}",
        "(Reshape y v)",
        f"(Unsqueeze y {pos})",
        ("(= sh (shape y))", f"(= (vec-length sh) {rank})", f"(= v (vec-of {' '.join(sizes)}))"),
    )


move_reshape_out_of_split_stack_pass = Pattern(
    name="move_reshape_out_of_split_stack_pass",
    levels=("pre_grad",),
    kind="vertical",
    rules=tuple(_unit_dim_rule(r, k) for r in range(1, MAX_RANK) for k in range(r + 1)),
    doc="""A reshape that only inserts a unit dim is an unsqueeze, so split -> per-piece reshape -> cat
    folds like split -> stack (the reshape moves out: one view of the whole tensor).

    x: [B, N * D];  torch.cat([p.reshape(B, 1, D) for p in x.split(D, 1)], 1)  =>  x.view(B, N, D)
    (Only unit-dim reshapes so far; upstream also moves general reshapes.)
    """,
)

PATTERNS = (fold_view_chain, move_reshape_out_of_split_stack_pass)
