"""torch.export: optimize an ``ExportedProgram`` and hand back an ``ExportedProgram``.

An exported program is Aten-IR (``torch.export.export`` traces to aten OpOverloads), so it is optimized at
the post-grad level, the level whose patterns read aten ops. Its decomposed form (``run_decompositions``,
core ATen: ``linear`` -> ``permute`` + ``addmm``, ``layer_norm`` -> ``native_layer_norm``) is what the
post-grad horizontal patterns match and what AOTInductor lowers anyway. The optimized module is exported
again, so the result runs, re-exports and compiles with ``torch._inductor.aoti_compile_and_package``.
"""

from __future__ import annotations

import warnings

import torch

from optimus_eq import api


def optimize_exported(ep, example_inputs: tuple | None = None, strategy: str = "eqsat", *,
                      decompose: bool = True, **options):
    """Optimize an exported program.

    Args:
        ep: a ``torch.export.ExportedProgram``.
        example_inputs: ``(args, kwargs)`` to export the optimized module with (default: ``ep.example_inputs``,
            which ``torch.export.export`` records).
        strategy: as :func:`optimus_eq.optimize` (``"eqsat"``, ``"greedy"``, ...).
        decompose: run ``ep.run_decompositions()`` first (core ATen), so that ``aten.linear`` is an ``addmm``
            the post-grad batched linear matches.
        **options: passed to :func:`optimus_eq.optimize` (``patterns`` are post-grad pattern names).

    Returns:
        ``(program, report)``: a new ``ExportedProgram`` with the same call signature (inputs and outputs as
        the user's pytrees); dims that are dynamic in ``ep`` (``torch.export.Dim``) are exported as
        ``Dim.AUTO`` again. On any internal failure (optimizing, or exporting the optimized module) ``ep``
        itself with one warning (``report.fallback`` says why).

    Raises:
        TypeError: ``ep`` is not an ``ExportedProgram``.
        ValueError: no example inputs (``ep.example_inputs`` is None and none given), or ``example_inputs``
            not ``(tuple, dict)``; bad options, as
            :func:`optimus_eq.optimize` raises them.
    """
    if not isinstance(ep, torch.export.ExportedProgram):
        raise TypeError(f"optimize_exported takes a torch.export.ExportedProgram, not {type(ep).__name__}; "
                        "for a GraphModule call optimus_eq.optimize")
    example_inputs = example_inputs if example_inputs is not None else ep.example_inputs
    if example_inputs is None:
        raise ValueError("the ExportedProgram records no example inputs; pass example_inputs=(args, kwargs)")
    if not (isinstance(example_inputs, (tuple, list)) and len(example_inputs) == 2
            and isinstance(example_inputs[0], (tuple, list)) and isinstance(example_inputs[1], dict)):
        raise ValueError("example_inputs is (args, kwargs): a tuple of the positional inputs and a dict, e.g. "
                         f"((x,), {{}}), not {type(example_inputs).__name__} {_kinds(example_inputs)}")
    args, kwargs = example_inputs
    if "level" in options and options["level"] != "post_grad":
        raise ValueError("an ExportedProgram is Aten-IR: optimize_exported runs level='post_grad' only")
    options = {k: v for k, v in options.items() if k != "level"}
    source = ep.run_decompositions() if decompose else ep
    gm = source.module()
    new_gm, report = api.optimize(gm, None, strategy=strategy, level="post_grad", **options)
    if new_gm is gm:  # strategy "none", or a fallback (already warned)
        return ep, report
    try:
        # a lazy GraphModule's forward is (*args, **kwargs) until its code is generated: export would name the
        # inputs args_0, ... instead of the user's
        from torch.fx._lazy_graph_module import _LazyGraphModule

        _LazyGraphModule.force_recompile(new_gm)
        program = torch.export.export(new_gm, tuple(args), dict(kwargs),
                                      dynamic_shapes=_dynamic_shapes(ep, new_gm, args, kwargs))
    except Exception as exc:  # fail-safe: the user's program is never lost
        report.fallback = f"re-export failed: {type(exc).__name__}: {exc}"
        warnings.warn(f"optimus_eq: {report.fallback}; returning the original program", stacklevel=2)
        return ep, report
    return program, report


def _kinds(value) -> list:
    """The type names of ``value``'s items (for an error message)."""
    return [type(v).__name__ for v in value] if isinstance(value, (tuple, list)) else []


def _dynamic_shapes(ep, module, args, kwargs):
    """``dynamic_shapes`` for exporting ``module`` (the optimized ``ep.module()``) with ``args``/``kwargs``:
    ``Dim.AUTO`` at every dim of a user input that is symbolic in ``ep``, None (static) elsewhere, keyed by
    ``module.forward``'s parameter names; None when ``ep`` has no symbolic input dim.

    The user inputs are read off ``ep``'s input specs, constants (an ``int`` or ``float`` argument, None)
    included, in the order of ``ep``'s input tree: ``graph_signature.user_inputs`` holds a constant's value
    where a tensor's name stands, so read from there a program with a ``scale: float`` argument would be
    exported again with every dim static (the optimized program would refuse other batch sizes)."""
    import inspect

    from torch.export import Dim
    from torch.export.graph_signature import InputKind
    from torch.utils._pytree import tree_unflatten

    names = [getattr(s.arg, "name", None) for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    by_name = {n.name: n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"}
    vals = [by_name.get(name) for name in names]
    specs = [{d: Dim.AUTO for d, s in enumerate(v.shape) if not isinstance(s, int)} or None
             if isinstance(v, torch.Tensor) else None for v in vals]
    if not any(specs):
        return None
    in_spec = ep.call_spec.in_spec
    if in_spec is None or in_spec.num_leaves != len(specs):
        return None  # an input structure this mapping does not know: export decides (static)
    arg_specs, kwarg_specs = tree_unflatten(specs, in_spec)
    return dict(inspect.signature(module.forward).bind(*arg_specs, **kwarg_specs).arguments)
