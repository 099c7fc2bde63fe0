"""Pattern selection from the built-in Optimus option dictionaries.

PyTorch's Optimus passes are switched on with two Inductor settings (torch/_inductor/config.py)::

    torch._inductor.config.pre_grad_fusion_options = {"split_cat_pass": {}, "batch_linear": {"min_fuse_set_size": 3}}
    torch._inductor.config.post_grad_fusion_options = {"batch_aten_add": {}}

Each key names a pass (the Optimus name), each value is that pass's option dictionary
(``min_fuse_set_size``, ``max_fuse_set_size``, ``threshold_to_cat``, ``counter``, ...). ``optimize`` and
``backend`` take the same dictionaries, so a user switches with no new configuration: the keys choose
the registered patterns of that IR level, and each value is stored on the selected pattern
(``Pattern.options``) for the pattern's own code to read. Option keys are not interpreted here.

Names are checked against the registry and against the pass names of the built-in (torch 2.13,
listed below, plus those of the installed torch): an unknown name raises ``ValueError`` listing the
valid ones. Every built-in name of the installed torch is accepted (an option dictionary copied from an
upstream config compiles); those that are not a pattern here are handled as upstream handles them, with a
note in ``Report.notes`` (:func:`option_notes`):

* names the built-in registers no pattern under (``merge_stack_tahn_unbind_pass``): no-ops, as upstream;
* Inductor settings that only travel in the dictionary (:data:`PASSED_TO_INDUCTOR`: ``pad_aten_mm_pass``,
  ``shape_padding_multiplier``, read by pad_mm.py; ``activation_quantization_aten_pass``,
  ``inductor_autotune_lookup_table``): no pattern here; the backend passes them to Inductor;
* ``group_linear`` (upstream: ``fbgemm.gmm`` of linears of any shapes): selects
  ``batch_linear_post_grad`` (one ``bmm`` per group of equal shapes, no fbgemm), with its options.

A built-in name that is none of these and not implemented raises ``NotImplementedError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Iterable

from optimus_eq.registry import LEVELS, Pattern, PatternRegistry

#: Pass names the built-in accepts in ``pre_grad_fusion_options`` (torch 2.13:
#: torch/_inductor/fx_passes/split_cat.py ``pre_grad_pass_names`` and group_batch_fusion.py
#: ``PRE_GRAD_FUSIONS``).
UPSTREAM_PRE_GRAD = (
    "normalization_pass", "remove_split_with_size_one_pass", "merge_getitem_cat_pass",
    "merge_stack_tahn_unbind_pass", "merge_splits_pass", "mutate_cat_pass", "split_cat_pass",
    "unbind_stack_pass", "split_cat_to_slices_pass", "unbind_cat_to_view_pass", "split_stack_to_cats_pass",
    "unbind_stack_to_slices_pass", "move_reshape_out_of_split_stack_pass", "einsum_to_pointwise_pass",
    "batch_linear_lhs", "batch_linear", "batch_layernorm", "batch_tanh", "batch_sigmoid", "batch_relu",
    "batch_detach", "batch_nan_to_num", "batch_clamp", "batch_dropout",
)

#: Pass names the built-in accepts in ``post_grad_fusion_options`` (torch 2.13: split_cat.py
#: ``post_grad_pass_names``, group_batch_fusion.py ``POST_GRAD_FUSIONS`` and
#: ``OPTIMUS_EXCLUDE_POST_GRAD``).
UPSTREAM_POST_GRAD = (
    "normalization_aten_pass", "decompose_mm_pass", "unbind_stack_aten_pass", "shape_padding_multiplier",
    "pad_aten_mm_pass", "split_cat_aten_pass", "select_cat_aten_pass", "move_view_after_cat_aten_pass",
    "batch_linear_post_grad", "group_linear", "batch_aten_tanh", "batch_aten_sigmoid", "batch_aten_relu",
    "batch_aten_add", "batch_aten_sub", "batch_aten_div", "batch_aten_mul",
    "activation_quantization_aten_pass", "inductor_autotune_lookup_table",
)


#: Patterns of ours that do part of the job of a built-in pass of the same option name, selected with
#: it (empty options unless named too). Upstream's split_cat_pass also folds split -> stack (any dim) and
#: split -> squeeze -> stack (``simplify_split_cat``, ``merge_split_squeeze``); unbind_stack_pass folds
#: unbind -> stack/cat along any dim (``merge_unbind_stack``); the *_to_slices / *_to_view / *_to_cats
#: passes remove the cat they rewrite, which here is the run algebra's job (split_cat_pass,
#: merge_getitem_cat_pass, mutate_cat_pass).
UPSTREAM_SCOPE: dict[str, tuple[str, ...]] = {
    "split_cat_pass": ("remove_split_with_size_one_pass", "split_stack_to_cats_pass", "unbind_stack_to_slices_pass",
                       "unbind_stack_pass", "merge_getitem_cat_pass", "mutate_cat_pass"),
    "unbind_stack_pass": ("unbind_stack_to_slices_pass", "unbind_cat_to_view_pass", "split_cat_pass",
                          "merge_getitem_cat_pass", "mutate_cat_pass"),
    "unbind_stack_to_slices_pass": ("unbind_stack_pass", "split_cat_pass", "merge_getitem_cat_pass", "mutate_cat_pass"),
    "unbind_cat_to_view_pass": ("split_cat_pass", "merge_getitem_cat_pass", "mutate_cat_pass"),
    "split_stack_to_cats_pass": ("unbind_stack_pass", "split_cat_pass", "merge_getitem_cat_pass", "mutate_cat_pass"),
    "move_reshape_out_of_split_stack_pass": ("split_stack_to_cats_pass", "fold_view_chain", "split_cat_pass",
                                             "merge_getitem_cat_pass", "mutate_cat_pass"),
}


#: Built-in post-grad names that are Inductor settings, not Optimus pattern passes: pad_mm.py reads
#: ``pad_aten_mm_pass`` (``k_threshold_to_pad``) and ``shape_padding_multiplier`` (``value``) from
#: ``post_grad_fusion_options``; torch/_inductor/utils.py ``OPTIMUS_EXCLUDE_POST_GRAD`` names the others.
#: The backend keeps them in Inductor's ``post_grad_fusion_options``.
PASSED_TO_INDUCTOR = frozenset({"pad_aten_mm_pass", "shape_padding_multiplier", "activation_quantization_aten_pass",
                                "inductor_autotune_lookup_table"})

#: Built-in names done here by another pattern: upstream's ``group_linear`` (GroupLinearFusion) groups
#: aten.mm/addmm into one ``fbgemm.gmm``; here equal-shape groups become one ``bmm``/``baddbmm``.
ALIASES = {"group_linear": "batch_linear_post_grad"}

#: Built-in names under which the built-in registers no pattern (torch 2.13), when the installed torch
#: cannot be read (:func:`empty_upstream_names`).
_EMPTY_UPSTREAM = frozenset({"merge_stack_tahn_unbind_pass"})


def empty_upstream_names(level: str) -> frozenset[str]:
    """Built-in pass names of ``level`` whose PatternMatcherPass in the installed torch holds no pattern
    (split_cat.py ``PRE_GRAD_PATTERNS`` / ``POST_GRAD_PATTERNS``): upstream accepts them and does nothing."""
    try:
        import torch._inductor.fx_passes.post_grad  # noqa: F401  (registers the post-grad patterns)
        import torch._inductor.fx_passes.pre_grad  # noqa: F401
        from torch._inductor.fx_passes import split_cat

        table = split_cat.PRE_GRAD_PATTERNS if level == "pre_grad" else split_cat.POST_GRAD_PATTERNS
        return frozenset(n for n, p in table.items() if not getattr(p, "patterns", True))
    except Exception:  # another torch version: the static list
        return _EMPTY_UPSTREAM if level == "pre_grad" else frozenset()


def option_notes(registry: PatternRegistry, fusion_options: Mapping | None, level: str) -> list[str]:
    """One note per name of ``fusion_options`` (a checked option dictionary of ``level``) that is accepted
    without a pattern of that name here (module docstring), for ``Report.notes``."""
    ours = {p.name for p in registry if level in p.levels}
    notes = []
    for name in fusion_options or {}:
        if name in ours:
            continue
        if name in ALIASES:
            notes.append(f"{name}: done by {ALIASES[name]} (groups of equal shapes as one bmm; no fbgemm); "
                         "groups of different shapes are left")
        elif name in PASSED_TO_INDUCTOR:
            notes.append(f"{name}: an Inductor setting, no pattern here; the optimus_eq backend passes it to "
                         "Inductor's post_grad_fusion_options")
        elif name in empty_upstream_names(level) or name in _EMPTY_UPSTREAM:
            notes.append(f"{name}: the built-in registers no pattern under this name; accepted as a no-op")
    return notes


def upstream_names(level: str) -> frozenset[str]:
    """Pass names the built-in Optimus accepts at ``level`` (the static torch 2.13 list and, where
    importable, the installed torch's own lists)."""
    names = set(UPSTREAM_PRE_GRAD if level == "pre_grad" else UPSTREAM_POST_GRAD)
    try:
        from torch._inductor.fx_passes import group_batch_fusion, split_cat

        if level == "pre_grad":
            names |= set(split_cat.pre_grad_pass_names) | set(group_batch_fusion.PRE_GRAD_FUSIONS)
        else:
            names |= set(split_cat.post_grad_pass_names) | set(group_batch_fusion.POST_GRAD_FUSIONS)
            names |= set(getattr(group_batch_fusion, "OPTIMUS_EXCLUDE_POST_GRAD", ()))
    except Exception:  # another torch version without these module attributes: the static list
        pass
    return frozenset(names)


#: Pass names listed in split_cat.py that are not Optimus split/cat or batch fusions (they come from
#: decompose_mem_bound_mm.py and pad_mm.py and only register their names there); left off.
_NOT_OPTIMUS = frozenset({"decompose_mm_pass", "pad_aten_mm_pass", "shape_padding_multiplier"})


def optimus_fusion_options() -> tuple[dict[str, dict], dict[str, dict]]:
    """Every Optimus option of the installed torch: ``(pre_grad_fusion_options, post_grad_fusion_options)``,
    the built-in passes all on (the demo's ``builtin`` column, the bench's ``inductor-optimus`` strategy).

    Read from torch/_inductor/fx_passes/group_batch_fusion.py (``PRE_GRAD_FUSIONS``,
    ``POST_GRAD_FUSIONS``: batch_linear, batch_layernorm, batch_relu, ...) and split_cat.py
    (``PRE_GRAD_PATTERNS``, ``POST_GRAD_PATTERNS``: normalization_pass, merge_splits_pass, ...), each with
    default options (``{}``), minus the few non-Optimus names in ``_NOT_OPTIMUS``. Group fusions
    (``GroupFusion`` subclasses such as ``group_linear``, which emit ``torch.ops.fbgemm.gmm``) get
    ``{"require_fbgemm": True}``, so Inductor runs them only where fbgemm_gpu is installed.
    """
    from torch._inductor.fx_passes import group_batch_fusion as gbf
    from torch._inductor.fx_passes import split_cat

    pre = {n: {} for n in [*gbf.PRE_GRAD_FUSIONS, *split_cat.PRE_GRAD_PATTERNS] if n not in _NOT_OPTIMUS}
    post = {n: {} for n in [*gbf.POST_GRAD_FUSIONS, *split_cat.POST_GRAD_PATTERNS] if n not in _NOT_OPTIMUS}
    for name, cls in gbf.POST_GRAD_FUSIONS.items():
        # group fusions (group_linear) emit torch.ops.fbgemm.gmm: Inductor applies them only where fbgemm is
        # installed when the option says so; without it, training graphs fail in Inductor (seen on the H200)
        if name in post and isinstance(cls, type) and issubclass(cls, gbf.GroupFusion):
            post[name] = {"require_fbgemm": True}
    return pre, post


def select_from_options(registry: PatternRegistry, fusion_options: Mapping, level: str) -> list[Pattern]:
    """The patterns named in ``fusion_options`` (an Optimus option dictionary for ``level``) and those
    of :data:`UPSTREAM_SCOPE` that do part of a named built-in pass's job, in registry order, each
    carrying its option dictionary as ``Pattern.options``.

    Args:
        registry: where patterns are looked up.
        fusion_options: ``{pass name: {option: value}}`` as in ``torch._inductor.config.
            pre_grad_fusion_options`` (``level="pre_grad"``) or ``post_grad_fusion_options``.
        level: ``"pre_grad"`` or ``"post_grad"``.

    Raises:
        TypeError: when ``fusion_options`` or one of its values is not a dictionary.
        ValueError: for a name neither registered at ``level`` nor a built-in pass of ``level``
            (the message lists the valid names); also for a name of the other level.
        NotImplementedError: for a built-in pass name of ``level`` that optimus_eq does not implement and
            that is not accepted as upstream handles it (module docstring).
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    key = f"{level}_fusion_options"
    if not isinstance(fusion_options, Mapping):
        raise TypeError(f"{key} must be a dict of pass name -> option dict, got {type(fusion_options).__name__}")
    ours = {p.name for p in registry if level in p.levels}
    upstream = upstream_names(level)
    other = "post_grad" if level == "pre_grad" else "pre_grad"
    for name, opts in fusion_options.items():
        if not isinstance(opts, Mapping):
            raise TypeError(f"{key}[{name!r}] must be a dict of options, got {type(opts).__name__}")
        if name in ours:
            continue
        if name in ALIASES and ALIASES[name] in ours:
            continue
        if name in upstream and (name in PASSED_TO_INDUCTOR or name in _EMPTY_UPSTREAM
                                 or name in empty_upstream_names(level)):
            continue  # accepted as upstream does: see option_notes
        if name in upstream:
            raise NotImplementedError(
                f"{name!r} is a {level} Optimus pass of the built-in but optimus_eq does not implement it yet; "
                f"implemented at {level}: {sorted(ours)}")
        if name in upstream_names(other) or name in registry:
            raise ValueError(f"{name!r} is not a {level} pass (it belongs in {other}_fusion_options)")
        raise ValueError(f"unknown pass {name!r} in {key}; valid names: {sorted(ours | upstream)}")
    chosen = set(fusion_options)
    given = dict(fusion_options)
    for name, target in ALIASES.items():
        if name in fusion_options and target in ours:
            chosen.add(target)
            given[target] = {**fusion_options[name], **fusion_options.get(target, {})}
    for name in fusion_options:
        chosen |= {n for n in UPSTREAM_SCOPE.get(name, ()) if n in ours}
    return [replace(p, options={**p.options, **given.get(p.name, {})})
            for p in registry if level in p.levels and p.name in chosen]


def select_patterns(registry: PatternRegistry, patterns: Iterable[str] | None, level: str, *,
                    pre_grad_fusion_options: Mapping | None = None,
                    post_grad_fusion_options: Mapping | None = None) -> list[Pattern]:
    """The patterns to run at ``level``: from the option dictionary of that level when given, else
    the names in ``patterns`` (all of ``level`` when None). Both dictionaries are validated, so a bad
    name fails before any graph is touched.

    Raises:
        ValueError, TypeError, NotImplementedError: as :func:`select_from_options`; ValueError also
            when ``patterns`` and the option dictionary of ``level`` are both given.
    """
    selections = {}
    for lv, opts in (("pre_grad", pre_grad_fusion_options), ("post_grad", post_grad_fusion_options)):
        if opts is not None:
            selections[lv] = select_from_options(registry, opts, lv)
    if level in selections:
        if patterns is not None:
            raise ValueError(f"give either patterns= or {level}_fusion_options=, not both")
        return selections[level]
    return registry.select(patterns, level)
