"""Pattern selection from the built-in Optimus option dictionaries.

PyTorch's Optimus passes are switched on with two Inductor settings (torch/_inductor/config.py)::

    torch._inductor.config.pre_grad_fusion_options = {<pass name>: {<option>: <value>, ...}, ...}
    torch._inductor.config.post_grad_fusion_options = {<pass name>: {}, ...}

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
* a built-in name that a pattern here stands in for (``Pattern.aliases``: upstream's ``group_linear``,
  ``fbgemm.gmm`` of linears of any shapes, is done by the post-grad batched linear, one ``bmm`` per group of
  equal shapes, no fbgemm): selects that pattern, with its options.

A built-in name that is none of these and not implemented raises ``NotImplementedError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Iterable

from optimus_eq.patterns import DEFAULT_REGISTRY
from optimus_eq.registry import LEVELS, Pattern, PatternRegistry

#: Built-in names that no pattern of ours carries (pre-grad: registered upstream with no pattern; post-grad:
#: Inductor settings, and the group fusion that a pattern of ours stands in for under its ``aliases``).
_UPSTREAM_ONLY = {
    "pre_grad": ("merge_stack_tahn_unbind_pass",),
    "post_grad": ("shape_padding_multiplier", "pad_aten_mm_pass", "activation_quantization_aten_pass",
                  "inductor_autotune_lookup_table"),
}


def _builtin_names(level: str) -> tuple[str, ...]:
    """The static list of the pass names the built-in accepts at ``level`` (torch 2.13): the registered
    patterns that carry a built-in name (``Pattern.builtin``), their ``aliases``, and :data:`_UPSTREAM_ONLY`."""
    ours = [p for p in DEFAULT_REGISTRY if level in p.builtin]
    return (*(p.name for p in ours), *(a for p in ours for a in p.aliases), *_UPSTREAM_ONLY[level])


#: Pass names the built-in accepts in ``pre_grad_fusion_options`` (torch 2.13:
#: torch/_inductor/fx_passes/split_cat.py ``pre_grad_pass_names`` and group_batch_fusion.py
#: ``PRE_GRAD_FUSIONS``).
UPSTREAM_PRE_GRAD = _builtin_names("pre_grad")

#: Pass names the built-in accepts in ``post_grad_fusion_options`` (torch 2.13: split_cat.py
#: ``post_grad_pass_names``, group_batch_fusion.py ``POST_GRAD_FUSIONS`` and
#: ``OPTIMUS_EXCLUDE_POST_GRAD``).
UPSTREAM_POST_GRAD = _builtin_names("post_grad")


#: Patterns of ours that do part of the job of a built-in pass of the same option name, selected with
#: it (empty options unless named too), read off each built-in pattern's ``also``: upstream's passes do more
#: than their names say (its split/cat pass also folds split -> stack and split -> squeeze -> stack, its
#: unbind/stack pass folds along any dim, and its *_to_slices / *_to_view / *_to_cats passes remove the cat
#: they rewrite, which here is the run algebra's job).
UPSTREAM_SCOPE: dict[str, tuple[str, ...]] = {p.name: p.also for p in DEFAULT_REGISTRY if p.also}


#: Built-in post-grad names that are Inductor settings, not Optimus pattern passes: pad_mm.py reads
#: ``pad_aten_mm_pass`` (``k_threshold_to_pad``) and ``shape_padding_multiplier`` (``value``) from
#: ``post_grad_fusion_options``; torch/_inductor/utils.py ``OPTIMUS_EXCLUDE_POST_GRAD`` names the others.
#: The backend keeps them in Inductor's ``post_grad_fusion_options``.
PASSED_TO_INDUCTOR = frozenset({"pad_aten_mm_pass", "shape_padding_multiplier", "activation_quantization_aten_pass",
                                "inductor_autotune_lookup_table"})


def _aliases(registry: PatternRegistry) -> dict[str, tuple[str, str]]:
    """Built-in names done here by another pattern (``Pattern.aliases``): name -> (pattern, note)."""
    return {a: (p.name, note) for p in registry for a, note in p.aliases.items()}

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
    aliases = _aliases(registry)
    notes = []
    for name in fusion_options or {}:
        if name in ours:
            continue
        if name in aliases:
            notes.append(f"{name}: done by {aliases[name][0]} {aliases[name][1]}")
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
_NOT_OPTIMUS = frozenset({"pad_aten_mm_pass", "shape_padding_multiplier",
                          *(p.name for p in DEFAULT_REGISTRY if not p.builtin_optimus)})


def optimus_fusion_options() -> tuple[dict[str, dict], dict[str, dict]]:
    """Every Optimus option of the installed torch: ``(pre_grad_fusion_options, post_grad_fusion_options)``,
    the built-in passes all on (the demo's ``builtin`` column, the bench's ``inductor-optimus`` strategy).

    Read from torch/_inductor/fx_passes/group_batch_fusion.py (``PRE_GRAD_FUSIONS``,
    ``POST_GRAD_FUSIONS``: the batch fusions) and split_cat.py (``PRE_GRAD_PATTERNS``,
    ``POST_GRAD_PATTERNS``: the split/cat passes), each with
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
    aliases = _aliases(registry)
    upstream = upstream_names(level)
    other = "post_grad" if level == "pre_grad" else "pre_grad"
    for name, opts in fusion_options.items():
        if not isinstance(opts, Mapping):
            raise TypeError(f"{key}[{name!r}] must be a dict of options, got {type(opts).__name__}")
        if name in ours:
            continue
        if name in aliases and aliases[name][0] in ours:
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
    for name, (target, _) in aliases.items():
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
            when ``patterns`` and the option dictionary of ``level`` are both given, or when ``patterns``
            names only patterns of another level (a Torch-IR pattern for an Aten-IR graph: nothing would run).
    """
    selections = {}
    for lv, opts in (("pre_grad", pre_grad_fusion_options), ("post_grad", post_grad_fusion_options)):
        if opts is not None:
            selections[lv] = select_from_options(registry, opts, lv)
    if level in selections:
        if patterns is not None:
            raise ValueError(f"give either patterns= or {level}_fusion_options=, not both")
        return selections[level]
    chosen = registry.select(patterns, level)
    if chosen and not any(level in p.levels for p in chosen):  # a silent no-op otherwise: no rule would match
        raise ValueError(f"none of the patterns {[p.name for p in chosen]} runs at the {level} level (the graph's "
                         f"IR level); {level} patterns: {sorted(p.name for p in registry if level in p.levels)}")
    return chosen
