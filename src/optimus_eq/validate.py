"""Validation of a user's options at the call that gives them (``optimize``, ``backend``, ``post_grad_pass``).

A bad option is the user's input, not an internal failure: it raises ``TypeError`` (wrong name or type)
or ``ValueError`` (a value out of range or not among the valid ones) at once, with a message that lists
what is valid, instead of falling back with a warning at the first compile or being ignored. Internal
failures keep the fail-safe of :func:`optimus_eq.optimize` (the original graph, one warning).

Ranges: ``Limits`` checks its own fields (:class:`optimus_eq.egraph.Limits`); ``ilp_seconds`` > 0;
``ilp_max_nodes`` >= 0; horizontal options (Optimus' ``graph_search_options`` names) ``min_fuse_set_size``
>= 1, ``max_fuse_set_size`` >= ``min_fuse_set_size``, ``max_fuse_search_depth`` >= 1; vertical (split/cat)
passes take only the option names the built-in reads (``counter``, ``threshold_to_cat``, and
the post-grad mm decomposition's), non-negative integers (``skip_dynamic_shape_dim_check``: a bool).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from optimus_eq.checks import check_int, check_seconds
from optimus_eq.egraph import Limits
from optimus_eq.patterns import PatternRegistry

#: The keyword options of :func:`optimus_eq.optimize` besides ``gm``, ``example_inputs`` and ``strategy``
#: (``backend(**options)`` and ``post_grad_pass(**options)`` take the same).
OPTIMIZE_OPTIONS = ("patterns", "limits", "extractor", "cost_model", "ilp_seconds", "ilp_max_nodes", "registry",
                    "strategy_options", "level", "pre_grad_fusion_options", "post_grad_fusion_options",
                    "pattern_options")

#: Extraction methods (:func:`optimus_eq.extract.extract`).
EXTRACTORS = ("auto", "tree", "ilp")

#: Option names the built-in reads for its vertical (split/cat, normalization, decompose) passes
#: (torch 2.13: pre_grad.py ``counter``; split_cat.py ``threshold_to_cat``; decompose_mem_bound_mm.py the
#: ``*_decomposition`` sizes and ``skip_dynamic_shape_dim_check``). optimus_eq's vertical patterns read
#: none of them (saturation has no pass counter; run folding has no threshold) but accept them, so that an
#: option dictionary written for the built-in works unchanged.
VERTICAL_OPTIONS = frozenset(["counter", "threshold_to_cat", "min_first_dimension_decomposition",
                              "max_other_dimension_decomposition", "cpu_max_first_dimension_decomposition",
                              "cpu_max_other_dimension_decomposition", "skip_dynamic_shape_dim_check"])

#: Horizontal option -> its least valid value (``max_fuse_set_size`` is also checked against the min).
_HORIZONTAL_MINIMUM = {"min_fuse_set_size": 1, "max_fuse_set_size": 1, "max_fuse_search_depth": 1}


def check_names(given: Iterable[str], valid: Iterable[str], where: str) -> None:
    """Raise TypeError for a keyword in ``given`` that is not in ``valid`` (as Python does for an unexpected
    keyword argument), listing the valid ones."""
    valid = list(valid)
    unknown = [k for k in given if k not in valid]
    if unknown:
        raise TypeError(f"{where} got unexpected keyword argument(s) {unknown}; valid: {sorted(valid)}")


def pattern_names(patterns) -> list[str] | None:
    """``patterns`` as a list of names: None stays None, one name (a str) becomes a one-element list.

    Raises:
        TypeError: for anything but None, a str or an iterable of str.
    """
    if patterns is None:
        return None
    if isinstance(patterns, str):
        return [patterns]
    if isinstance(patterns, Mapping) or not isinstance(patterns, Iterable):
        raise TypeError(f"patterns must be a pattern name or a list of names, got {type(patterns).__name__}")
    names = list(patterns)
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise TypeError(f"patterns must be pattern names (str), got {bad!r}")
    return names


def check_search_options(*, limits, extractor, cost_model, ilp_seconds, ilp_max_nodes, registry,
                         strategy_options, pattern_options) -> None:
    """Types and ranges of :func:`optimus_eq.optimize`'s search options (the module docstring).

    Raises:
        TypeError: ``limits`` not a :class:`~optimus_eq.egraph.Limits` (a dict, say), ``cost_model`` not a
            cost model, ``registry`` not a PatternRegistry, a dictionary option that is not a dict, or a
            number of the wrong type.
        ValueError: ``extractor`` not among :data:`EXTRACTORS`, or a number out of range.
    """
    if limits is not None and not isinstance(limits, Limits):
        hint = f" (Limits(**{limits!r}))" if isinstance(limits, Mapping) else ""
        raise TypeError(f"limits must be optimus_eq.Limits(iterations=..., nodes=..., seconds=...){hint}, "
                        f"got {type(limits).__name__}")
    if extractor not in EXTRACTORS:
        raise ValueError(f"unknown extractor {extractor!r}; valid: {EXTRACTORS}")
    if cost_model is not None and not callable(getattr(cost_model, "node_cost", None)):
        raise TypeError("cost_model must be an optimus_eq.cost.GPUCostModel (GPUCostModel(), "
                        f"GPUCostModel.cudagraph(), GPUCostModel.from_calibration(path)), got {cost_model!r}")
    check_seconds("ilp_seconds", ilp_seconds, positive=True)
    check_int("ilp_max_nodes", ilp_max_nodes, 0)
    if not isinstance(registry, PatternRegistry):
        raise TypeError(f"registry must be a PatternRegistry, got {type(registry).__name__}")
    for name, value in (("strategy_options", strategy_options), ("pattern_options", pattern_options)):
        if value is not None and not isinstance(value, Mapping):
            raise TypeError(f"{name} must be a dict, got {type(value).__name__}")
    for name, opts in (pattern_options or {}).items():
        if not isinstance(opts, Mapping):
            raise TypeError(f"pattern_options[{name!r}] must be a dict of options, got {type(opts).__name__}")


def check_horizontal_values(pattern: str, options: Mapping) -> None:
    """The merged options of a horizontal pattern (defaults, the pattern's own, the user's): integers in
    range and ``min_fuse_set_size <= max_fuse_set_size``.

    Raises:
        TypeError, ValueError: naming the pattern and the option.
    """
    for key, least in _HORIZONTAL_MINIMUM.items():
        if key in options:
            check_int(f"{pattern}: {key}", options[key], least)
    lo, hi = options.get("min_fuse_set_size"), options.get("max_fuse_set_size")
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"{pattern}: min_fuse_set_size ({lo}) is above max_fuse_set_size ({hi})")


def check_vertical_options(pattern: str, *sources: Mapping) -> None:
    """Option names and values given to a vertical pattern (from a fusion-option dictionary or
    ``pattern_options``): only :data:`VERTICAL_OPTIONS`, non-negative ints (a bool for
    ``skip_dynamic_shape_dim_check``).

    Raises:
        ValueError: an unknown option name (the message lists the valid ones) or a negative value.
        TypeError: a value of the wrong type.
    """
    for src in sources:
        unknown = sorted(set(src) - VERTICAL_OPTIONS)
        if unknown:
            raise ValueError(f"{pattern}: unknown option(s) {unknown}; valid: {sorted(VERTICAL_OPTIONS)}")
        for key, value in src.items():
            if key == "skip_dynamic_shape_dim_check":
                if not isinstance(value, bool):
                    raise TypeError(f"{pattern}: {key} must be a bool, got {value!r}")
            else:
                check_int(f"{pattern}: {key}", value, 0)
