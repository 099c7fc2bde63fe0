"""``optimize`` on a graph without FakeTensor meta (``torch.fx.symbolic_trace``): the meta computed from
``example_inputs`` belongs to that call. It used to be written onto the user's graph, so a second call with
inputs of another shape read the first call's meta and returned a graph specialized to the old shapes."""

import pytest
import torch

import optimus_eq


def _split_cat(x):
    parts = torch.split(x, 2, dim=1)
    return torch.cat([parts[0], parts[1], parts[2]], dim=1) + 1


def test_second_call_with_other_shapes_reads_its_own_inputs():
    gm = torch.fx.symbolic_trace(_split_cat)
    x6, x7 = torch.randn(3, 6), torch.randn(3, 7)
    g6, _ = optimus_eq.optimize(gm, [x6], strategy="greedy")
    torch.testing.assert_close(g6(x6), gm(x6))
    # [3, 7]: four chunks, the cat of the first three is not x; folding the split/cat away would be wrong
    g7, _ = optimus_eq.optimize(gm, [x7], strategy="greedy")
    torch.testing.assert_close(g7(x7), gm(x7))


def test_user_graph_keeps_no_meta():
    gm = torch.fx.symbolic_trace(_split_cat)
    optimus_eq.optimize(gm, [torch.randn(3, 6)], strategy="eqsat")
    assert all("val" not in n.meta and "example_value" not in n.meta for n in gm.graph.nodes)


def test_wrong_number_of_example_inputs_raises_at_the_call():
    gm = torch.fx.symbolic_trace(_split_cat)
    for inputs in ([], [torch.randn(3, 6), torch.randn(3, 6)]):
        with pytest.raises(ValueError, match=f"{len(inputs)} example inputs for 1 placeholders"):
            optimus_eq.optimize(gm, inputs, strategy="greedy")
