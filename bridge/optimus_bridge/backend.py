"""torch.compile hooks: the ``optimus_eq`` backend (registered through the ``torch_dynamo_backends``
entry point) and :func:`backend` for options."""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Mapping
from typing import Callable

from optimus_bridge import param_pack as _param_pack
from optimus_bridge import post_grad as _post_grad
from optimus_eq import api, validate
from optimus_eq.cost import GPUCostModel
from optimus_eq.options import PASSED_TO_INDUCTOR
from optimus_eq.patterns import DEFAULT_REGISTRY


def backend(strategy: str = "eqsat", compile: bool = True, inductor_config: dict | None = None,
            pre_grad: bool = True, post_grad: bool = False, post_grad_hook: str = "pre",
            post_grad_options: dict | None = None, mode: str | None = None, pack_parameters: bool = True,
            **options) -> Callable:
    """A torch.compile backend that optimizes the dynamo graph, then compiles it with Inductor.

    Args:
        strategy: ``"eqsat"``, ``"greedy"``, ``"none"`` (Inductor alone), or for ablation ``"taso"`` / ``"tensat"``.
        compile: hand the result to Inductor's ``compile_fx`` (False: run the optimized graph eagerly).
        inductor_config: Inductor config patches passed to ``compile_fx`` (e.g. ``{"triton.cudagraphs": True}``).
        pre_grad: optimize the Torch-IR graph dynamo captures (before AOTAutograd).
        post_grad: also optimize the Aten-IR graphs AOTAutograd produces (forward and backward), as
            Inductor's post-grad custom pass (:class:`optimus_bridge.post_grad.PostGradPass`); needs
            ``compile=True``. A post-grad pass already set in ``inductor_config`` or Inductor's config
            runs first.
        post_grad_hook: ``"pre"`` (``post_grad_custom_pre_pass``: before Inductor's own post-grad
            passes) or ``"post"`` (``post_grad_custom_post_pass``: after them).
        post_grad_options: options of the post-grad pass (default: ``options`` without ``patterns``, and
            of ``pattern_options`` the post-grad patterns' entries; the pre-grad ``optimize`` gets the
            pre-grad ones).
        mode: an Inductor mode (``"reduce-overhead"``, ``"max-autotune"``, ...), expanded with
            ``torch._inductor.list_mode_options``.
        pack_parameters: make the optimized graph's stacks of parameters free: the parameters become
            views of one buffer laid out as the stack, and the compiled graph takes the buffer (in a
            training graph through ``packed_stack``, whose backward gives each parameter its slice of the
            gradient; :mod:`optimus_bridge.param_pack`; in-place updates of the parameters are seen, their
            storage moves). ``report.notes`` says what was packed. Not with ``strategy="none"``, whose graph
            goes to Inductor unchanged. Under CUDA graphs, stacks with gradients only where their copies would
            cost more than packing's host time per call (:func:`grad_packing_pays`).
        **options: passed to :func:`optimus_eq.optimize` (patterns, limits, extractor,
            pre_grad_fusion_options / post_grad_fusion_options in the built-in Optimus format, ...).

    ``torch.compile(model, backend=backend(...), mode=..., options=...)`` also works: torch.compile hands
    ``mode`` and ``options`` to a custom backend as keyword arguments, and they are applied like ``mode``
    and ``inductor_config`` here (``torch.compile``'s take precedence).

    Cost model: unless ``options`` holds a ``cost_model``, the pre-grad ``optimize`` gets the CUDA-graph
    model (:meth:`optimus_eq.cost.GPUCostModel.cudagraph`) when the compile uses CUDA graphs
    (``mode="reduce-overhead"``, or ``triton.cudagraphs`` in the options or Inductor's config; see
    :func:`cost_model_for`), else the default model. ``report.cost_model`` says which.

    If Inductor fails on the optimized graph, the original graph is compiled instead (one warning).

    Raises (at this call, not at the first compile inside Dynamo):
        ValueError: for an unknown strategy or hook, or ``post_grad=True`` with ``compile=False``.
        TypeError: for a keyword that is not an option of :func:`optimus_eq.optimize` (the message lists
            them), or an option of the wrong type.
        ValueError, NotImplementedError: for a bad pattern name, Optimus option dictionary or option value,
            as :func:`optimus_eq.optimize` (:mod:`optimus_eq.validate`).
    """
    if strategy not in api.STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; valid: {api.STRATEGIES}")
    if post_grad and not compile:
        raise ValueError("post_grad=True needs compile=True (the post-grad pass runs inside Inductor)")
    options = _check_backend_arguments(post_grad_hook, inductor_config, post_grad_options, mode, options)
    base_patches = dict(inductor_config or {})
    notes = _own_optimus_passes(strategy, pre_grad, post_grad, base_patches, options)
    by_level = _pattern_options_by_level(options)
    if post_grad:
        if post_grad_options is not None:
            pg_options = post_grad_options
        else:
            pg_options = {k: v for k, v in options.items() if k != "patterns"}
            if "pattern_options" in options:
                pg_options["pattern_options"] = by_level["post_grad"]
        _post_grad.install(base_patches, _post_grad.PostGradPass(strategy, **pg_options), post_grad_hook)
    default_mode, optimize_options = mode, dict(options)
    if "pattern_options" in options:
        optimize_options["pattern_options"] = by_level["pre_grad"]
    # every option of the pre-grad optimize checked now (names, types, ranges), not at the first compile
    try:
        api.check_options(strategy, "backend()", **optimize_options)
    except (ValueError, NotImplementedError) as exc:
        if any("read as" in n for n in notes):
            raise type(exc)(f"{exc} (from Inductor's *_grad_fusion_options, which this backend reads as its "
                            "pattern selection; pass patterns= or pre_grad_fusion_options= to choose)") from exc
        raise
    _inductor_patches(mode, base_patches)  # an unknown mode fails here, not inside Dynamo

    def optimus_eq_backend(gm, example_inputs, mode: str | None = None, options: dict | None = None):
        patches = _inductor_patches(mode or default_mode, {**base_patches, **(options or {})})
        if compile:  # they start while the optimizer runs, as Inductor's own backend starts them
            _start_compile_workers(example_inputs, patches)
        if pre_grad:
            call_options = optimize_options
            if "cost_model" not in optimize_options:
                call_options = {**optimize_options, "cost_model": cost_model_for(patches, example_inputs,
                                                                                 pack_parameters)}
            elif pack_parameters and isinstance(optimize_options["cost_model"], GPUCostModel):
                # the stacks this backend packs are views: priced as such in the user's constants too
                call_options = {**optimize_options, "cost_model": dataclasses.replace(
                    optimize_options["cost_model"], packed_parameters=True)}
            with _user_saved_tensor_hooks_off():  # the meta propagation records no saved tensor of the user's
                optimized, report = api.optimize(gm, example_inputs, strategy=strategy, **call_options)
            report.notes.extend(notes)
        else:
            optimized, report = gm, None
        if optimized is not gm:
            _carry_dynamo_metadata(gm, optimized)
        packs, inputs = None, example_inputs
        if pack_parameters and strategy != "none":  # "none": the graph goes to Inductor unchanged
            gradients = True  # under CUDA graphs: only where the copies cost more than packing's host time
            if uses_cudagraphs(patches) and _on_cuda(example_inputs):
                model = call_options["cost_model"] if pre_grad and isinstance(
                    call_options.get("cost_model"), GPUCostModel) else GPUCostModel.cudagraph()
                gradients = functools.partial(grad_packing_pays, model=model)
            packs, optimized, inputs = _pack(optimized, example_inputs, report, gradients=gradients)
        if not compile:
            return packs.wrap(optimized.forward) if packs else optimized.forward
        from torch._inductor.compile_fx import compile_fx

        from torch._dynamo.exc import RestartAnalysis

        try:
            compiled = compile_fx(optimized, inputs, config_patches=patches)
            return packs.wrap(compiled) if packs else compiled
        except RestartAnalysis:
            # not a failure: Inductor asks Dynamo to trace again (TensorifyScalarRestartAnalysis: a float
            # such as LayerNorm's eps, tensorified under dynamic=True, must be specialized). Compiling the
            # original graph instead swallowed the request, and every such graph lost the optimization.
            raise
        except Exception as exc:
            if optimized is gm or report is None:
                raise
            warnings.warn(f"optimus_eq: Inductor failed on the optimized graph ({type(exc).__name__}: {exc}); "
                          "compiling the original graph", stacklevel=2)
            report.fallback = f"inductor failed: {type(exc).__name__}: {exc}"
            return compile_fx(gm, packs.unpacked_inputs(example_inputs) if packs else example_inputs,
                              config_patches=patches)

    return optimus_eq_backend


#: the devices whose kernels Inductor compiles with Triton, in its pool of compile workers (``compile_fx`` wakes
#: the pool only for inputs on these; a CPU graph's C++ kernels compile in a thread pool)
TRITON_DEVICES = ("cuda", "xpu")


def _start_compile_workers(example_inputs=(), patches: dict | None = None) -> None:
    """Start Inductor's pool of Triton compile workers now, if it is not running (Inductor's
    ``maybe_warm_pool``, which honours ``TORCH_WARM_POOL=0`` and ``compile_threads``; a no-op without Triton),
    when a tensor of ``example_inputs`` is on a device of :data:`TRITON_DEVICES`, under the compile's Inductor
    config ``patches`` (``compile_threads``, ``worker_start_method`` from ``inductor_config``, ``mode`` or
    ``torch.compile(options=...)``), as ``compile_fx`` wakes the pool.

    Why: Inductor compiles a kernel in a worker only once the pool has answered its first job; until then
    each kernel compiles in the calling process, one at a time. Dynamo's registered ``inductor`` backend
    starts the pool at its first call, before ``compile_fx``; this backend calls ``compile_fx`` directly and,
    without this, started it only at its first kernel, later than Inductor's backend does. Started here, it
    starts while our optimizer runs. On the H200 (bench/results/h200_2026-12-03c, a fresh process per first
    call, no warm-up compile) the first call did not change beyond the host's noise. Any failure (a private
    API that moved, a process that may not start workers) is ignored: Inductor starts the pool later itself.

    Not for a graph on the CPU (its kernels never use the pool; with Triton installed, a CUDA build on a CPU
    graph, it started a sidecar process of ~300 MB and its workers that plain ``torch.compile`` never starts),
    and not outside the patches: ``inductor_config={"compile_threads": 1}`` would start the pool with the global
    setting. ``torch.compile(model)`` itself (``_TorchCompileInductorWrapper``, torch 2.13) does
    not call ``maybe_warm_pool``: only the registered ``inductor`` function does (``torch._dynamo.optimize``,
    ``lookup_backend``); its ``compile_fx`` wakes the pool at its start, for CUDA/XPU inputs."""
    import torch

    try:
        if not any(isinstance(a, torch.Tensor) and a.device.type in TRITON_DEVICES for a in example_inputs):
            return
        from torch._inductor import config
        from torch._inductor.async_compile import maybe_warm_pool

        with config.patch(patches or {}):
            maybe_warm_pool()
    except Exception:  # noqa: BLE001 - an optimization only; Inductor starts the pool itself later
        pass


def _pack(gm, example_inputs, report, gradients=True):
    """:func:`optimus_bridge.param_pack.pack_parameters` on ``gm``: ``(packs or None, graph, inputs)``.
    A failure leaves the graph as it is (one warning); what was packed, or which stacks with gradients
    ``gradients`` (a bool, or a function of the stacks' parameters) refused, goes to ``report.notes``."""
    declined = []

    def decide(stacks):  # ``gradients``' answer, a refusal recorded for the report
        pays = gradients(stacks)
        if not pays:
            declined.append(len(stacks))
        return pays
    try:
        done = _param_pack.pack_parameters(gm, example_inputs, gradients=decide if callable(gradients) else gradients)
    except Exception as exc:
        warnings.warn(f"optimus_eq: parameter packing failed ({type(exc).__name__}: {exc}); not packing",
                      stacklevel=3)
        return None, gm, example_inputs
    if declined and report is not None:
        report.notes.append(f"parameter packing: {declined[0]} stacks with gradients left to the graph (CUDA "
                            f"graphs: their copies cost less than packing's host time, grad_packing_pays)")
    if done is None:
        return None, gm, example_inputs
    packed_gm, inputs, packs = done
    if report is not None:
        report.notes.append(f"parameter packing: {packs.parameters} parameters in {len(packs.packs)} buffers "
                            f"({', '.join(p.name for p in packs.packs)}); the graph takes {len(inputs)} inputs "
                            f"instead of {len(example_inputs)}")
    return packs, packed_gm, inputs


def _own_optimus_passes(strategy: str, pre_grad: bool, post_grad: bool, patches: dict, options: dict) -> list[str]:
    """Make optimus-eq the one owner of the Optimus passes at the levels it optimizes (not for ``"none"``,
    the baseline that keeps Inductor's own passes).

    A non-empty ``pre_grad_fusion_options`` / ``post_grad_fusion_options`` (in ``patches``, else Inductor's
    global config, read now) becomes our pattern selection in ``options`` where the user chose none
    (``patterns`` or the same dictionary); ``patches`` switches the built-in passes off for the compiles
    handed to Inductor (keeping the Inductor settings of :data:`optimus_eq.options.PASSED_TO_INDUCTOR`,
    from either dictionary), which otherwise ran them again on our output (and crashed where they crash: a
    symbolic split under ``dynamic=True``). Edits ``patches`` and ``options``; returns the notes for the
    reports.
    """
    import torch._inductor.config as inductor_config

    notes = []
    if strategy == "none":
        return notes
    for level, on in (("pre_grad", pre_grad), ("post_grad", post_grad)):
        if not on:
            continue
        key = f"{level}_fusion_options"
        builtin = patches.get(key, getattr(inductor_config, key, None)) or {}
        if builtin and key not in options and not (level == "pre_grad" and "patterns" in options):
            options[key] = dict(builtin)
            notes.append(f"Inductor's {key} read as optimus_eq's pattern selection")
        # Inductor settings that travel in the dictionary (pad_mm.py's pad_aten_mm_pass, ...) stay for Inductor
        patches[key] = {k: v for k, v in {**builtin, **(options.get(key) or {})}.items() if k in PASSED_TO_INDUCTOR}
        if builtin:
            notes.append(f"built-in {level.replace('_', '-')} Optimus passes switched off for this compile")
    return notes


def uses_cudagraphs(patches: dict) -> bool:
    """Whether Inductor will run the compiled graph as CUDA graphs: ``triton.cudagraphs`` in the config
    patches (``mode="reduce-overhead"`` expands to it, see ``torch._inductor.list_mode_options``), else
    Inductor's global config."""
    if "triton.cudagraphs" in patches:
        return bool(patches["triton.cudagraphs"])
    import torch._inductor.config as inductor_config

    return bool(inductor_config.triton.cudagraphs)


def cost_model_for(patches: dict, example_inputs=None, packed_parameters: bool = False):
    """The cost model for a compile with these Inductor config patches: the CUDA-graph model
    (:meth:`optimus_eq.cost.GPUCostModel.cudagraph`: 2.3 us per kernel) when the graph will be replayed as
    a CUDA graph, else the default (23.3 us per kernel launched). Inductor records CUDA graphs only for
    graphs on CUDA: with ``example_inputs`` given and none of its tensors on a CUDA device, the default.
    ``packed_parameters``: the backend packs stacked parameters (``GPUCostModel.packed_parameters``)."""
    on_cuda = example_inputs is None or _on_cuda(example_inputs)
    if uses_cudagraphs(patches) and on_cuda:
        return GPUCostModel.cudagraph(packed_parameters=packed_parameters)
    return GPUCostModel(packed_parameters=packed_parameters)


#: host time (us) that packing the stacks with gradients adds to each call of a graph replayed as a CUDA graph:
#: the stacks' autograd node and the saved-tensor version hooks (:mod:`optimus_bridge.param_pack_runtime`), paid
#: before the replay's first kernel in a synchronized step. On the H200 (training steps side by side,
#: 5 rounds of 30 calls, bench/results/h200_2026-12-02g): BERT (27 parameters in 9 stacks) 0.23 ms slower packed
#: than unpacked, 32 branches x 2 layers (256 parameters in 8 stacks) 0.24 ms (greedy) and 0.37 ms (eqsat).
PACK_HOST_US_CUDAGRAPH = 250.0


def grad_packing_pays(stacks, model: GPUCostModel) -> bool:
    """Whether packing the stacks that gradients flow through beats leaving them to the compiled graph, where
    each is a copy kernel per call: their copies' cost by ``model`` (a launch plus reading and writing every
    parameter's bytes, :meth:`GPUCostModel` ``launch_us`` / ``bytes_per_us``) against the host time packing adds
    per call, :data:`PACK_HOST_US_CUDAGRAPH`. Asked only for graphs replayed as CUDA graphs: without them every
    copy is a kernel launch as well, and packing wins. ``stacks``: each stack's parameters.

    DLRM's 26 tables of 100k x 64 (a 666 MB copy, 333 us a step) pack; BERT's Q/K/V weights (7 MB a layer) and
    32 branches' small weights do not."""
    # the copy is a kernel Inductor generates: with a first-call compile term (``GPUCostModel.compile_us``) it
    # also costs that (``kernel_us``), as the extraction prices it
    copy_us = sum(model.kernel_us + 2 * sum(p.numel() * p.element_size() for p in params) / model.bytes_per_us
                  for params in stacks)
    return copy_us > PACK_HOST_US_CUDAGRAPH


def _user_saved_tensor_hooks_off():
    """A context in which autograd ignores the saved-tensor hooks active at the compiling call (the user's
    ``torch.utils.checkpoint(..., use_reentrant=False)``, ``save_on_cpu``), as Dynamo's and AOTAutograd's own
    tracing does (``torch._dynamo.utils._disable_saved_tensors_hooks_during_tracing``).

    :func:`optimus_eq.optimize` propagates meta by running ops on meta twins of the inputs, which record
    autograd's saved tensors where an input requires grad: under a non-reentrant checkpoint those would go to its
    pack hook, and the first call of a compiled model inside ``checkpoint`` would fail in backward ("A different
    number of tensors was saved during the original forward and recomputation", 36 against 18).
    A torch without the switch: no change."""
    import contextlib

    from torch._dynamo import utils as dynamo_utils

    off = getattr(dynamo_utils, "_disable_saved_tensors_hooks_during_tracing", None)
    return off() if off is not None else contextlib.nullcontext()


def _on_cuda(example_inputs) -> bool:
    """Whether any tensor among ``example_inputs`` is on a CUDA device."""
    import torch

    return any(isinstance(a, torch.Tensor) and a.device.type == "cuda" for a in example_inputs)


def _carry_dynamo_metadata(src, dst) -> None:
    """Copy what Dynamo attaches to its graph onto the optimized one (same placeholders, same order).

    AOTAutograd recognizes a Dynamo graph by ``meta["dynamo_compile_id"]``, ``_param_name_to_source`` and
    each placeholder's ``_dynamo_source`` (torch/_functorch/_aot_autograd/frontend_utils.py,
    ``_try_get_metadata_from_dynamo``); from them it marks parameters as static inputs. Without them,
    CUDA graph trees copy every parameter into the graph's static buffers on every replay (on
    the H200: 74 extra copy kernels per BERT inference step with mode="reduce-overhead").
    """
    for key, value in src.meta.items():
        dst.meta.setdefault(key, value)
    for attr in ("_param_name_to_source", "_source_to_user_stacks"):
        if hasattr(src, attr) and not hasattr(dst, attr):
            setattr(dst, attr, getattr(src, attr))
    src_ph = [n for n in src.graph.nodes if n.op == "placeholder"]
    dst_ph = [n for n in dst.graph.nodes if n.op == "placeholder"]
    if len(src_ph) != len(dst_ph):
        return
    for s, d in zip(src_ph, dst_ph):
        if hasattr(s, "_dynamo_source") and not hasattr(d, "_dynamo_source"):
            d._dynamo_source = s._dynamo_source
        for key in ("tensor_dict", "grapharg"):
            if key in s.meta:
                d.meta.setdefault(key, s.meta[key])


def _inductor_patches(mode: str | None, config: dict | None) -> dict:
    """Inductor config patches for ``mode`` (as torch.compile expands it) overlaid with ``config``.

    Raises:
        RuntimeError: an unknown mode (Inductor's message lists the valid ones).
    """
    patches: dict = {}
    if mode and mode != "default":
        from torch._inductor import list_mode_options

        patches.update(list_mode_options(mode))
    patches.update({k.replace("-", "_"): v for k, v in (config or {}).items()})
    return patches


def _check_backend_arguments(post_grad_hook, inductor_config, post_grad_options, mode, options: dict) -> dict:
    """Check :func:`backend`'s own arguments and the names of ``options`` when the backend is built;
    returns ``options`` with ``patterns`` as a list (a single name is accepted).

    Raises:
        TypeError: an ``options`` name that is not an option of ``optimize`` (the message lists them), or an
            argument of the wrong type.
        ValueError: an unknown ``post_grad_hook``.
    """
    validate.check_names(options, validate.OPTIMIZE_OPTIONS, "backend()")
    if post_grad_hook not in ("pre", "post"):
        raise ValueError(f"unknown post_grad_hook {post_grad_hook!r}; valid: ('pre', 'post')")
    for name, value in (("inductor_config", inductor_config), ("post_grad_options", post_grad_options)):
        if value is not None and not isinstance(value, Mapping):
            raise TypeError(f"{name} must be a dict, got {type(value).__name__}")
    if mode is not None and not isinstance(mode, str):
        raise TypeError(f"mode must be an Inductor mode name (str), got {type(mode).__name__}")
    if options.get("pattern_options") is not None and not isinstance(options["pattern_options"], Mapping):
        raise TypeError(f"pattern_options must be a dict, got {type(options['pattern_options']).__name__}")
    options = dict(options)
    if "patterns" in options:
        options["patterns"] = validate.pattern_names(options["patterns"])
    return options


def _pattern_options_by_level(options: dict) -> dict[str, dict]:
    """``options["pattern_options"]`` split by the level each named pattern is registered at (a pattern of
    both levels goes to both): one dictionary may hold the options of pre-grad patterns
    and of post-grad ones (the batched linear of each level), and each level's ``optimize`` rejects names it
    does not run.

    Raises:
        ValueError: for a name registered at no level (the message lists the registered names).
    """
    registry = options.get("registry", DEFAULT_REGISTRY)
    levels = {p.name: p.levels for p in registry}
    given = dict(options.get("pattern_options") or {})
    unknown = [n for n in given if n not in levels]
    if unknown:
        raise ValueError(f"pattern_options for unknown pattern(s) {unknown}; registered: {sorted(levels)}")
    return {level: {n: o for n, o in given.items() if level in levels[n]} for level in ("pre_grad", "post_grad")}


def optimus_eq_backend(gm, example_inputs, **kwargs):
    """The backend registered as ``"optimus_eq"``: eqsat, then Inductor (``mode``/``options`` from
    torch.compile are passed on)."""
    return backend()(gm, example_inputs, **kwargs)
