"""Option compatibility with the built-in Optimus passes (issue 3, item 3): ``optimize`` and ``backend``
take ``pre_grad_fusion_options`` / ``post_grad_fusion_options`` in the format of
``torch._inductor.config``; the keys choose the patterns, the values are stored on them."""

from __future__ import annotations

import pytest
import torch

import optimus_eq
from conftest import check, dynamo_graph, junk_after, rand
from optimus_eq import DEFAULT_REGISTRY
from optimus_eq.options import (UPSTREAM_POST_GRAD, option_notes, UPSTREAM_PRE_GRAD, UPSTREAM_SCOPE, select_from_options,
                                upstream_names)

# torch 2.13's Optimus option names (torch/_inductor/fx_passes/split_cat.py ``pre_grad_pass_names`` /
# ``post_grad_pass_names``, group_batch_fusion.py ``PRE_GRAD_FUSIONS`` / ``POST_GRAD_FUSIONS`` /
# ``OPTIMUS_EXCLUDE_POST_GRAD``), split into those optimus_eq implements and those it does not.
IMPLEMENTED_PRE = (
    "normalization_pass", "remove_split_with_size_one_pass", "merge_getitem_cat_pass", "merge_splits_pass",
    "mutate_cat_pass", "split_cat_pass", "unbind_stack_pass", "split_cat_to_slices_pass", "unbind_cat_to_view_pass",
    "split_stack_to_cats_pass", "unbind_stack_to_slices_pass", "move_reshape_out_of_split_stack_pass",
    "einsum_to_pointwise_pass", "batch_linear_lhs", "batch_linear", "batch_layernorm", "batch_tanh", "batch_sigmoid",
    "batch_relu", "batch_detach", "batch_nan_to_num", "batch_clamp", "batch_dropout",
)
MISSING_PRE = ("merge_stack_tahn_unbind_pass",)
IMPLEMENTED_POST = (
    "normalization_aten_pass", "decompose_mm_pass", "unbind_stack_aten_pass", "split_cat_aten_pass",
    "select_cat_aten_pass", "move_view_after_cat_aten_pass", "batch_linear_post_grad", "batch_aten_tanh",
    "batch_aten_sigmoid", "batch_aten_relu", "batch_aten_add", "batch_aten_sub", "batch_aten_div", "batch_aten_mul",
)
MISSING_POST = ("shape_padding_multiplier", "pad_aten_mm_pass", "group_linear", "activation_quantization_aten_pass",
                "inductor_autotune_lookup_table")


def split_cat_then_partial(x, y):
    """split -> full cat (split_cat_pass's job) and a partial run next to y (merge_getitem_cat_pass's)."""
    a, b, c, d = torch.split(x, 2, 1)
    return torch.cat([a, b, c, d], 1) * 2, torch.cat([y, b, c], 1)


def test_static_name_lists_are_upstreams():
    assert sorted(UPSTREAM_PRE_GRAD) == sorted(IMPLEMENTED_PRE + MISSING_PRE)
    assert sorted(UPSTREAM_POST_GRAD) == sorted(IMPLEMENTED_POST + MISSING_POST)


def test_static_name_lists_cover_the_installed_torch():
    from torch._inductor.fx_passes import group_batch_fusion, split_cat

    assert set(split_cat.pre_grad_pass_names) | set(group_batch_fusion.PRE_GRAD_FUSIONS) <= set(UPSTREAM_PRE_GRAD)
    assert set(split_cat.post_grad_pass_names) | set(group_batch_fusion.POST_GRAD_FUSIONS) <= set(UPSTREAM_POST_GRAD)


def test_every_registered_optimus_name_is_an_upstream_name_or_ours():
    """Patterns named like built-in passes use the built-in's level (a pre-grad name is never post-grad)."""
    for name, levels, _ in optimus_eq.list_patterns():
        if name in upstream_names("pre_grad"):
            assert "pre_grad" in levels, name
        if name in upstream_names("post_grad"):
            assert "post_grad" in levels, name


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_options_choose_the_patterns(strategy):
    x, y = rand(3, 8, seed=0), rand(3, 2, seed=1)
    only_split_cat = check(split_cat_then_partial, [x, y], strategy,
                           pre_grad_fusion_options={"split_cat_pass": {}})
    fired = only_split_cat.report.rule_matches
    assert fired["split_cat_pass"] > 0
    allowed = {"split_cat_pass", *UPSTREAM_SCOPE["split_cat_pass"]}
    assert set(fired) <= allowed, f"patterns outside the options fired: {dict(fired)}"
    only_merge = check(split_cat_then_partial, [x, y], strategy, pre_grad_fusion_options={"merge_getitem_cat_pass": {}})
    assert set(only_merge.report.rule_matches) == {"merge_getitem_cat_pass"}
    assert only_merge.report.ops_after["cat"] == 2  # the full run is split_cat_pass' job
    both = check(split_cat_then_partial, [x, y], strategy,
                 pre_grad_fusion_options={"normalization_pass": {}, "split_cat_pass": {},
                                          "merge_getitem_cat_pass": {}})
    assert both.report.rule_matches["normalization_pass"] > 0
    assert both.report.ops_after["cat"] == 1
    assert both.report.ops_after["narrow"] == 1


def unbind_then_stack_or_cat(x):
    """Upstream's unbind_stack_pass (``merge_unbind_stack``) folds unbind -> stack or cat, along any dim."""
    u = torch.unbind(x, 1)
    return torch.stack(u, 1) * 2, torch.stack(u, 2) + 1, torch.cat(u, 1).tanh()


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_upstream_scope_does_the_whole_job_of_the_named_pass(strategy):
    c = check(unbind_then_stack_or_cat, [rand(3, 4, 5, seed=0)], strategy,
              pre_grad_fusion_options={"unbind_stack_pass": {}})
    assert junk_after(c.report) == 0, dict(c.report.ops_after)


def test_upstream_scope_patterns_get_empty_options():
    by_name = {p.name: p for p in select_from_options(DEFAULT_REGISTRY, {"unbind_stack_pass": {"counter": 2}}, "pre_grad")}
    assert by_name["unbind_stack_pass"].options == {"counter": 2}
    assert by_name["split_cat_pass"].options == {}
    for name, implied in UPSTREAM_SCOPE.items():
        assert name in UPSTREAM_PRE_GRAD
        assert set(implied) <= set(DEFAULT_REGISTRY.names()), f"{name}: {set(implied) - set(DEFAULT_REGISTRY.names())}"


def test_empty_options_choose_no_pattern():
    c = check(split_cat_then_partial, [rand(3, 8, seed=0), rand(3, 2, seed=1)], "eqsat", pre_grad_fusion_options={})
    assert not c.report.rule_matches
    assert c.report.ops_after["cat"] == 2


def test_option_values_are_stored_on_the_selection_not_the_registry():
    opts = {"split_cat_to_slices_pass": {"threshold_to_cat": 5, "counter": 2}, "split_cat_pass": {}}
    chosen = select_from_options(DEFAULT_REGISTRY, opts, "pre_grad")
    names = [p.name for p in chosen]
    assert names == [n for n in DEFAULT_REGISTRY.names() if n in names]  # registry order
    assert set(opts) <= set(names)
    by_name = {p.name: p for p in chosen}
    assert by_name["split_cat_to_slices_pass"].options == {"threshold_to_cat": 5, "counter": 2}
    assert by_name["split_cat_to_slices_pass"].rules == DEFAULT_REGISTRY["split_cat_to_slices_pass"].rules
    assert DEFAULT_REGISTRY["split_cat_to_slices_pass"].options == {}


def test_unknown_name_raises_value_error_listing_valid_names():
    with pytest.raises(ValueError) as info:
        optimus_eq.optimize(*dynamo_graph(split_cat_then_partial, rand(3, 8), rand(3, 2)),
                            pre_grad_fusion_options={"split_cat_passs": {}})
    msg = str(info.value)
    assert "split_cat_passs" in msg
    for valid in ("split_cat_pass", "merge_getitem_cat_pass", "batch_linear"):
        assert valid in msg


@pytest.mark.parametrize("level,name", [("pre_grad", n) for n in MISSING_PRE] + [("post_grad", n) for n in MISSING_POST])
def test_upstream_name_without_a_pattern_here_is_accepted_with_a_note(level, name):
    """Issue 10 item 8: names the built-in registers no pattern under are no-ops, Inductor settings pass
    through, group_linear is batch_linear_post_grad; the report says which."""
    chosen = [p.name for p in select_from_options(DEFAULT_REGISTRY, {name: {}}, level)]
    if name == "group_linear":
        assert chosen == ["batch_linear_post_grad"]
    else:
        assert chosen == []
    (note,) = option_notes(DEFAULT_REGISTRY, {name: {}}, level)
    assert note.startswith(name)
    optimus_eq.backend(**{f"{level}_fusion_options": {name: {}}})  # accepted at construction


def test_upstream_name_implemented_nowhere_still_raises(monkeypatch):
    import optimus_eq.options as options

    monkeypatch.setattr(options, "upstream_names", lambda level: frozenset({"some_future_pass"}))
    with pytest.raises(NotImplementedError, match="some_future_pass"):
        select_from_options(DEFAULT_REGISTRY, {"some_future_pass": {}}, "pre_grad")


def test_note_in_the_report():
    _, report = optimus_eq.optimize(*dynamo_graph(split_cat_then_partial, rand(3, 8), rand(3, 2)),
                                    pre_grad_fusion_options={"split_cat_pass": {}, "merge_stack_tahn_unbind_pass": {}})
    assert report.fallback is None and report.rule_matches["split_cat_pass"]
    assert any(n.startswith("merge_stack_tahn_unbind_pass") for n in report.notes)


@pytest.mark.slow
def test_every_upstream_name_of_the_installed_torch_compiles(no_compile_cache):
    """An option dictionary with every pass name of the installed torch (both levels) compiles through the
    backend and Inductor; the Inductor settings among them reach Inductor's post_grad_fusion_options."""
    import torch._inductor.compile_fx as compile_fx_module
    import torch._inductor.config as inductor_config

    from optimus_eq.options import PASSED_TO_INDUCTOR

    pre = {n: {} for n in sorted(upstream_names("pre_grad"))}
    post = {n: {} for n in sorted(upstream_names("post_grad"))}
    seen = {}
    real = compile_fx_module.compile_fx

    def spy(gm, example_inputs, config_patches=None, **kw):
        seen.update(config_patches or {})
        return real(gm, example_inputs, config_patches=config_patches, **kw)

    torch._dynamo.reset()
    x, y = rand(3, 8), rand(3, 2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compile_fx_module, "compile_fx", spy)
        fn = torch.compile(split_cat_then_partial, backend=optimus_eq.backend(
            strategy="greedy", post_grad=True, pre_grad_fusion_options=pre, post_grad_fusion_options=post))
        out = fn(x, y)
    torch.testing.assert_close(out, split_cat_then_partial(x, y))
    assert set(seen["post_grad_fusion_options"]) == PASSED_TO_INDUCTOR & set(post)
    assert seen["pre_grad_fusion_options"] == {}
    assert inductor_config.post_grad_fusion_options == {}  # the global config is untouched


@pytest.mark.parametrize("level,name", [("pre_grad", n) for n in IMPLEMENTED_PRE]
                         + [("post_grad", n) for n in IMPLEMENTED_POST])
def test_every_implemented_name_is_accepted(level, name):
    chosen = {p.name: p for p in select_from_options(DEFAULT_REGISTRY, {name: {"counter": 3}}, level)}
    assert chosen[name].options["counter"] == 3  # stored on the selection, over the pattern's own defaults
    assert all(level in p.levels for p in chosen.values())


def test_name_of_the_other_level_raises_value_error():
    with pytest.raises(ValueError, match="pre_grad_fusion_options"):
        select_from_options(DEFAULT_REGISTRY, {"split_cat_pass": {}}, "post_grad")
    with pytest.raises(ValueError, match="post_grad_fusion_options"):
        select_from_options(DEFAULT_REGISTRY, {"batch_aten_add": {}}, "pre_grad")


@pytest.mark.parametrize("bad", [["split_cat_pass"], {"split_cat_pass": True}])
def test_malformed_options_raise_type_error(bad):
    with pytest.raises(TypeError):
        select_from_options(DEFAULT_REGISTRY, bad, "pre_grad")


def test_patterns_and_options_together_raise():
    with pytest.raises(ValueError, match="not both"):
        optimus_eq.optimize(*dynamo_graph(split_cat_then_partial, rand(3, 8), rand(3, 2)),
                            patterns=["split_cat_pass"], pre_grad_fusion_options={"split_cat_pass": {}})


def test_backend_validates_at_construction_and_passes_options():
    with pytest.raises(ValueError, match="nope"):
        optimus_eq.backend(pre_grad_fusion_options={"nope": {}})
    optimus_eq.last_reports.clear()
    be = optimus_eq.backend("greedy", compile=False, pre_grad_fusion_options={"split_cat_pass": {}})
    x, y = rand(3, 8, seed=2), rand(3, 2, seed=3)
    torch._dynamo.reset()
    out = torch.compile(split_cat_then_partial, backend=be, fullgraph=True)(x, y)
    ref = split_cat_then_partial(x, y)
    for a, e in zip(out, ref):
        torch.testing.assert_close(a, e)
    report = optimus_eq.last_reports[-1]
    assert report.rule_matches["split_cat_pass"] > 0
    assert set(report.rule_matches) <= {"split_cat_pass", *UPSTREAM_SCOPE["split_cat_pass"]}


# -- options validated at the call that gives them (issue 11, item 4) ----------------------------------

def _gm():
    return dynamo_graph(split_cat_then_partial, rand(3, 8), rand(3, 2))


def test_backend_rejects_an_unknown_keyword_at_once():
    """Today's failure was at the first call, inside Dynamo; now the backend() call raises and lists the
    valid names."""
    with pytest.raises(TypeError, match="typo_option") as info:
        optimus_eq.backend(typo_option=1)
    assert "pre_grad_fusion_options" in str(info.value) and "limits" in str(info.value)
    with pytest.raises(TypeError, match="typo_option"):
        optimus_eq.post_grad_pass("eqsat", typo_option=1)


@pytest.mark.parametrize("kwargs,exc,match", [
    ({"pattern_options": {"batch_linear": {"min_fuse_set_size": "two"}}}, TypeError, "min_fuse_set_size must be an int"),
    ({"pre_grad_fusion_options": {"batch_linear": {"min_fuse_set_size": "two"}}}, TypeError, "min_fuse_set_size"),
    ({"limits": {"iterations": 3}}, TypeError, r"Limits\(\*\*"),
    ({"extractor": "bogus"}, ValueError, "'tree', 'ilp'"),
    ({"cost_model": "gpu"}, TypeError, "GPUCostModel"),
    ({"pre_grad_fusion_options": {"batch_linear": {"min_fuse_set_size": -1}}}, ValueError, ">= 1, got -1"),
    ({"pre_grad_fusion_options": {"batch_linear": {"min_fuse_set_size": 9, "max_fuse_set_size": 3}}}, ValueError,
     "above max_fuse_set_size"),
    ({"pattern_options": {"batch_layernorm": {"max_fuse_search_depth": 0}}}, ValueError, "max_fuse_search_depth"),
    ({"ilp_seconds": -1}, ValueError, "ilp_seconds must be > 0"),
    ({"ilp_max_nodes": 1.5}, TypeError, "ilp_max_nodes"),
    ({"pre_grad_fusion_options": {"split_cat_pass": {"bogus": 1}}}, ValueError, r"unknown option\(s\) \['bogus'\].*counter"),
    ({"pattern_options": {"merge_splits_pass": {"threshold_to_cat": -2}}}, ValueError, "threshold_to_cat"),
    ({"strategy_options": ["alpha"]}, TypeError, "strategy_options must be a dict"),
    ({"patterns": 3}, TypeError, "patterns must be"),
])
@pytest.mark.parametrize("where", ["optimize", "backend"])
def test_bad_option_raises_at_the_call(kwargs, exc, match, where):
    """Each misuse raises at optimize() or backend(), never a fallback warning at the first compile; the
    message names the option and what is valid."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback warning would fail here
        with pytest.raises(exc, match=match):
            if where == "optimize":
                optimus_eq.optimize(*_gm(), strategy="greedy", **kwargs)
            else:
                optimus_eq.backend("greedy", **kwargs)


@pytest.mark.parametrize("kwargs,match", [
    ({"iterations": 0}, "iterations must be an int >= 1"),
    ({"nodes": 0}, "nodes must be an int >= 1"),
    ({"seconds": -1}, "seconds must be >= 0"),
    ({"seconds": float("nan")}, "seconds"),
    ({"iterations": 2.5}, "iterations must be an int"),
    ({"seconds": "10"}, "seconds must be a number"),
])
def test_limits_out_of_range_raise(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        optimus_eq.Limits(**kwargs)


def test_limits_edges_stay_valid():
    """``seconds=0`` (stop at the first check: test_failsafe's time-limit case) and no time limit."""
    assert optimus_eq.Limits(seconds=0.0).seconds == 0.0
    assert optimus_eq.Limits(iterations=1, nodes=1, seconds=float("inf")).iterations == 1


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_a_single_pattern_name_is_one_pattern(strategy):
    """``patterns="split_cat_pass"`` means ["split_cat_pass"] (it used to be read letter by letter)."""
    one = check(split_cat_then_partial, [rand(3, 8, seed=0), rand(3, 2, seed=1)], strategy, patterns="split_cat_pass")
    assert set(one.report.rule_matches) == {"split_cat_pass"}
    be = optimus_eq.backend(strategy, compile=False, patterns="split_cat_pass")
    torch._dynamo.reset()
    optimus_eq.last_reports.clear()
    torch.compile(split_cat_then_partial, backend=be, fullgraph=True)(rand(3, 8), rand(3, 2))
    assert set(optimus_eq.last_reports[-1].rule_matches) == {"split_cat_pass"}
    with pytest.raises(ValueError, match="split_cat_passs"):
        optimus_eq.optimize(*_gm(), patterns="split_cat_passs")


def test_optimize_of_a_non_graph_module_raises_type_error():
    with pytest.raises(TypeError, match="GraphModule"):
        optimus_eq.optimize(split_cat_then_partial, [rand(3, 8), rand(3, 2)])
    with pytest.raises(TypeError, match="GraphModule"):
        optimus_eq.optimize(torch.nn.Linear(2, 2))
    gm, ex = _gm()
    with pytest.raises(TypeError, match="example_inputs"):
        optimus_eq.optimize(gm, ex[0])


def test_valid_options_of_the_built_in_are_accepted():
    """Option names the built-in reads for its passes (counter, threshold_to_cat, graph_search_options)
    pass validation and still optimize."""
    gm, ex = _gm()
    _, r = optimus_eq.optimize(gm, ex, "greedy", pre_grad_fusion_options={
        "split_cat_pass": {"counter": 2}, "split_cat_to_slices_pass": {"threshold_to_cat": 5},
        "batch_linear": {"min_fuse_set_size": 2, "max_fuse_set_size": 8, "max_fuse_search_depth": 3,
                         "require_fbgemm": False}})
    assert r.fallback is None and r.rule_matches["split_cat_pass"] > 0


# Found: ``patterns=`` naming only patterns of the other IR level (``optimize(dynamo_gm, patterns=
# ["split_cat_aten_pass"])``, ``optimize_exported(ep, patterns=["batch_tanh"])``, ``post_grad_pass(patterns=
# ["batch_linear"])``) was accepted and did nothing, with no warning or note, where a misplaced name in the built-in
# format raises ("is not a pre_grad pass"). Fixed in options.py (select_patterns: ValueError naming the level's
# patterns); a list with names of both levels still runs those of the graph's level.
def test_patterns_of_the_other_level_only_raise():
    import optimus_eq

    def f(x):
        a, b = x.split(2, 1)
        return torch.cat([a.tanh(), b.tanh()], 1)

    gm = torch.fx.symbolic_trace(f)
    x = torch.randn(3, 4)
    with pytest.raises(ValueError, match="runs at the pre_grad level"):
        optimus_eq.optimize(gm, [x], strategy="greedy", patterns=["split_cat_aten_pass"])
    with pytest.raises(ValueError, match="runs at the post_grad level"):
        optimus_eq.post_grad_pass("greedy", patterns=["batch_linear"])
    with pytest.raises(ValueError, match="runs at the pre_grad level"):
        optimus_eq.backend("greedy", patterns=["split_cat_aten_pass"])
    gm2, report = optimus_eq.optimize(gm, [x], strategy="greedy",
                                      patterns=["split_cat_aten_pass", "normalization_pass", "split_cat_pass"])
    assert report.patterns_fired["normalization_pass"] > 0
    gm3, report = optimus_eq.optimize(gm, [x], strategy="greedy", patterns=[])  # none: allowed, nothing runs
    assert not report.patterns_fired
