"""Random ops the plan keeps (training-mode dropout, ``rand_like``, ``bernoulli``) under
``torch._inductor.config.fallback_random = True``, where the user asks for eager's random stream: they draw as
eager's, in eager's order and over inputs of eager's layout (a mask is drawn over its input's memory order), so
one seed gives eager's values (lower.py / lower_random.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F


# Found: with ``torch._inductor.config.fallback_random = True`` (the user asks for eager's random stream; training-mode
# dropouts stay as written, in their order) the dropouts after a batched linear got the selects of the bmm's
# permuted output: transposed layouts. A dropout draws its mask over its input's memory order (``bernoulli_`` of
# ``empty_like``, which keeps a dense layout), so under one seed 43 of 192 mask entries differed from eager's. The
# same for ``rand_like`` / ``bernoulli`` of a value whose layout the plan changed. Fixed in lower.py /
# lower_random.py (a random op the plan keeps gets inputs of eager's layout).
@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
@pytest.mark.parametrize("op", ["dropout", "rand_like", "bernoulli"])
def test_random_ops_draw_as_eager_under_fallback_random(strategy, op):
    import optimus_eq
    from conftest import dynamo_graph

    lins = [torch.nn.Linear(4, 4) for _ in range(3)]
    random_op = {"dropout": lambda t: F.dropout(t, 0.5), "rand_like": lambda t: t + torch.rand_like(t),
                 "bernoulli": lambda t: torch.bernoulli(t.sigmoid())}[op]

    def f(x):
        return torch.cat([random_op(lin(p)) for lin, p in zip(lins, x.split(4, 1))], 1)

    with torch._inductor.config.patch(fallback_random=True):
        gm, example = dynamo_graph(f, torch.randn(8, 12, generator=torch.Generator().manual_seed(0)))
        gm2, report = optimus_eq.optimize(gm, example, strategy=strategy,
                                          pattern_options={"batch_linear": {"min_fuse_set_size": 2}})
    assert report.fallback is None and report.patterns_fired["batch_linear"] == 1
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        want = gm(*example)
        torch.manual_seed(1)
        got = gm2(*example)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
