"""Strategies as data: how each benchmarked configuration compiles a module.

A :class:`Strategy` is a name plus the recipe of one ``torch.compile`` call (or none, for eager):

========================  =====================================================================
name                      what it runs
========================  =====================================================================
eager                     the module itself, no compile
inductor                  ``torch.compile(m)`` (Inductor, default mode)
inductor-cudagraphs       ``torch.compile(m, mode="reduce-overhead")`` (Inductor + CUDA graphs)
inductor-optimus          ``torch.compile(m, options=...)`` with every Optimus option of the installed
                          torch on: all ``pre_grad_fusion_options`` and ``post_grad_fusion_options``
                          registered by torch/_inductor/fx_passes/group_batch_fusion.py and split_cat.py
<s>                       ``torch.compile(m, backend=optimus_eq.backend(strategy=s))`` for every s in
                          ``optimus_eq.STRATEGIES`` (none, greedy, eqsat, taso, tensat)
<s>-cudagraphs            the same with ``mode="reduce-overhead"`` passed through to Inductor
greedy-post, eqsat-post   ``optimus_eq.backend(strategy=s, post_grad=True)``: also the Aten-IR forward and
                          backward graphs, as Inductor's post-grad pass (both levels, as inductor-optimus)
greedy-nopack, ...        ``optimus_eq.backend(strategy=s, pack_parameters=False)`` (also eqsat-nopack and
                          the -cudagraphs of both): the ablation of parameter packing
                          (optimus_bridge/param_pack.py)
<s>-without-<p>[+<q>...]  the ablation of patterns: strategy ``<s>`` (any optimus_eq name above) with
                          pattern ``p`` (and ``q``, ...) left out of the Torch-IR pattern set, e.g.
                          ``eqsat-without-batch_gemm_lhs`` (made on demand by :func:`resolve`)
<s>-amortized<N>          strategy ``<s>`` priced with the first-call compile term spread over N calls
                          (``GPUCostModel.amortized(N)``, the CUDA-graph model for ``-cudagraphs``), e.g.
                          ``eqsat-amortized1000`` (made on demand by :func:`resolve`; N in ASCII digits,
                          no leading zeros). The two compose in either order:
                          ``eqsat-without-batch_gemm_lhs-amortized100``, ``eqsat-amortized100-without-...``
========================  =====================================================================

The ``optimus_eq`` names are read from ``optimus_eq.STRATEGIES`` when :func:`available` is called, so a
strategy added there is benchmarked without touching this file.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

import optimus_eq
from optimus_eq.cost import GPUCostModel
from optimus_eq.options import optimus_fusion_options  # the inductor-optimus strategy's options (also the demo's)

#: Names the issue plans (TASO- and TENSAT-style searches) that may not be registered yet.
PLANNED = ("taso", "tensat")

#: The torch.compile mode that turns on CUDA graphs.
CUDAGRAPHS_MODE = "reduce-overhead"


@dataclass(frozen=True)
class Strategy:
    """One benchmarked configuration.

    Attributes:
        name: the name used on the command line and in the results.
        kind: ``"eager"``, ``"inductor"`` (torch.compile's own backend) or ``"optimus_eq"``.
        description: one line for the table's legend.
        mode: torch.compile ``mode`` (``None`` or ``"reduce-overhead"``).
        optimus_strategy: the ``optimus_eq`` search strategy (kind ``"optimus_eq"`` only).
        inductor_options: Inductor config options (``torch.compile(options=...)``).
        backend_options: keyword arguments of ``optimus_eq.backend`` (``{"post_grad": True}`` for ``*-post``).
    """

    name: str
    kind: str
    description: str
    mode: str | None = None
    optimus_strategy: str | None = None
    inductor_options: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    backend_options: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def cudagraphs(self) -> bool:
        """Whether this strategy replays CUDA graphs (needs ``cudagraph_mark_step_begin`` per step)."""
        return self.mode == CUDAGRAPHS_MODE

    @property
    def compiles(self) -> bool:
        return self.kind != "eager"

    def compile(self, module: torch.nn.Module, optimus_options: dict | None = None) -> Callable:
        """The callable to benchmark: ``module`` itself (eager) or ``torch.compile(module, ...)``.

        ``optimus_options`` go to :func:`optimus_eq.backend` (and so to ``optimize``) for our strategies,
        e.g. ``{"cost_model": GPUCostModel.from_calibration(path)}``; other strategies ignore them. A
        ``cost_model_cudagraph`` entry replaces ``cost_model`` for the CUDA-graph strategies (the runner
        gives both execution modes of one calibration). A calibrated ``cost_model`` given so replaces this
        strategy's own but keeps its first-call compile term (``-amortized<N>``: the calibrated constants,
        amortized over N calls; before, ``--cost-model cal.json`` silently priced such a strategy per call).
        """
        optimus_options = dict(optimus_options or {})
        cudagraph_model = optimus_options.pop("cost_model_cudagraph", None)
        if self.cudagraphs and cudagraph_model is not None:
            optimus_options["cost_model"] = cudagraph_model
        own, given = self.backend_options.get("cost_model"), optimus_options.get("cost_model")
        if getattr(own, "compile_us", 0) and given is not None and hasattr(given, "compile_us"):
            optimus_options["cost_model"] = dataclasses.replace(given, compile_us=own.compile_us)
        if self.kind == "eager":
            return module
        options = dict(self.inductor_options) or None
        if self.kind == "inductor":
            return torch.compile(module, mode=self.mode, options=options)
        return torch.compile(module, backend=optimus_eq.backend(strategy=self.optimus_strategy,
                                                                 **{**self.backend_options, **(optimus_options or {})}),
                             mode=self.mode,
                             options=options)


def available() -> dict[str, Strategy]:
    """Every strategy that can run with the installed code, by name, in the table's column order."""
    OURS = optimus_eq.STRATEGIES  # read at each call: a strategy added later is picked up
    pre, post = optimus_fusion_options()
    out = [
        Strategy("eager", "eager", "eager PyTorch, no compile"),
        Strategy("inductor", "inductor", "torch.compile (Inductor, default mode)"),
        Strategy("inductor-cudagraphs", "inductor", 'torch.compile(mode="reduce-overhead"): Inductor + CUDA graphs',
                 mode=CUDAGRAPHS_MODE),
        Strategy("inductor-combo", "inductor", "Inductor with combo_kernels=True (its own horizontal fusion of "
                 "independent kernels into one launch)", inductor_options={"combo_kernels": True}),
        Strategy("inductor-optimus", "inductor",
                 f"Inductor with every built-in Optimus pass on ({len(pre)} pre-grad, {len(post)} post-grad options)",
                 inductor_options={"pre_grad_fusion_options": pre, "post_grad_fusion_options": post}),
    ]
    for s in OURS:
        what = "Inductor through optimus_eq.backend, graph unchanged" if s == "none" else f"optimus_eq {s}, then Inductor"
        out.append(Strategy(s, "optimus_eq", what, optimus_strategy=s))
    for s in OURS:
        if s != "none":
            out.append(Strategy(f"{s}-cudagraphs", "optimus_eq", f'optimus_eq {s}, then Inductor + CUDA graphs '
                                '(mode="reduce-overhead" passed through)', mode=CUDAGRAPHS_MODE, optimus_strategy=s))
    for s in ("greedy", "eqsat"):
        if s in OURS:  # both levels, like inductor-optimus's pre- and post-grad options
            out.append(Strategy(f"{s}-post", "optimus_eq", f"optimus_eq {s} on the Torch-IR graph and, as Inductor's "
                                "post-grad pass, on the Aten-IR forward and backward graphs; then Inductor",
                                optimus_strategy=s, backend_options={"post_grad": True}))
    for s in ("greedy", "eqsat"):
        if s in OURS:  # the ablation of parameter packing (optimus_bridge.param_pack)
            for mode, tail in ((None, ""), (CUDAGRAPHS_MODE, "-cudagraphs")):
                out.append(Strategy(f"{s}-nopack{tail}", "optimus_eq", f"optimus_eq {s} without parameter packing, "
                                    f"then Inductor{' + CUDA graphs' if mode else ''}", mode=mode,
                                    optimus_strategy=s, backend_options={"pack_parameters": False}))
    return {s.name: s for s in out}


def resolve(names: list[str] | tuple[str, ...]) -> list[Strategy]:
    """The strategies named, in the order given (``"all"`` expands to every available one).

    Raises:
        ValueError: for an unknown name; the message lists the valid names, and says when the name is a
            planned strategy (``taso``, ``tensat``) that ``optimus_eq`` does not register yet.
    """
    table = available()
    out: list[Strategy] = []
    for name in names:
        if name == "all":
            out.extend(s for s in table.values() if s not in out)
            continue
        _derive(name, table)
        if name not in table:
            base = name.removesuffix("-cudagraphs")
            hint = (f" ({base!r} is planned but not registered in optimus_eq.STRATEGIES yet)"
                    if base in PLANNED else "")
            raise ValueError(f"unknown strategy {name!r}{hint}; valid: {', '.join(table)}")
        if table[name] not in out:
            out.append(table[name])
    return out


#: ``<s>-amortized<N>``: N in ASCII digits (``\\d`` would take other scripts' digits, which ``int`` reads too)
_AMORTIZED = re.compile(r"(.+)-amortized([0-9]+)", re.ASCII)


def _derive(name: str, table: dict[str, Strategy]) -> None:
    """Add ``name`` to ``table`` when it is a derived name (``-amortized<N>`` last, else ``-without-``), its
    base resolved the same way first: the two grammars compose in either order
    (``eqsat-without-p-amortized10``, ``eqsat-amortized10-without-p``), whatever names came before it."""
    if name in table:
        return
    m = _AMORTIZED.fullmatch(name)
    if m:
        _derive(m.group(1), table)
        table[name] = _amortized(name, table)
    elif "-without-" in name:
        _derive(name.partition("-without-")[0], table)
        table[name] = _without(name, table)


def _without(name: str, table: dict[str, Strategy]) -> Strategy:
    """``<s>-without-<p>[+<q>...]``: our strategy ``<s>`` with the Torch-IR patterns named after ``-without-``
    left out (``patterns`` = the pre-grad patterns of ``optimus_eq.DEFAULT_REGISTRY`` but those).

    Raises:
        ValueError: when ``<s>`` is not one of our strategies or a pattern name is not a pre-grad pattern.
    """
    base_name, _, rest = name.partition("-without-")
    base = table.get(base_name)
    if base is None or base.kind != "optimus_eq":
        ours = [n for n, s in table.items() if s.kind == "optimus_eq"]
        raise ValueError(f"strategy {name!r}: {base_name!r} is not one of optimus_eq's strategies ({', '.join(ours)})")
    pre_grad = [p.name for p in optimus_eq.DEFAULT_REGISTRY.select(None, "pre_grad")]
    dropped = rest.split("+")
    unknown = [p for p in dropped if p not in pre_grad]
    if unknown:
        raise ValueError(f"strategy {name!r}: not pre-grad pattern(s) {unknown}; valid: {', '.join(pre_grad)}")
    return Strategy(name, "optimus_eq", f"{base.description}, without {', '.join(dropped)}", mode=base.mode,
                    optimus_strategy=base.optimus_strategy, inductor_options=dict(base.inductor_options),
                    backend_options={**base.backend_options, "patterns": [p for p in pre_grad if p not in dropped]})


def _amortized(name: str, table: dict[str, Strategy]) -> Strategy:
    """``<s>-amortized<N>``: our strategy ``<s>`` with ``cost_model`` = ``GPUCostModel.amortized(N)`` (the
    CUDA-graph model when ``<s>`` replays CUDA graphs; the backend marks it packed where it packs).

    Raises:
        ValueError: when ``<s>`` is not one of our strategies or N is 0.
    """
    base_name, _, calls = name.rpartition("-amortized")
    base = table.get(base_name)
    if base is None or base.kind != "optimus_eq" or int(calls) <= 0:
        ours = [n for n, s in table.items() if s.kind == "optimus_eq"]
        raise ValueError(f"strategy {name!r}: needs one of optimus_eq's strategies ({', '.join(ours)}) and N > 0")
    if calls != str(int(calls)):  # one name per model: results are keyed by name
        raise ValueError(f"strategy {name!r}: write N without leading zeros ({base_name}-amortized{int(calls)})")
    try:
        model = (GPUCostModel.cudagraph() if base.cudagraphs else GPUCostModel()).amortized(int(calls))
    except (OverflowError, ValueError) as exc:
        raise ValueError(f"strategy {name!r}: N = {calls} gives no usable compile term ({exc})") from None
    return Strategy(name, "optimus_eq", f"{base.description}, first-call compile amortized over {calls} calls",
                    mode=base.mode, optimus_strategy=base.optimus_strategy, inductor_options=dict(base.inductor_options),
                    backend_options={**base.backend_options, "cost_model": model})
