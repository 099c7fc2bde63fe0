"""The demo: a small recommendation-style model full of split/cat junk, compiled with each strategy.

`build_demo_model` makes the model; `run_demo` compiles it with `optimus_eq.backend(strategy=...)`,
checks the outputs against eager and measures graph size, kernels, time per iteration and compile time.
The command-line tool (`optimus-eq demo`) prints the results side by side.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn

import optimus_eq
from optimus_eq.kernels import count_kernels
from optimus_eq.options import optimus_fusion_options

# Op kinds (as the report names them) that count as split/cat "junk".
JUNK_OPS = ("split", "split_with_sizes", "tensor_split", "chunk", "cat", "concat", "stack", "unbind")


class DemoModel(nn.Module):
    """Dense features [B, N*D] of N fields of width D, with the junk and the per-field layers that
    recommendation model code often carries.

    Every split/chunk/unbind below is undone by a cat/stack in order, so a vertical split/cat algebra
    removes all of it: split -> same pointwise op per piece -> cat is one pointwise op on the whole
    tensor; unbind -> stack is the tensor; split -> cat is the tensor. The per-field arch (split ->
    per-field Linear -> per-field LayerNorm -> relu -> cat, as in DHEN-/DLRM-style interaction layers) is
    N small Linear and LayerNorm ops side by side: horizontal fusion makes them one batched matmul
    (baddbmm) and one layer_norm, with views around them. What is left is sigmoid(relu(tanh(x))) ->
    the batched per-field layers -> Linear -> LayerNorm -> + x.
    """

    def __init__(self, num_fields: int = 16, dim: int = 32) -> None:
        super().__init__()
        self.num_fields, self.dim = num_fields, dim
        width = num_fields * dim
        self.field_linears = nn.ModuleList(nn.Linear(dim, dim) for _ in range(num_fields))
        self.field_norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(num_fields))
        self.linear = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, d = self.num_fields, self.dim
        # per-field pointwise ops, three spellings of "split per field"
        h = torch.cat([torch.tanh(p) for p in torch.split(x, d, dim=1)], dim=1)
        h = torch.cat([torch.relu(p) for p in h.split(d, dim=1)], dim=1)
        h = torch.cat([torch.sigmoid(p) for p in torch.chunk(h, n, dim=1)], dim=1)
        # unbind -> stack of a [B, N, D] view
        v = h.view(-1, n, d)
        v = torch.stack(torch.unbind(v, dim=1), dim=1)
        h = v.reshape(-1, n * d)
        # per-field dense layers: split -> Linear -> LayerNorm -> relu per field -> cat
        h = torch.cat([torch.relu(norm(lin(p))) for p, lin, norm in
                       zip(torch.split(h, d, dim=1), self.field_linears, self.field_norms)], dim=1)
        # split -> cat round trip in front of the dense layers
        half = (n * d) // 2
        a, b = torch.split(h, [half, n * d - half], dim=1)
        h = torch.cat([a, b], dim=1)
        return self.norm(self.linear(h)) + x


def build_demo_model(
    num_fields: int = 16, dim: int = 32, batch: int = 256, *, device: str | torch.device = "cpu",
    seed: int = 0,
) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The demo model (in eval mode) and its example inputs: one tensor of shape [batch, num_fields*dim]."""
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DemoModel(num_fields, dim)
    x = torch.randn(batch, num_fields * dim, generator=gen)
    return model.eval().to(device), (x.to(device),)


def junk_count(ops: Mapping[str, int] | None) -> int | None:
    """How many split/chunk/cat/stack/unbind nodes an op-kind histogram holds."""
    if ops is None:
        return None
    return sum(int(ops.get(k, 0)) for k in JUNK_OPS)


def _sum_dicts(dicts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + int(v)
    return out


def _summarize_reports(reports: list[Any]) -> dict[str, Any]:
    """Fold the reports of all graphs Dynamo compiled (one per graph break) into the demo's numbers."""
    if not reports:
        return {"graphs": 0}
    ops_before = _sum_dicts(r.ops_before for r in reports)
    ops_after = _sum_dicts(r.ops_after for r in reports)
    fallbacks = [r.fallback for r in reports if getattr(r, "fallback", None)]
    stops = [r.stop_reason for r in reports if getattr(r, "stop_reason", None)]
    return {
        "graphs": len(reports),
        "nodes_before": sum(r.nodes_before for r in reports),
        "nodes_after": sum(r.nodes_after for r in reports),
        "ops_before": ops_before,
        "ops_after": ops_after,
        "junk_before": junk_count(ops_before),
        "junk_after": junk_count(ops_after),
        "patterns_fired": _sum_dicts(r.patterns_fired for r in reports),
        "egraph_nodes": sum(getattr(r, "egraph_nodes", 0) or 0 for r in reports),
        "egraph_classes": sum(getattr(r, "egraph_classes", 0) or 0 for r in reports),
        "iterations": sum(getattr(r, "iterations", 0) or 0 for r in reports),
        "stop_reason": "; ".join(stops) or None,
        "optimize_s": sum((getattr(r, "times", None) or {}).get("total", 0.0) for r in reports),
        "fallback": "; ".join(fallbacks) or None,
        "summary": "\n".join(r.summary() for r in reports),
    }


def warm_up_compiler(device: str = "cpu") -> float:
    """Compile and run a tiny function with plain Inductor once; returns the seconds it took.

    The first compile in a process pays one-time costs (imports, Inductor's compile workers, the C++
    or Triton toolchain's first start) of 10-20 s on two CPU cores. Calling this before `run_demo`
    keeps those out of the first strategy's compile time.
    """
    import torch._inductor.config
    import torch._inductor.utils

    t0 = time.perf_counter()
    x = torch.randn(8, 8, device=device)
    patches = {"cpp.enable_kernel_profile": True} if device == "cpu" else {}
    with torch._inductor.utils.fresh_cache(), torch._inductor.config.patch(patches), torch.no_grad():
        torch.compile(lambda t: torch.relu(t) + 1.0)(x)
    torch._dynamo.reset()
    return time.perf_counter() - t0


def _log_default(msg: str) -> None:
    print(msg, flush=True)


def run_demo(
    strategy: str,
    device: str = "cpu",
    *,
    num_fields: int = 16,
    dim: int = 32,
    batch: int = 256,
    iters: int = 20,
    warmup: int = 3,
    fresh_cache: bool = True,
    rtol: float = 1e-4,
    atol: float = 1e-4,
    seed: int = 0,
    log: Callable[[str], None] | None = _log_default,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Compile the demo model with `optimus_eq.backend(strategy=strategy, **options)` and measure it.

    `strategy="builtin"` compiles with plain Inductor and every built-in Optimus pass of the installed
    torch turned on (`pre_grad_fusion_options` / `post_grad_fusion_options`, as
    `optimus_eq.options.optimus_fusion_options` lists them): the passes optimus-eq reimplements.

    Returns a dict with: strategy, device, nodes_before/nodes_after (FX nodes of the Dynamo graph before
    and after the optimizer), junk_before/junk_after (split/chunk/cat/stack/unbind nodes), kernels
    (per iteration, see `optimus_eq.kernels.count_kernels`), ms and ms_min (median and fastest of `iters` runs after
    `warmup`), compile_s (the
    first call: Dynamo, the optimizer and Inductor), optimize_s (the optimizer's own time), outputs_match,
    max_abs_diff, patterns_fired, fallback, error (a string when something raised; then most numbers are
    None), and summary (the reports' text).

    With `fresh_cache` (the default) Inductor compiles into an empty cache, so compile_s is a cold compile
    and strategies do not reuse each other's kernels.
    """
    import torch._inductor.config
    import torch._inductor.utils

    say = log or (lambda _msg: None)
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda asked for, but torch.cuda.is_available() is False")

    model, inputs = build_demo_model(num_fields, dim, batch, device=device, seed=seed)
    result: dict[str, Any] = {"strategy": strategy, "device": device, "error": None}

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    with torch.no_grad():
        expected = model(*inputs)

    torch._dynamo.reset()
    optimus_eq.last_reports.clear()
    cache = torch._inductor.utils.fresh_cache() if fresh_cache else contextlib.nullcontext()
    patches: dict[str, Any] = {}
    if device == "cpu":
        patches["cpp.enable_kernel_profile"] = True  # makes generated C++ kernels visible to the profiler
    try:
        with cache, torch._inductor.config.patch(patches), torch.no_grad():
            if strategy == "builtin":
                pre, post = optimus_fusion_options()
                compiled = torch.compile(model, options={"pre_grad_fusion_options": pre,
                                                         "post_grad_fusion_options": post})
            else:
                compiled = torch.compile(model, backend=optimus_eq.backend(strategy=strategy, **(options or {})))
            say(f"[{strategy}] compiling (Dynamo -> optimizer -> Inductor), first call ...")
            t0 = time.perf_counter()
            out = compiled(*inputs)
            sync()
            result["compile_s"] = time.perf_counter() - t0
            say(f"[{strategy}] compiled in {result['compile_s']:.1f} s; checking outputs against eager")

            result["max_abs_diff"] = float((out - expected).abs().max())
            try:
                torch.testing.assert_close(out, expected, rtol=rtol, atol=atol)
                result["outputs_match"] = True
            except AssertionError as e:
                result["outputs_match"] = False
                result["mismatch"] = str(e)

            say(f"[{strategy}] timing {warmup} warmup + {iters} runs")
            for _ in range(warmup):
                compiled(*inputs)
            sync()
            samples = []
            for _ in range(iters):
                t0 = time.perf_counter()
                compiled(*inputs)
                sync()
                samples.append((time.perf_counter() - t0) * 1e3)
            result["ms"] = statistics.median(samples)
            result["ms_min"] = min(samples)
            result["kernels"] = count_kernels(lambda: compiled(*inputs), device)["kernels"]
    except Exception as e:  # report it in the table; the CLI exits non-zero
        result["error"] = f"{type(e).__name__}: {e}"
        result.setdefault("outputs_match", False)
        say(f"[{strategy}] FAILED: {result['error']}")
    finally:
        torch._dynamo.reset()

    result.update(_summarize_reports(list(optimus_eq.last_reports)))
    return result
