"""A GPU cost model of e-nodes: kernel launches plus bytes moved (the starting design's principle 5).

cost(e-node) = kernels * launch_us + bytes / bytes_per_us   (microseconds)

* views (Narrow, Select, Reshape, Permute, Unsqueeze) launch nothing and move nothing; they cost a tiny
  ``view_us`` so that among equal plans the one with fewer nodes wins;
* list cells (Cons, Nil, ACons, ANil) and bookkeeping cost nothing;
* ``Cat`` is one kernel that reads and writes its output once;
* ``Unary``/``Binary`` are one kernel each, reading their inputs and writing the output;
* ``Apply`` of a pure op is one kernel writing its output, reading its inputs;
* **fusion credit** (``fusion=True``, :mod:`optimus_eq.extract.fusion`): Inductor computes a chain of pointwise
  ops, and a reduction or layer norm after it, in one kernel (the scheduler fuses a pointwise node into its
  reader of the same loop size, and a pointwise producer into a reduction over its elements; CUDA's
  ``SIMDScheduling.can_fuse``, CPU's ``CppScheduling``). A pointwise or reduction e-node (:func:`fusion_kind`)
  whose input is computed by such a kernel in every plan (its e-class holds only pointwise/reduction e-nodes,
  of the same element count for a pointwise reader) launches nothing: it pays its output's bytes and the
  bytes of its other inputs (:meth:`GPUCostModel.fused_cost`). Each chain still pays one launch, at its first
  op. So ``(x * w).sum(-1) + b`` after the kernel that computed ``x`` costs no launch where an ``addmm``
  costs one (the decomposed one-output linear, the launch-bound model's head). Not credited: cats (a pointwise cat of
  at most 8 inputs fuses on CUDA too), ops reading views of a kernel's output, and the choice between
  inlining a producer into several readers and realizing it;
* **extern GEMMs** (``mm``, ``addmm``, ``bmm``, ``baddbmm``, the batched linear's ``bmm_add``, ``linear``,
  ``matmul``: :data:`GEMM_OPS`) are priced by FLOPs at a shape-dependent rate where their shapes are known
  (``gemm_flops=True``): ``launch_us + max(FLOPs / rate, bytes / bytes_per_us)`` with
  ``rate = gemm_flops_per_us * f(rows) * f(cols) * g(inner) * (bmm_efficiency * o(tiles) if batched)``,
  ``f(n) = n / (n + gemm_half_mn)``, ``g(k) = k / (k + gemm_half_k)``, ``o(t) = t / (t + bmm_half_tiles)`` over
  ``tiles = batch * ceil(rows / bmm_tile) * ceil(cols / bmm_tile)`` (:meth:`GPUCostModel.gemm_us`; cuBLAS
  splits the inner dimension of an ``mm`` with few output tiles but never of a ``bmm``, so a batched product
  with few tiles leaves SMs idle: a weight gradient of 4 x ``[64, 4096] @ [4096, 64]``); a
  matrix-vector product (one row or column) is priced by its bytes (cuBLAS runs it as a bandwidth-bound
  GEMV). Its backward is one such GEMM per matrix operand that requires grad (``dA = dY @ B^T``,
  ``dB = A^T @ dY``) and a reduction for a bias (:meth:`GPUCostModel.gemm_backward_cost`);
* opaque terms are forced into every plan, so their cost does not matter (0).

Bytes are ``numel * 4`` (the e-graph does not carry dtypes; fp32 assumed).

The default constants are measured, not tuned: ``optimus-eq calibrate`` on an NVIDIA H200 (torch 2.11,
Triton 3.6; bench/results/h200_matrix_2026-11-29/calibration.json, bench/optimus_bench/calibrate.py):

* ``launch_us = 23.3``: the marginal cost of one more Triton kernel in an Inductor-compiled graph run
  without CUDA graphs (a kernel's launch plus its output buffer). The same H200 bench matrix gives 24 us per
  kernel removed in training steps and 8-9 us in inference (the slope of ms over kernels across strategies
  on DHEN and launch_bound); inside a CUDA graph one kernel costs 2.3 us.
* ``bytes_per_us = 4.0e6`` (4.0 TB/s): the median of per-op bandwidth fits (cat, add, relu, layer_norm).
* GEMM rate (fp32, tf32 off): ``gemm_flops_per_us = 48e6`` (48 TFLOP/s), ``gemm_half_mn = 48``,
  ``gemm_half_k = 16``, ``bmm_efficiency = 1.1``, ``bmm_tile = 64``, ``bmm_half_tiles = 33``
  (:data:`GEMM_DEFAULTS`): a least-squares fit of log time (grid search,
  ``bench/gemm_rate.py --refit``) to two H200 data sets together: the bench models' own linears (DLRM,
  DHEN, launch_bound; separate, wide and bmm, forward and backward) and a sweep inside CUDA graphs
  (bench/results/h200_2026-12-02e/lb/gemm/gemm_rate.json), and eager timings of wide, bmm and separate
  GEMMs at K 256..32,960 (bench/results/h200_2026-12-02c/gemm_accuracy.json, rows of at least 100 us, 20 us
  of eager overhead per call): rms error of log time 0.29 and 0.18 (the constants before, fitted to the
  eager set alone: 0.56 and 0.14); it ranks separate against batched as the H200 did for all 30 (group,
  direction) cells of the models' linears, the constants before for 22 (bench/results/gemm_fit_2026-12-02).
  :meth:`GPUCostModel.with_gemm_rate` loads another fit.

Measure another device with ``optimus-eq calibrate --out cal.json`` and pass
``cost_model=GPUCostModel.from_calibration("cal.json")``.

Execution modes. ``launch_us`` is what one kernel costs in the way the compiled graph runs:

* ``GPUCostModel()`` (``execution="launch"``): Inductor without CUDA graphs, 23.3 us per kernel;
* ``GPUCostModel.cudagraph()`` (``execution="cudagraph"``): the graph replayed as a CUDA graph
  (``mode="reduce-overhead"``, Inductor option ``triton.cudagraphs``): one kernel inside a replay costs
  2.283 us (calibration.json ``launch_us_cudagraph``: the slope of GPU time over kernel count between 16
  and 128 row sums captured in one CUDA graph), so bytes weigh ten times more against launches.
  ``optimus_eq.backend`` picks it when the user compiles with CUDA graphs and passed no ``cost_model``.

First-call compile (opt-in). Each kernel Inductor generates (not an extern GEMM, which cuBLAS has
compiled already) also costs first-call time: its code generation, a worker's compile and the main process's
load. ``compile_us`` adds that time, amortized over the calls the user expects the compiled graph to run, to
every generated kernel the model counts (:meth:`GPUCostModel.kernel_us`); ``GPUCostModel.amortized(calls)``
sets it from :data:`COMPILE_S_PER_KERNEL`. The default, 0, prices a plan per call only (what Inductor's own
choices optimize), which is right for any run of more than a few thousand steps; a short run, a test job or a
model recompiled often can trade run time for a shorter first call. Repeated identical kernels (a model's
identical layers) compile once in Inductor but are each charged here: the term over-counts for them.

Embedding lookups (``F.embedding_bag`` / ``F.embedding``, batched by the embedding
family, horizontal/embedding.py) are ``Apply`` ops like any other: one kernel writing the output. The rows they read
are the same in the n lookups and in the one fused lookup, so they cancel out of every comparison and are
not priced; what the fused form adds is priced by its own e-nodes: the ``Cat`` of the tables, a copy of
every table on every call (launch + read + write: in training, every step), and one op that shifts and
concatenates the ids (one kernel, as Inductor emits it). So a group of many small tables pays (n lookups
and n backwards against about three kernels and one backward), and one huge table with small ones may
not (the copy of the huge one outweighs the launches saved). docs/DESIGN.md, "Embedding lookups".

Training. When the optimized graph will be differentiated (a pre-grad graph whose values require grad),
each e-node whose value requires grad also pays its backward (:meth:`GPUCostModel.backward_cost`), and a
parameter whose gradient reaches autograd's AccumulateGrad in another layout than its own pays a copy
launched outside the compiled graph (:meth:`GPUCostModel.grad_copy_cost`, priced by
:mod:`optimus_eq.extract.grad`). ``training=False`` prices the forward only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from optimus_eq import symbolic

VIEWS = frozenset(["Narrow", "Select", "Reshape", "Permute", "Unsqueeze"])
#: op names (:class:`optimus_eq.recipe.Recipe` ``name``, the vocabularies' names) that Inductor lowers to
#: pointwise loops it fuses with their producers and readers (torch/_inductor/lowering.py: ``make_pointwise``)
POINTWISE_OPS = frozenset(["relu", "tanh", "sigmoid", "clamp", "nan_to_num", "add", "sub", "mul", "div",
                           "addcmul", "to", "convert_element_type"])
#: op names Inductor lowers to a reduction a pointwise producer fuses into (``sum``; ``layer_norm``'s
#: decomposition: ``var_mean`` and the pointwise normalization, one kernel with its producer on both devices)
REDUCTION_OPS = frozenset(["sum", "layer_norm"])
#: views whose backward writes the piece's gradient into the base's gradient (slice_backward/select_backward)
SLICING_VIEWS = frozenset(["Narrow", "Select"])
#: first-call seconds one more generated kernel costs on the H200 (torch 2.11, Triton 3.6): Inductor's
#: ``compile_fx_inner`` time over the kernels it generated for Wukong training, 58 / 60 / 63 kernels (built-in
#: passes / greedy / eqsat), 0.17-0.39 s per kernel in each of three runs of 3-5 cold processes per cell
#: (bench/results/h200_2026-12-03/wukong_train_phases.md, h200_2026-12-03b/cause_compile_time.md,
#: gc_compile_time.md); the lower end, as the middle of the range still holds noise
COMPILE_S_PER_KERNEL = 0.2
#: execution modes: what ``launch_us`` is the cost of
EXECUTIONS = ("launch", "cudagraph")
#: per-kernel cost inside a CUDA-graph replay on the H200 (calibration.json ``launch_us_cudagraph``)
CUDAGRAPH_LAUNCH_US = 2.283
FREE = frozenset(["Cons", "Nil", "ACons", "ANil", "Leaf"])
#: extern GEMMs priced by FLOPs: recipe name -> (position of the left matrix among the op's tensor
#: arguments, batched). The right matrix follows the left; any other tensor argument is a bias. ``linear``'s
#: right matrix is the weight ``[cols, inner]``; every other op's is ``[..., inner, cols]``.
GEMM_OPS = {"mm": (0, False), "matmul": (0, False), "linear": (0, False), "addmm": (1, False),
            "bmm": (0, True), "baddbmm": (1, True), "bmm_add": (1, True)}
#: the keys of a GEMM calibration record (``bench/gemm_rate.py``'s fit) that :meth:`GPUCostModel.from_calibration` reads
GEMM_FIELDS = ("gemm_flops_per_us", "gemm_half_mn", "gemm_half_k", "bmm_efficiency", "bmm_tile", "bmm_half_tiles")
#: the GEMM fields that may be 0 (that factor is 1); a record without ``bmm_tile`` / ``bmm_half_tiles`` (a fit
#: without the batched occupancy term) sets ``bmm_half_tiles`` to 0
GEMM_ZERO_OK = ("gemm_half_mn", "gemm_half_k", "bmm_half_tiles")
#: the GEMM constants' defaults (module doc: bench/results/gemm_fit_2026-12-02)
GEMM_DEFAULTS = {"gemm_flops_per_us": 48e6, "gemm_half_mn": 48.0, "gemm_half_k": 16.0, "bmm_efficiency": 1.1,
                 "bmm_tile": 64.0, "bmm_half_tiles": 33.0}


@dataclass(frozen=True)
class GPUCostModel:
    """Constants of the cost model. Units: microseconds, bytes.

    Attributes:
        launch_us: cost of one kernel of the compiled graph, in its execution mode (see the module doc).
        bytes_per_us: memory bandwidth.
        view_us: tie-break cost of a view (no kernel).
        itemsize: bytes per element (the e-graph has no dtypes: fp32).
        eager_launch_us: cost of one kernel launched outside the compiled graph, by eager ATen (13.9 us on
            the H200: calibration.json ``launch_us_eager``, the slope of eager time over op count).
            AccumulateGrad's layout copies of parameter gradients run there, CUDA graphs or not.
        execution: ``"launch"`` (no CUDA graphs) or ``"cudagraph"``: what ``launch_us`` measures.
        training: price the backward of graphs that will be differentiated (False: forward only).
        fusion: credit Inductor's fusion of pointwise chains and of a reduction after them (module doc;
            False: every op is a kernel of its own).
        packed_parameters: a ``Cat`` of parameters along dim 0 (a stack or a cat of the graph's
            ``nn.Parameter`` inputs) is free, a view: ``optimus_eq.backend`` re-homes such parameters as views
            of one buffer before Inductor runs (``pack_parameters=True``, :mod:`optimus_bridge.param_pack`),
            so the copy that a stacked weight or a fused embedding table would cost on every call does not
            run. The backend sets it when it packs; a plain :func:`optimus_eq.optimize` call does not pack,
            so the default is False. Which leaves are parameters: ``EGraphView.packable``.
        gemm_flops: price extern GEMMs by FLOPs at a shape-dependent rate (module doc; False: by launch and
            output bytes).
        gemm_flops_per_us: the GEMM rate of a large square fp32 GEMM (FLOP per microsecond).
        gemm_half_mn: the output rows (or columns) of one matrix at which the rate halves (tile padding,
            too few tiles to fill the device).
        gemm_half_k: the inner dimension at which the rate halves (each tile's prologue and epilogue).
        bmm_efficiency: the rate of a batched GEMM relative to one GEMM of a member's shape.
        bmm_tile: the output tile edge (rows and columns) of a batched GEMM, for counting its tiles.
        bmm_half_tiles: the output tiles (all batches) at which a batched GEMM's rate halves (0: no
            occupancy factor).
        compile_us: first-call compile time of one generated kernel (not an extern GEMM), amortized per
            call: seconds per kernel * 1e6 / expected calls (module doc, "First-call compile"; 0: none).
    """

    launch_us: float = 23.3
    bytes_per_us: float = 4.0e6
    view_us: float = 1e-3
    itemsize: int = 4
    eager_launch_us: float = 13.9
    execution: str = "launch"
    training: bool = True
    fusion: bool = True
    packed_parameters: bool = False
    gemm_flops: bool = True
    gemm_flops_per_us: float = GEMM_DEFAULTS["gemm_flops_per_us"]
    gemm_half_mn: float = GEMM_DEFAULTS["gemm_half_mn"]
    gemm_half_k: float = GEMM_DEFAULTS["gemm_half_k"]
    bmm_efficiency: float = GEMM_DEFAULTS["bmm_efficiency"]
    bmm_tile: float = GEMM_DEFAULTS["bmm_tile"]
    bmm_half_tiles: float = GEMM_DEFAULTS["bmm_half_tiles"]
    compile_us: float = 0.0

    def __post_init__(self) -> None:
        if self.execution not in EXECUTIONS:
            raise ValueError(f"unknown execution {self.execution!r}; valid: {EXECUTIONS}")
        if isinstance(self.compile_us, (str, bytes)):
            raise TypeError(f"compile_us must be a number (us per generated kernel per call), got {self.compile_us!r}")
        if not (self.compile_us >= 0 and math.isfinite(self.compile_us)):
            # an infinite term makes every plan cost inf: extraction can no longer tell plans apart
            raise ValueError(f"compile_us must be >= 0 and finite (us per generated kernel per call), "
                             f"got {self.compile_us!r}")
        # a Python float: a 0-d torch number here made every e-node's cost a float32 tensor (report included)
        object.__setattr__(self, "compile_us", float(self.compile_us))

    @property
    def kernel_us(self) -> float:
        """Cost in microseconds of one kernel Inductor generates, bytes excluded: its launch plus the
        amortized first-call compile (``compile_us``). Extern GEMMs and eager kernels pay ``launch_us`` /
        ``eager_launch_us`` only."""
        return self.launch_us + self.compile_us

    def amortized(self, calls: float, compile_s_per_kernel: float = COMPILE_S_PER_KERNEL) -> "GPUCostModel":
        """This model with each generated kernel's first-call compile spread over ``calls`` calls of the
        compiled graph (training steps, inference batches): ``compile_us = compile_s_per_kernel * 1e6 /
        calls``. ``GPUCostModel().amortized(1000)`` charges a generated kernel 200 us a call on top of its
        23.3 us launch, so extraction keeps cuBLAS calls and fuses fewer new kernels; ``amortized(1e9)`` is
        the per-call model.

        Args:
            calls: the number of calls expected after the first (> 0).
            compile_s_per_kernel: first-call seconds of one generated kernel (default
                :data:`COMPILE_S_PER_KERNEL`, measured on the H200).

        Raises:
            ValueError: ``calls`` is not > 0 or ``compile_s_per_kernel`` is negative.
        """
        import dataclasses

        if not calls > 0 or not compile_s_per_kernel >= 0:
            raise ValueError(f"amortized: calls must be > 0 and compile_s_per_kernel >= 0, got {calls!r}, "
                             f"{compile_s_per_kernel!r}")
        try:
            # a float whatever ``calls`` is (a numpy or 0-d torch number made the field, then every cost, one)
            compile_us = float(compile_s_per_kernel * 1e6 / calls)
        except OverflowError:  # an int too large for a float: the per-call model
            compile_us = 0.0
        if not math.isfinite(compile_us):  # calls = 1e-310, compile_s_per_kernel = inf
            raise ValueError(f"amortized: calls must be > 0 and compile_s_per_kernel >= 0 with a finite quotient "
                             f"(compile_s_per_kernel * 1e6 / calls), got {calls!r}, {compile_s_per_kernel!r}")
        return dataclasses.replace(self, compile_us=compile_us)

    @classmethod
    def cudagraph(cls, **overrides) -> "GPUCostModel":
        """The model of a graph replayed as a CUDA graph: ``launch_us`` = 2.283 (H200, calibration.json
        ``launch_us_cudagraph``); ``overrides`` replace any other field."""
        return cls(**{"launch_us": CUDAGRAPH_LAUNCH_US, "execution": "cudagraph", **overrides})

    @classmethod
    def from_calibration(cls, source, execution: str = "launch") -> "GPUCostModel":
        """The model with the constants measured by ``optimus-eq calibrate``.

        Args:
            source: the JSON file it wrote (a path) or that record as a dict.
            execution: ``"launch"``: ``launch_us`` is the record's ``launch_us`` (an Inductor kernel
                without CUDA graphs); ``"cudagraph"``: its ``launch_us_cudagraph`` (one kernel inside a
                CUDA-graph replay). ``eager_launch_us`` is the record's ``launch_us_eager`` when present.

        Raises:
            ValueError: the record lacks a positive ``launch_us`` (``launch_us_cudagraph``) or
                ``bytes_per_us``, or ``execution`` is unknown.
        """
        import json
        from pathlib import Path

        if execution not in EXECUTIONS:
            raise ValueError(f"unknown execution {execution!r}; valid: {EXECUTIONS}")
        record = source if isinstance(source, dict) else json.loads(Path(source).read_text())
        launch_key = "launch_us" if execution == "launch" else "launch_us_cudagraph"
        values = {k: record.get(k) for k in (launch_key, "bytes_per_us")}
        bad = [k for k, v in values.items() if not isinstance(v, (int, float)) or v <= 0]
        if bad:
            raise ValueError(f"calibration record needs positive {', '.join(bad)}; got {values}")
        extra = {}
        eager = record.get("launch_us_eager")
        if isinstance(eager, (int, float)) and eager > 0:
            extra["eager_launch_us"] = float(eager)
        gemm = record.get("gemm", record)  # bench/gemm_rate.py's record, or its fit merged into this one
        if isinstance(gemm, dict) and any(k in gemm for k in GEMM_FIELDS):
            extra.update(gemm_values(gemm, strict=False))
        return cls(launch_us=float(values[launch_key]), bytes_per_us=float(values["bytes_per_us"]),
                   execution=execution, **extra)

    def with_gemm_rate(self, source) -> "GPUCostModel":
        """This model with the GEMM constants (:data:`GEMM_FIELDS`) of a ``bench/gemm_rate.py`` record (its
        ``gemm`` fit; a path or the record as a dict); the other constants are kept.

        Raises:
            ValueError: the record lacks a positive value of one of :data:`GEMM_FIELDS` (>= 0 for
                :data:`GEMM_ZERO_OK`; ``bmm_tile`` and ``bmm_half_tiles`` may be missing: see there).
        """
        import dataclasses
        import json
        from pathlib import Path

        record = source if isinstance(source, dict) else json.loads(Path(source).read_text())
        return dataclasses.replace(self, **gemm_values(record.get("gemm", record), strict=True))

    def describe(self, training: bool | None = None) -> str:
        """One line for reports: execution mode, constants (the GEMM rate when GEMMs are priced by FLOPs), and
        ``training`` when the backward is priced
        (``training``: whether it was, for a given graph; default: the model's flag)."""
        training = self.training if training is None else training
        gemm = f", GEMMs {self.gemm_flops_per_us / 1e6:g} TFLOP/s" if self.gemm_flops else ""
        return (f"{self.execution} (launch {self.launch_us:g} us, {self.bytes_per_us / 1e6:g} TB/s, "
                f"eager launch {self.eager_launch_us:g} us{gemm}){', training' if training else ''}"
                f"{', packed parameters' if self.packed_parameters else ''}"
                f"{f', compile {self.compile_us:g} us per generated kernel' if self.compile_us else ''}")

    def node_cost(self, op: str, out_numel: int | None, in_numels: list[int | None], opaque: bool) -> float:
        """Forward cost in microseconds of one e-node whose output has ``out_numel`` elements."""
        if op in FREE or opaque:
            return 0.0
        if op in VIEWS:
            return self.view_us
        out_b = (out_numel or 0) * self.itemsize
        in_b = sum((n or 0) for n in in_numels) * self.itemsize
        if op == "Cat":
            return self.kernel_us + 2 * out_b / self.bytes_per_us
        return self.kernel_us + (out_b + in_b) / self.bytes_per_us

    def fused_cost(self, out_numel: int | None, other_in_numels: list[int | None]) -> float:
        """Forward cost in microseconds of a pointwise or reduction e-node that Inductor computes inside the
        kernel of its fused input (module doc, "fusion credit"): no launch; it writes its output and reads
        ``other_in_numels`` (its inputs other than the fused one)."""
        n = (out_numel or 0) + sum((k or 0) for k in other_in_numels)
        return n * self.itemsize / self.bytes_per_us

    def fused_backward_cost(self, out_numel: int | None, grad_in_numels: list[int | None]) -> float:
        """Cost in microseconds of the backward of a fused e-node (:meth:`fused_cost`): the backward of a
        pointwise chain is a pointwise chain Inductor fuses again, so no launch, except one reduction kernel
        per input that requires grad and is broadcast (fewer elements than the output: a bias, a weight
        row), whose gradient sums over the broadcast dims. Bytes: the output's gradient read and each
        input's gradient written."""
        cost = 0.0
        for n in grad_in_numels:
            if (n or 0) < (out_numel or 0):
                cost += self.kernel_us
            cost += ((out_numel or 0) + (n or 0)) * self.itemsize / self.bytes_per_us
        return cost

    def backward_cost(self, op: str, out_numel: int | None, in_numels: list[int | None], grad_inputs: int,
                      opaque: bool) -> float:
        """Cost in microseconds of the backward of one e-node whose output requires grad.

        ``in_numels`` are the element counts of its tensor inputs (for ``Apply``, the argument list's
        elements), ``grad_inputs`` how many of them require grad. From the derivative formulas
        (torch/csrc/autograd/FunctionsManual.cpp, tools/autograd/derivatives.yaml) as Inductor compiles
        them:

        * compute ops (``Unary``, ``Binary``, ``Apply``): one kernel per input that requires grad, reading
          the output's gradient and the saved inputs and writing that input's gradient (``mm``: ``grad @
          W`` and ``grad.t() @ x``), ``grad_inputs * (launch_us + (out + inputs) bytes / bytes_per_us)``;
        * ``Cat``: its inputs' gradients are narrows of the output's gradient (views): free;
        * ``Narrow``/``Select``: the piece's gradient is written into the base's gradient
          (slice_backward/select_backward), ``2 * out bytes / bytes_per_us``; Inductor sums the pieces of
          one base in one kernel, whose launch is not charged per piece;
        * other views, list cells, leaves and opaque ops (the same in every plan): free.

        Pointwise chains fused by Inductor are not credited, as in :meth:`node_cost`.
        """
        if op in FREE or opaque or op == "Cat" or grad_inputs <= 0:
            return 0.0
        out_b = (out_numel or 0) * self.itemsize
        if op in SLICING_VIEWS:
            return 2 * out_b / self.bytes_per_us
        if op in VIEWS:
            return 0.0
        in_b = sum((n or 0) for n in in_numels) * self.itemsize
        return grad_inputs * (self.kernel_us + (out_b + in_b) / self.bytes_per_us)

    def grad_copy_cost(self, numel: int | None) -> float:
        """Cost in microseconds of AccumulateGrad copying one parameter's gradient into the parameter's
        layout: one eager kernel outside the compiled graph (also outside a CUDA graph), reading and
        writing ``numel`` elements. It happens when the gradient arrives with other strides than the
        parameter (``obeys_layout_contract`` fails: torch/csrc/autograd/functions/accumulate_grad.h)."""
        return self.eager_launch_us + 2 * (numel or 0) * self.itemsize / self.bytes_per_us

    def gemm_us(self, rows: int, cols: int, inner: int, batch: int = 1, batched: bool = False,
                moved: int = 0) -> float:
        """Time in microseconds of one GEMM kernel, launch excluded: ``batch`` products of ``[rows, inner] @
        [inner, cols]``, ``moved`` elements read and written. ``max(FLOPs / rate, bytes / bytes_per_us)``,
        ``FLOPs = 2 * batch * rows * cols * inner``, the rate as in the module doc (``batched``: the
        occupancy of ``batch`` products' output tiles counts); a matrix-vector product
        (``rows`` or ``cols`` 1) is bandwidth-bound: bytes only."""
        t_bytes = moved * self.itemsize / self.bytes_per_us
        if min(rows, cols) <= 1 or inner <= 0:
            return t_bytes
        h, hk = self.gemm_half_mn, self.gemm_half_k
        rate = self.gemm_flops_per_us * rows / (rows + h) * cols / (cols + h) * inner / (inner + hk)
        if batched:
            tiles = batch * math.ceil(rows / self.bmm_tile) * math.ceil(cols / self.bmm_tile)
            rate *= self.bmm_efficiency * tiles / (tiles + self.bmm_half_tiles)
        return max(2.0 * batch * rows * cols * inner / rate, t_bytes)

    def gemm_cost(self, name: str, out_shape, arg_shapes: list) -> float | None:
        """Forward cost in microseconds of one extern GEMM e-node (:data:`GEMM_OPS` ``name``): one launch and
        :meth:`gemm_us` over its output and every tensor argument's bytes (a bias is read by the epilogue,
        or by the add Inductor fuses after a batched product). None when the shapes are unknown or do
        not describe a matrix product (the caller keeps :meth:`node_cost`)."""
        dims = gemm_dims(name, out_shape, arg_shapes)
        if dims is None:
            return None
        batch, rows, cols, inner, batched, _ = dims
        moved = numel(out_shape) + sum(numel(s) for s in arg_shapes)
        return self.launch_us + self.gemm_us(rows, cols, inner, batch, batched, moved)

    def gemm_backward_cost(self, name: str, out_shape, arg_shapes: list, grads: list[bool]) -> float | None:
        """Cost in microseconds of the backward of one extern GEMM e-node whose output requires grad;
        ``grads[i]``: whether tensor argument ``i`` requires grad. Per matrix operand that does, one GEMM
        with a launch (derivatives.yaml ``mm``/``bmm``: ``self: grad.mm(mat2.t())`` is ``[rows, inner]``
        over ``cols``; ``mat2: self.t().mm(grad)`` is ``[inner, cols]`` over ``rows``), reading the output's
        gradient and the other operand, writing the operand's gradient; per bias that does, one reduction
        kernel over the output's gradient. None where :meth:`gemm_cost` is None."""
        dims = gemm_dims(name, out_shape, arg_shapes)
        if dims is None:
            return None
        batch, rows, cols, inner, batched, (left, right) = dims
        n_out = numel(out_shape)
        n_left, n_right = numel(arg_shapes[left]), numel(arg_shapes[right])
        cost = 0.0
        for i, g in enumerate(grads):
            if not g:
                continue
            if i == left:
                cost += self.launch_us + self.gemm_us(rows, inner, cols, batch, batched, n_out + n_right + n_left)
            elif i == right:
                cost += self.launch_us + self.gemm_us(inner, cols, rows, batch, batched, n_out + n_left + n_right)
            else:
                cost += self.kernel_us + (n_out + numel(arg_shapes[i])) * self.itemsize / self.bytes_per_us
        return cost


def gemm_values(gemm: dict, strict: bool) -> dict:
    """The :data:`GEMM_FIELDS` of a GEMM fit record as floats. A record without ``bmm_tile`` and
    ``bmm_half_tiles`` (fitted without the batched occupancy term) gives ``bmm_half_tiles`` 0.

    Raises:
        ValueError (``strict``): a field other than those two is missing, or a value is not a number > 0
            (>= 0 for :data:`GEMM_ZERO_OK`). Not strict: such fields are left out of the result.
    """
    values = {k: gemm.get(k) for k in GEMM_FIELDS}
    if values["bmm_half_tiles"] is None and values["bmm_tile"] is None:
        values["bmm_half_tiles"] = 0.0
        del values["bmm_tile"]
    bad = [k for k, v in values.items() if isinstance(v, bool) or not isinstance(v, (int, float))
           or v < 0 or (v == 0 and k not in GEMM_ZERO_OK)]
    if bad and strict:
        raise ValueError(f"GEMM record needs positive {', '.join(bad)} (>= 0: {', '.join(GEMM_ZERO_OK)}); "
                         f"got {values}")
    return {k: float(v) for k, v in values.items() if k not in bad}


def gemm_dims(name: str, out_shape, arg_shapes: list) -> tuple | None:
    """``(batch, rows, cols, inner, batched, (left, right))`` of a GEMM op (:data:`GEMM_OPS`) from its output's
    and tensor arguments' shapes (symbolic sizes at their hints), ``left``/``right`` the positions of its two
    matrices; None when ``name`` is not a GEMM, a shape is unknown, or the shapes do not agree (inner sizes
    differ, the output's last size is not the right matrix's columns). Leading dims of a non-batched op's
    output fold into ``rows`` (``linear`` on ``[B, S, K]``: one GEMM of ``B * S`` rows)."""
    spec = GEMM_OPS.get(name)
    if spec is None or out_shape is None or len(arg_shapes) < spec[0] + 2:
        return None
    left, batched = spec
    a, b = arg_shapes[left], arg_shapes[left + 1]
    if a is None or b is None or any(s is None for s in arg_shapes) or len(out_shape) < 2 or len(a) < 1 or len(b) < 2:
        return None
    out = [symbolic.hint(s) for s in out_shape]
    inner = symbolic.hint(a[-1])
    if name == "linear":
        cols, b_inner = symbolic.hint(b[0]), symbolic.hint(b[1])
    else:
        cols, b_inner = symbolic.hint(b[-1]), symbolic.hint(b[-2])
    if b_inner != inner or out[-1] != cols or cols <= 0:
        return None
    batch = out[0] if batched and len(out) == 3 else 1
    if batched and len(out) != 3:
        return None
    rows = numel(out_shape) // max(1, cols * batch)
    return batch, rows, cols, inner, batched, (left, left + 1)


def fusion_kind(name: str | None) -> str | None:
    """``"pointwise"``, ``"reduction"`` or None (a kernel of its own: extern GEMMs, embeddings, copies, ops
    not listed) for an op's vocabulary name (:data:`POINTWISE_OPS`, :data:`REDUCTION_OPS`)."""
    if name in POINTWISE_OPS:
        return "pointwise"
    if name in REDUCTION_OPS:
        return "reduction"
    return None


def numel(shape) -> int | None:
    """Element count of an e-graph shape; a symbolic size counts at its hint (:mod:`optimus_eq.symbolic`)."""
    return symbolic.numel(shape)
