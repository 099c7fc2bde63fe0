"""View-chain algebra: reshapes fold, and a reshape to the tensor's own shape is the tensor."""

from __future__ import annotations

from optimus_eq.patterns.registry import Pattern, Rule

fold_view_chain = Pattern(
    name="fold_view_chain",
    levels=("pre_grad",),
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

PATTERNS = (fold_view_chain,)
