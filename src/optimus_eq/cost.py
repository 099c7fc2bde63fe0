"""A GPU cost model of e-nodes: kernel launches plus bytes moved (DESIGN.md, principle 5).

cost(e-node) = kernels * launch_us + bytes / bytes_per_us   (microseconds)

* views (Narrow, Select, Reshape, Permute, Unsqueeze) launch nothing and move nothing; they cost a tiny
  ``view_us`` so that among equal plans the one with fewer nodes wins;
* list cells (Cons, Nil, ACons, ANil) and bookkeeping cost nothing;
* ``Cat`` is one kernel that reads and writes its output once;
* ``Unary``/``Binary`` are one kernel each, reading their inputs and writing the output (Inductor fuses
  chains of pointwise ops into one kernel; this model does not credit that yet);
* ``Apply`` of a pure op is one kernel writing its output, reading its inputs;
* opaque terms are forced into every plan, so their cost does not matter (0).

Bytes are ``numel * 4`` (the e-graph does not carry dtypes; fp32 assumed).

The default constants are measured, not tuned: ``optimus-eq calibrate`` on an NVIDIA H200 (torch 2.11,
Triton 3.6; bench/results/h200_matrix_2026-11-29/calibration.json, bench/optimus_bench/calibrate.py):

* ``launch_us = 23.3``: the marginal cost of one more Triton kernel in an Inductor-compiled graph run
  without CUDA graphs (a kernel's launch plus its output buffer). The same H200 bench matrix gives 24 us per
  kernel removed in training steps and 8-9 us in inference (the slope of ms over kernels across strategies
  on DHEN and launch_bound); inside a CUDA graph one kernel costs 2.3 us.
* ``bytes_per_us = 4.0e6`` (4.0 TB/s): the median of per-op bandwidth fits (cat, add, relu, layer_norm).

Measure another device with ``optimus-eq calibrate --out cal.json`` and pass
``cost_model=GPUCostModel.from_calibration("cal.json")``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

VIEWS = frozenset(["Narrow", "Select", "Reshape", "Permute", "Unsqueeze"])
FREE = frozenset(["Cons", "Nil", "ACons", "ANil", "Leaf"])


@dataclass(frozen=True)
class GPUCostModel:
    """Constants of the cost model. Units: microseconds, bytes."""

    launch_us: float = 23.3
    bytes_per_us: float = 4.0e6
    view_us: float = 1e-3
    itemsize: int = 4

    @classmethod
    def from_calibration(cls, source) -> "GPUCostModel":
        """The model with ``launch_us`` and ``bytes_per_us`` measured by ``optimus-eq calibrate``.

        Args:
            source: the JSON file it wrote (a path) or that record as a dict.

        Raises:
            ValueError: the record lacks a positive ``launch_us`` or ``bytes_per_us``.
        """
        import json
        from pathlib import Path

        record = source if isinstance(source, dict) else json.loads(Path(source).read_text())
        values = {k: record.get(k) for k in ("launch_us", "bytes_per_us")}
        bad = [k for k, v in values.items() if not isinstance(v, (int, float)) or v <= 0]
        if bad:
            raise ValueError(f"calibration record needs positive {', '.join(bad)}; got {values}")
        return cls(launch_us=float(values["launch_us"]), bytes_per_us=float(values["bytes_per_us"]))

    def node_cost(self, op: str, out_numel: int | None, in_numels: list[int | None], opaque: bool) -> float:
        """Cost in microseconds of one e-node whose output has ``out_numel`` elements."""
        if op in FREE or opaque:
            return 0.0
        if op in VIEWS:
            return self.view_us
        out_b = (out_numel or 0) * self.itemsize
        in_b = sum((n or 0) for n in in_numels) * self.itemsize
        if op == "Cat":
            return self.launch_us + 2 * out_b / self.bytes_per_us
        return self.launch_us + (out_b + in_b) / self.bytes_per_us


def numel(shape) -> int | None:
    return None if shape is None else math.prod(shape)
