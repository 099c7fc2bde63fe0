"""Cases ported from pytorch test/inductor/test_split_cat_fx_passes.py (TestSplitCatFxPasses), in our
own words: one function per upstream function, the options its test enables, and the patterns of ours
that must fire where the upstream counter is positive."""

from __future__ import annotations

import torch

from conformance import Case, rand

F = "test_split_cat_fx_passes.py::TestSplitCatFxPasses"

#: the class-level ``patch`` of the upstream file: the seven original split/cat passes
SEVEN = {"normalization_pass": {}, "remove_split_with_size_one_pass": {}, "merge_getitem_cat_pass": {},
         "merge_splits_pass": {}, "mutate_cat_pass": {}, "split_cat_pass": {}, "unbind_stack_pass": {}}


def _case(fn, test, inputs, options, fires=(), **kw) -> Case:
    return Case(name=kw.pop("name", fn.__name__), upstream=f"{F}::{test} ({fn.__name__})", build=lambda: fn,
                inputs=inputs, pre_grad=options, fires=tuple(fires), **kw)


# -- test_split_normalization ------------------------------------------------------------------------

def arg_only(x):
    return [torch.relu(s) for s in torch.split(x, 2, 1)]


def arg_only_dim0(x):
    return [torch.relu(s) for s in torch.split(x, 2, 0)]


def kwarg1(x):
    return [torch.relu(s) for s in torch.split(x, 2, dim=1)]


def kwarg2(x):
    return [torch.relu(s) for s in torch.split(x, split_size_or_sections=2, dim=1)]


def kwarg3(x):
    return [torch.relu(s) for s in torch.split(tensor=x, split_size_or_sections=2, dim=-1)]


def list_replace(x):
    return [torch.relu(s) for s in torch.split(x, [16, 16], dim=1)]


def multi_split(x):
    return [torch.split(s, 2, 1) for s in torch.split(x, 2, 1)]


def unequal_split(x):
    return [torch.relu(s) for s in torch.split(x, 3, 1)]


def arg_only_cm(x):
    return [torch.relu(s) for s in x.split(2, 1)]


def kwarg1_cm(x):
    return [torch.relu(s) for s in x.split(2, dim=1)]


def kwarg2_cm(x):
    return [torch.relu(s) for s in x.split(split_size=2, dim=1)]


def multi_split_cm(x):
    return [s.split(2, 1) for s in x.split(2, 1)]


def unequal_split_cm(x):
    return [torch.relu(s) for s in x.split(3, 1)]


def cm_with_list(x):
    return [torch.relu(s) for s in x.split([16, 16], dim=-1)]


def normalize_reshape_with_dynamic_shape(x):
    return x.reshape(4, 16)


X2_32 = lambda: [rand(2, 32)]  # noqa: E731
NORM = {"normalization_pass": {}}

CASES = [
    _case(f, "test_split_normalization", X2_32, NORM, fires=("normalization_pass",) if n else (), name=f"norm_{f.__name__}")
    for f, n in [(arg_only, 1), (arg_only_dim0, 1), (kwarg1, 1), (kwarg2, 1), (kwarg3, 1), (list_replace, 0),
                 (multi_split, 17), (unequal_split, 1), (arg_only_cm, 1), (kwarg1_cm, 1), (kwarg2_cm, 1),
                 (multi_split_cm, 17), (unequal_split_cm, 1), (cm_with_list, 1)]
]
CASES.append(_case(normalize_reshape_with_dynamic_shape, "test_split_normalization", X2_32, NORM, dynamic=True,
                   name="norm_reshape_dynamic_shape", note="symbolic sizes"))


# -- test_consecutive_split_merge ---------------------------------------------------------------------

def multi_split_2(x):
    return [torch.split(s, 1, 1) for s in torch.split(x, 2, 1)]


def multi_split_2_neg_dim(x):
    return [torch.split(s, 1, 1) for s in torch.split(x, 2, -1)]


def multi_split_with_sizes(x):
    return [torch.split(s, 2, 1) for s in torch.split(x, [16, 16], 1)]


def multi_split_kwarg1(x):
    return [torch.split(s, 2, dim=1) for s in torch.split(x, 2, dim=1)]


def multi_split_kwarg2(x):
    return [torch.split(s, split_size_or_sections=2, dim=1) for s in torch.split(x, split_size_or_sections=2, dim=1)]


def _uneven_children(fs, last):
    items = [*fs[0].split([4, 6], 1), *fs[1].split([6, 4], 1)]
    items += last(fs[2])
    return [torch.relu(s) for s in items]


def unequal_multi_split(x):
    return _uneven_children(torch.split(x, [10, 10, 12], dim=1), lambda t: list(t.split([4, 4, 4], 1)))


def unequal_multi_split_neg_index(x):
    fs = torch.split(x, [10, 10, 12], dim=1)
    return _uneven_children([fs[-3], fs[-2], fs[-1]], lambda t: list(t.split([4, 4, 4], 1)))


def diff_dims(x):
    return [torch.split(s, 2, dim=0) for s in torch.split(x, 2, dim=1)]


def some_users_not_splits(x):
    return _uneven_children(torch.split(x, [10, 10, 12], dim=1), lambda t: [torch.sin(t)])


def split_with_cat(x):
    fs = torch.split(x, [4, 4, 24], dim=1)
    return torch.cat([fs[0], fs[1], *fs[2].split((4, 4, 4, 4, 4, 4), 1)], dim=1)


def duplicate_getitems(x):
    fs = torch.split(x, [10, 10, 12], dim=1)
    items = [*fs[0].split([4, 6], 1), *fs[1].split([6, 4], 1), *fs[1], torch.sin(fs[2])]
    return [torch.relu(s) for s in items]


def duplicate_getitems_neg_index(x):
    fs = torch.split(x, [10, 10, 12], dim=1)
    items = [*fs[0].split([4, 6], 1), *fs[1].split([6, 4], 1), *fs[-2], torch.sin(fs[2])]
    return [torch.relu(s) for s in items]


def split_getitem_gap(x):
    fs = torch.split(x, [4, 4, 24], dim=1)
    return torch.cat([fs[0], *fs[2].split((4, 4, 4, 4, 4, 4), 1)], dim=1)


def split_getitem_out_of_order(x):
    fs = torch.split(x, [4, 4, 4, 20], dim=1)
    return torch.cat([fs[0], fs[2], fs[1], *fs[3].split((4, 4, 4, 4, 4), 1)], dim=1)


def split_partial_getitem_cat(x):
    fs = torch.split(x, [4, 4, 24], dim=1)
    return torch.cat([fs[0], *fs[2].split((4, 4, 4, 4, 4, 4), 1)], dim=1)


for f, merged in [(multi_split, 0), (multi_split_2, 16), (multi_split_2_neg_dim, 16), (multi_split_with_sizes, 2),
                  (multi_split_kwarg1, 0), (multi_split_kwarg2, 0), (unequal_multi_split, 3),
                  (unequal_multi_split_neg_index, 3), (diff_dims, 0), (some_users_not_splits, 2),
                  (split_with_cat, 1), (duplicate_getitems, 1), (duplicate_getitems_neg_index, 1),
                  (split_getitem_gap, 1), (split_getitem_out_of_order, 1), (split_partial_getitem_cat, 1)]:
    CASES.append(_case(f, "test_consecutive_split_merge", X2_32, SEVEN, fires=("merge_splits_pass",) if merged else (),
                       name=f"merge_{f.__name__}"))


# -- test_split_cat_merge ------------------------------------------------------------------------------

def _ones(*shape):
    return torch.ones(*shape)


def simple_split_cat(x):
    return torch.cat(torch.split(x, 4, dim=1), dim=1)


def simple_split_cat_argspec1(x):
    return torch.cat(torch.split(x, 4, dim=1), 1)


def simple_split_cat_argspec2(x):
    return torch.cat(tensors=torch.split(x, 4, dim=1), dim=1)


def simple_split_cat_argspec3(x):
    return torch.cat(torch.split(x, 4, dim=1), -2)


def simple_split_cat_argspec4(x):
    return torch.cat(tensors=torch.split(x, 4, dim=1), dim=-2)


def simple_split_stack(x):
    return torch.stack(torch.split(x, 4, dim=1), dim=1)


def simple_split_stack_argspec1(x):
    return torch.stack(torch.split(x, 4, dim=1), 1)


def simple_split_stack_argspec2(x):
    return torch.stack(tensors=torch.split(x, 4, dim=1), dim=1)


def split_cat_addn_args(x):
    return torch.cat([_ones(2, 5, 32, 16), *torch.split(x, 4, dim=1), _ones(2, 6, 32, 16)], dim=1)


def split_stack_addn_args(x):
    return torch.stack([_ones(2, 4, 32, 16), *torch.split(x, 4, dim=1), _ones(2, 4, 32, 16), _ones(2, 4, 32, 16)], dim=1)


def split_cat_addn_args_dim2(x):
    return torch.cat([_ones(2, 32, 5, 16), *torch.split(x, 4, dim=2), _ones(2, 32, 6, 16)], dim=2)


def split_cat_dim_mismatch(x):
    return torch.cat([_ones(2, 4, 32, 16), *torch.split(x, 4, dim=1), _ones(2, 4, 32, 16)], dim=2)


def split_stack_dim_mismatch(x):
    return torch.stack([_ones(2, 4, 32, 16), *torch.split(x, 4, dim=1), _ones(2, 4, 32, 16)], dim=2)


def split_cat_dim_mismatch2(x):
    return torch.cat([_ones(2, 4, 32, 16), *torch.split(x, 4, dim=1), _ones(2, 4, 32, 16)], dim=3)


def split_stack_dim_mismatch2(x):
    return torch.stack([_ones(2, 4, 32, 16), *torch.split(x, 4, dim=1), _ones(2, 4, 32, 16)], dim=3)


def split_cat_dim_mismatch3(x):
    return torch.cat([_ones(2, 32, 4, 16), *torch.split(x, 4, dim=2), _ones(2, 32, 4, 16)], dim=0)


def split_stack_dim_mismatch3(x):
    return torch.stack([_ones(2, 32, 4, 16), *torch.split(x, 4, dim=2), _ones(2, 32, 4, 16)], dim=0)


def _shuffled(s, op, dim):
    o = _ones(2, 4, 32, 16)
    return op([o, s[1], s[2], s[3], o, s[5], s[6], s[7], o], dim=dim)


def input_shuffling(x):
    return _shuffled(torch.split(x, 4, dim=1), torch.cat, 1)


def input_shuffling_stack(x):
    return _shuffled(torch.split(x, 4, dim=1), torch.stack, 1)


def input_shuffling_dim_mismatch(x):
    return _shuffled(torch.split(x, 4, dim=1), torch.cat, 2)


def input_shuffling_dim_mismatch_stack(x):
    return _shuffled(torch.split(x, 4, dim=1), torch.stack, 2)


def _multi_output(s, twice=False):
    o = _ones(2, 4, 32, 16)
    cat1 = torch.cat([o, s[1], s[2], s[3], o], dim=2)
    stack1 = torch.stack([o, s[4], s[5], o], dim=1)
    if twice:
        return cat1, torch.cat([o, s[1], s[2], s[3], o], dim=2), stack1, torch.relu(s[6])
    return cat1, stack1, torch.relu(s[6])


def input_shuffling_multiple_output(x):
    return _multi_output(torch.split(x, 4, dim=1))


def input_shuffling_direct_output(x):
    s = torch.split(x, 4, dim=1)
    cat1, stack1, _ = _multi_output(s)
    return cat1, stack1, s[6]


def input_shuffling_multiple_output_same_ranges(x):
    return _multi_output(torch.split(x, 4, dim=1), twice=True)


def unequal_split_multiple_output(x):
    return _multi_output(torch.split(x, [2, 4, 4, 4, 4, 4, 8, 2], dim=1))


def multi_split_cat(x1, x2):
    s1, s2 = torch.split(x1, 4, dim=1), torch.split(x2, 4, dim=1)
    o = _ones(2, 4, 32, 16)
    cat1 = torch.cat([o, s1[1], s1[2], s1[3], o, s2[1], s2[2], s2[3], o], dim=2)
    stack1 = torch.stack([o, s1[4], s1[5], o, s2[4], s2[5], o], dim=1)
    return cat1, stack1, torch.relu(s1[6]), torch.relu(s2[6])


X4 = lambda: [rand(2, 32, 32, 16)]  # noqa: E731
X4x2 = lambda: [rand(2, 32, 32, 16), rand(2, 32, 32, 16, seed=1)]  # noqa: E731
_STACK_SAME_DIM = ("split_stack_to_cats_pass",)

for f, removed, fires, gap in [
    (simple_split_cat, 0, ("split_cat_pass",), ""),
    (simple_split_cat_argspec1, 0, ("split_cat_pass",), ""),
    (simple_split_cat_argspec2, 0, ("split_cat_pass",), ""),
    (simple_split_cat_argspec3, 1, ("split_cat_pass",), ""),
    (simple_split_cat_argspec4, 1, ("split_cat_pass",), ""),
    (simple_split_stack, 1, ("split_stack_to_cats_pass",), ""),
    (simple_split_stack_argspec1, 1, ("split_stack_to_cats_pass",), ""),
    (simple_split_stack_argspec2, 1, ("split_stack_to_cats_pass",), ""),
    (split_cat_addn_args, 1, ("split_cat_pass",), ""),
    (split_stack_addn_args, 1, ("split_stack_to_cats_pass",), ""),
    (split_cat_addn_args_dim2, 1, ("split_cat_pass",), ""),
    (split_cat_dim_mismatch, 1, (), ""),
    (split_stack_dim_mismatch, 1, (), ""),
    (split_cat_dim_mismatch2, 1, (), ""),
    (split_stack_dim_mismatch2, 1, (), ""),
    (split_cat_dim_mismatch3, 1, (), ""),
    (split_stack_dim_mismatch3, 1, (), ""),
    (input_shuffling, 1, ("merge_getitem_cat_pass",), ""),
    (input_shuffling_stack, 1, (), ""),
    (input_shuffling_dim_mismatch, 1, (), ""),
    (input_shuffling_dim_mismatch_stack, 1, (), ""),
    (input_shuffling_multiple_output, 1, (), ""),
    (input_shuffling_direct_output, 1, (), ""),
    (input_shuffling_multiple_output_same_ranges, 1, (), ""),
    (unequal_split_multiple_output, 1, (), ""),
    (multi_split_cat, 1, (), ""),
]:
    CASES.append(_case(f, "test_split_cat_merge", X4x2 if f is multi_split_cat else X4, SEVEN, fires=fires, gap=gap,
                       name=f"scmerge_{f.__name__}"))


# -- test_config_flag_is_respected, test_split_cat_merge_mutation --------------------------------------

def split_with_cat_neg_dim(x):
    fs = torch.split(x, [4, 4, 24], dim=-1)
    return torch.cat([fs[0], fs[1], *fs[2].split((4, 4, 4, 4, 4, 4), 1)], dim=1)


def split_cat_mutation(x):
    splits = torch.split(x, 4, dim=1)
    splits[1].copy_(splits[0])
    return torch.cat(splits, dim=1)


CASES.append(_case(split_with_cat_neg_dim, "test_config_flag_is_respected", X2_32, {}, name="config_flag_is_respected",
                   note="no options: nothing may fire"))
CASES.append(_case(split_cat_mutation, "test_split_cat_merge_mutation", X4, SEVEN, grad=False,
                   note="a split piece mutated in place: the cat must read the mutated input"))


# -- test_split_squeeze ------------------------------------------------------------------------------

def split_squeeze_stack(x):
    return torch.stack([torch.squeeze(s, 1) for s in torch.split(x, 1, dim=1)])


def split_squeeze_stack_callmethod(x):
    return torch.stack([s.squeeze(1) for s in torch.split(x, 1, dim=1)])


def split_squeeze_stack_callmethod_none_dim(x):
    return torch.stack([s.squeeze() for s in torch.split(x, 1, dim=1)])


def split_squeeze_stack_kwarg1(x):
    return torch.stack([torch.squeeze(s, dim=1) for s in torch.split(x, 1, dim=1)])


def split_squeeze_stack_kwarg1_callmethod(x):
    return torch.stack([s.squeeze(dim=1) for s in torch.split(x, 1, dim=1)])


def split_squeeze_multi_squeeze_users(x):
    items = [torch.squeeze(s, 1) for s in torch.split(x, 1, dim=1)]
    return torch.stack(items), torch.relu(items[0]), torch.tanh(items[1])


def split_size_not_1(x):
    return torch.stack([torch.squeeze(s, 1) for s in torch.split(x, 2, dim=1)])


def dim_mismatch(x):
    return torch.stack([torch.squeeze(s, 0) for s in torch.split(x, 1, dim=1)])


def other_users(x):
    items = list(torch.split(x, 1, dim=1))
    return torch.stack([torch.squeeze(s, 1) for s in items]), torch.relu(items[0])


def other_users_2(x):
    items = list(torch.split(x, 1, dim=1))
    return torch.stack([torch.squeeze(s, 1) for s in items[1:]]), torch.relu(items[0])


def graph_should_be_topological_sorted(x):
    return torch.stack([torch.sin(t.squeeze(dim=0)) for t in x.split(1)])


for f, replaced in [(split_squeeze_stack, 1), (split_squeeze_stack_callmethod, 1),
                    (split_squeeze_stack_callmethod_none_dim, 0), (split_squeeze_stack_kwarg1, 1),
                    (split_squeeze_stack_kwarg1_callmethod, 1), (split_squeeze_multi_squeeze_users, 1),
                    (split_size_not_1, 0), (dim_mismatch, 0), (other_users, 0), (other_users_2, 0),
                    (graph_should_be_topological_sorted, 1)]:
    # upstream's split_cat_pass (merge_split_squeeze) job is done here by remove_split_with_size_one_pass
    # (a size-1 piece squeezed is a select) and the stack algebra
    CASES.append(_case(f, "test_split_squeeze", X2_32, SEVEN, fires=("remove_split_with_size_one_pass",) if replaced else (),
                       name=f"squeeze_{f.__name__}"))


# -- test_unbind_stack -------------------------------------------------------------------------------

def unbind_stack(x):
    return torch.stack(torch.unbind(x, 1), 1)


def unbind_stack_argspec1(x):
    return torch.stack(torch.unbind(input=x, dim=1), dim=1)


def unbind_stack_argspec2(x):
    return torch.stack(tensors=torch.unbind(x, dim=1), dim=1)


def unbind_dim_mismatch(x):
    return torch.stack(torch.unbind(x, dim=1), 0)


def split_squeeze_stack_dim1(x):
    return torch.stack([torch.squeeze(s, 1) for s in torch.split(x, 1, dim=1)], 1)


def split_squeeze_stack_callmethod_dim1(x):
    return torch.stack([s.squeeze(1) for s in torch.split(x, 1, dim=1)], 1)


def other_users_dim1(x):
    items = list(torch.split(x, 1, dim=1))
    return torch.stack([torch.squeeze(s, 1) for s in items], 1), torch.relu(items[0])


def other_users_2_dim1(x):
    items = list(torch.split(x, 1, dim=1))
    return torch.stack([torch.squeeze(s, 1) for s in items[1:]], 1), torch.relu(items[0])


def unbind_cat_addn_args(x):
    return torch.cat([_ones(2, 32, 16), *torch.unbind(x, dim=1), _ones(2, 32, 16)], dim=1)


def unbind_stack_addn_args(x):
    return torch.stack([_ones(2, 32, 16), *torch.unbind(x, dim=1), _ones(2, 32, 16), _ones(2, 32, 16)], dim=1)


def unbind_cat_addn_args_dim2(x):
    return torch.cat([_ones(2, 32, 16), *torch.unbind(x, dim=2), _ones(2, 32, 16)], dim=2)


def unbind_cat_dim_mismatch(x):
    return torch.cat([_ones(2, 32, 16), *torch.unbind(x, dim=1), _ones(2, 32, 16)], dim=2)


def unbind_stack_dim_mismatch(x):
    return torch.stack([_ones(2, 32, 16), *torch.unbind(x, dim=1), _ones(2, 32, 16)], dim=2)


def unbind_cat_multi_users(x):
    s = list(torch.unbind(x, dim=1))
    return (torch.cat([_ones(2, 32, 16), *s, _ones(2, 32, 16)], dim=1),
            torch.stack([_ones(2, 32, 16), *s, _ones(2, 32, 16), _ones(2, 32, 16)], dim=1))


def unbind_cat_multi_users_diff_dims(x):
    s = list(torch.unbind(x, dim=1))
    return (torch.cat([_ones(2, 32, 16), *s, _ones(2, 32, 16)], dim=1),
            torch.stack([_ones(2, 32, 16), *s, _ones(2, 32, 16)], dim=2))


for f, removed, fires, gap in [
    (unbind_stack, 1, ("unbind_stack_pass",), ""),
    (unbind_stack_argspec1, 1, ("unbind_stack_pass",), ""),
    (unbind_stack_argspec2, 1, ("unbind_stack_pass",), ""),
    (unbind_dim_mismatch, 1, (), ""),
    (split_squeeze_stack_dim1, 1, (), ""),
    (split_squeeze_stack_callmethod_dim1, 1, (), ""),
    (other_users_dim1, 0, (), ""),
    (other_users_2_dim1, 0, (), ""),
    (unbind_cat_addn_args, 1, (), ""),
    (unbind_stack_addn_args, 1, ("unbind_stack_pass",), ""),
    (unbind_cat_addn_args_dim2, 1, (), ""),
    (unbind_cat_dim_mismatch, 1, (), ""),
    (unbind_stack_dim_mismatch, 1, (), ""),
    (unbind_cat_multi_users, 1, (), ""),
    (unbind_cat_multi_users_diff_dims, 1, (), ""),
]:
    CASES.append(_case(f, "test_unbind_stack", X4, SEVEN, fires=fires, gap=gap, name=f"unbind_{f.__name__}"))


# -- test_split_cat_new_patterns ------------------------------------------------------------------------

def split_cat_split(x):
    o = torch.split(x, [200, 50, 50, 20, 20, 20, 20, 20, 20, 50, 30], 1)
    l2 = torch.split(torch.cat((o[0], o[1]), 1), [50, 120, 80], 1)
    l3 = torch.split(torch.cat((o[9], o[10]), 1), [10, 20, 50], 1)
    return torch.cat([*l2, *l3, *o[2:9]], 1)


def split_cat_split_kwarg(x):
    o = torch.split(x, [200, 50, 50, 20, 20, 20, 20, 20, 20, 50, 30], dim=1)
    l2 = torch.split(torch.cat((o[0], o[1]), dim=1), [50, 120, 80], dim=1)
    l3 = torch.split(torch.cat((o[9], o[10]), dim=1), [10, 20, 50], dim=1)
    return torch.cat([*l2, *l3, *o[2:9]], dim=1)


def remove_cat_node_with_all_getitmes(x):
    o = torch.split(x, [50, 50, 200, 20, 20, 20, 20, 20, 40, 10, 50], dim=0)
    cat = torch.cat(o, dim=0)
    l2 = torch.split(torch.cat((o[0], o[1]), dim=0), [20, 30, 50], dim=0)
    l3 = torch.split(torch.cat((o[0], o[10]), dim=0), [10, 60, 30], dim=0)
    return torch.cat((torch.cat([*l2, *l3, *o[2:9]], dim=0), cat), dim=0)


def mutate_cat_node_with_some_getitmes(x):
    o = torch.split(x, [50, 50, 200, 20, 20, 20, 20, 20, 40, 10, 50], dim=0)
    cat = torch.cat((o[6], o[7], o[8], o[9], o[10], o[2], o[3], o[4], o[5]), dim=0)
    l2 = torch.split(torch.cat((o[0], o[1]), dim=0), [20, 30, 50], dim=0)
    l3 = torch.split(torch.cat((o[0], o[10]), dim=0), [10, 60, 30], dim=0)
    return torch.cat((torch.cat([*l2, *l3, o[2]], dim=0), cat), dim=0)


def split_cat_to_slices(x):
    l1 = torch.split(x, [50] * 10, dim=0)
    l2 = torch.split(x.clone(), [50] * 10, dim=0)
    l3 = torch.split(x.clone(), [100] * 5, dim=0)
    return torch.cat([l1[0].clone(), *l1, *l2[4:10], *l2[0:4], *l3], dim=0)


def unbind_cat_to_view(x):
    l1 = torch.unbind(x.view(10, 50, 500), dim=0)
    l2 = torch.unbind(x.view(10, 50, 500), dim=0)
    return torch.cat([*l1[0:7], l1[7].clone(), *l2, l1[8].clone(), l1[9].clone()], dim=1)


def split_stack_to_cats_same_dim(x):
    u = torch.unbind(x.view(10, 50, 500), dim=0)
    s = [torch.split(u[i], [250, 250], dim=1) for i in range(6)]
    return torch.stack((s[0][0], s[0][1], s[1][0], s[1][1], s[2][0], s[2][1], s[0][0].clone(), s[0][1].clone(),
                        s[3][0], s[3][1], s[4][0], s[4][1], s[5][0], s[5][1], s[1][0].clone()), dim=1)


def split_stack_to_cats_different_dim(x):
    l1 = torch.split(x, [100] * 5, dim=1)
    l2 = torch.split(x.clone(), [100] * 5, dim=1)
    return torch.stack((l1[0].clone(), l1[1].clone(), l1[2].clone(), *l1, *l2), dim=2)


def unbind_stack_to_slices(x):
    u = torch.unbind(x.view(50, 10, 500), dim=1)
    return torch.stack((u[0].clone(), u[1].clone(), u[2].clone(), *u), dim=1)


def move_reshape_out_of_split_stack(x):
    s = torch.split(x.view(50000, 5), [1, 1, 1, 1, 1], dim=1)
    r = [p.reshape(-1, 5) for p in s]
    return torch.stack((r[0].clone(), r[1].clone(), r[2].clone(), *r, r[3].clone()), dim=0)


X500 = lambda: [rand(500, 500)]  # noqa: E731
for f, options, fires, gap in [
    (split_cat_split, SEVEN, ("merge_getitem_cat_pass",), ""),
    (split_cat_split_kwarg, SEVEN, ("merge_getitem_cat_pass",), ""),
    (remove_cat_node_with_all_getitmes, SEVEN, ("mutate_cat_pass",), ""),
    (mutate_cat_node_with_some_getitmes, SEVEN, ("mutate_cat_pass",), ""),
    (split_cat_to_slices, {"split_cat_to_slices_pass": {}}, ("split_cat_to_slices_pass",), ""),
    (unbind_cat_to_view, {"unbind_cat_to_view_pass": {}}, ("unbind_cat_to_view_pass",), ""),
    (split_stack_to_cats_same_dim, {"split_stack_to_cats_pass": {}}, ("split_stack_to_cats_pass",), ""),
    (split_stack_to_cats_different_dim, {"split_stack_to_cats_pass": {}}, (), ""),
    # a stack along the unbind dim: here unbind_stack_pass' rule (selected with unbind_stack_to_slices_pass,
    # optimus_eq.options.UPSTREAM_SCOPE) does the job
    (unbind_stack_to_slices, {"unbind_stack_to_slices_pass": {}}, ("unbind_stack_pass",), ""),
    (move_reshape_out_of_split_stack, {"normalization_pass": {}, "move_reshape_out_of_split_stack_pass": {}},
     ("move_reshape_out_of_split_stack_pass",), ""),
]:
    CASES.append(_case(f, "test_split_cat_new_patterns", X500, options, fires=fires, gap=gap, name=f"new_{f.__name__}"))


# -- test_numpy_compat_normalization, test_stack_normalization_axis_kwarg ---------------------------

def numpy_compat(x, y):
    a = torch.stack([x, y], axis=1)
    b = torch.mul(x, other=y)
    e = torch.max(x, dim=1, keepdims=True)
    return a, b, e.values


def stack_axis_kwarg(x, y):
    return torch.stack([x, y], axis=1)


XY44 = lambda: [rand(4, 4), rand(4, 4, seed=1)]  # noqa: E731
CASES.append(_case(numpy_compat, "test_numpy_compat_normalization", XY44, SEVEN,
                   note="numpy-style keywords (axis, keepdims); upstream calls numpy_compat_normalization on a "
                        "symbolic_trace graph; here the dynamo graph"))
CASES.append(_case(stack_axis_kwarg, "test_stack_normalization_axis_kwarg", XY44, SEVEN, note="GPU-only upstream"))
