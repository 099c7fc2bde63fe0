"""Breaker findings of 2026-12-02 (fourth session): inputs that gave wrong results or crashed where eager works,
each compared with eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import check

F64 = torch.float64


def _bags_with_last_offset(mode):
    def f(w0, w1, i0, i1, o0, o1):
        return [F.embedding_bag(i, w, o, include_last_offset=True, mode=mode)
                for i, w, o in ((i0, w0, o0), (i1, w1, o1))]
    return f


# Found: ``F.embedding_bag(..., include_last_offset=True)`` whose final offset is below the ids' length (ids past the
# last bag; the docs ask for ``offsets[-1] == len(ids)``, but eager accepts it and does not raise). Eager CPU treats
# those ids per mode: ``sum`` leaves them out, ``max`` takes them into the last bag, ``mean`` sums without them but
# divides by the count with them. batch_embedding_bag's fused call ends each table's last bag at its final offset
# (an extra, dropped bag takes the rest): right for ``sum``, silently different values for ``max`` (forward) and
# ``mean`` (forward and gradients). Offsets well-formed: all three exact.
@pytest.mark.xfail(strict=True, reason="batch_embedding_bag ends a table's last bag at its final offset; eager CPU's "
                   "max takes ids past that offset into the last bag and its mean divides by their count too. A fix "
                   "needs a per-mode fused form (max: drop each table's final offset; mean: no single fused call "
                   "reproduces it) or a runtime check of offsets[-1] == len(ids)")
@pytest.mark.parametrize("mode", ["mean", "max"])
def test_ids_past_the_last_offset_bag_as_eager(mode):
    g = torch.Generator().manual_seed(0)
    ws = [torch.randn(6, 4, generator=g, dtype=F64) for _ in range(2)]
    ids = [torch.tensor([5, 1, 3, 0]), torch.tensor([3, 5, 5, 4])]
    offs = [torch.tensor([0, 2, 3]), torch.tensor([0, 1, 4])]  # table 0: id 0 (position 3) is past its last offset
    check(_bags_with_last_offset(mode), [*ws, *ids, *offs], "greedy",
          pattern_options={"batch_embedding_bag": {"min_fuse_set_size": 2}})


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_well_formed_last_offsets_bag_as_eager(mode):
    """The same bags with ``offsets[-1] == len(ids)``: batched, and exact in every mode."""
    g = torch.Generator().manual_seed(0)
    ws = [torch.randn(6, 4, generator=g, dtype=F64) for _ in range(2)]
    ids = [torch.tensor([5, 1, 3, 0]), torch.tensor([3, 5, 5, 4])]
    offs = [torch.tensor([0, 2, 4]), torch.tensor([0, 1, 4])]
    c = check(_bags_with_last_offset(mode), [*ws, *ids, *offs], "greedy",
              pattern_options={"batch_embedding_bag": {"min_fuse_set_size": 2}})
    assert c.report.patterns_fired["batch_embedding_bag"] == 1
