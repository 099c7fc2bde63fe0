"""Kernels per call, counted with torch.profiler: one counter for the demo (`optimus-eq demo`) and the
benchmarks (bench/optimus_bench, bench/post_grad.py).

On CUDA a kernel is a GPU activity (kernel, memcpy, memset). On CPU the generated C++ kernels are visible
to the profiler only when Inductor compiled them with ``cpp.enable_kernel_profile``; see
:data:`KERNEL_NOTES` for what is counted.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Callable
from typing import Any

import torch

# Profiler events that allocate, alias or only change metadata: no kernel runs.
_NO_KERNEL = frozenset({
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::as_strided", "aten::view", "aten::alias",
    "aten::_reinterpret_tensor", "aten::detach", "aten::detach_", "aten::resize_", "aten::t", "aten::transpose",
    "aten::permute", "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::select", "aten::slice",
    "aten::narrow", "aten::split", "aten::split_with_sizes", "aten::unbind", "aten::chunk", "aten::flatten",
    "aten::unflatten", "aten::_unsafe_view", "aten::lift_fresh", "aten::resolve_conj", "aten::resolve_neg",
    "aten::numpy_T", "aten::expand_as", "aten::view_as", "aten::movedim", "aten::unfold", "aten::set_",
})
# Ops that copy only when their children do (a no-op ``to``/``reshape``/``contiguous`` runs no kernel).
_MAYBE_COPY = frozenset({"aten::to", "aten::reshape", "aten::contiguous", "aten::type_as", "aten::clone"})
_COPIES = ("aten::copy_", "aten::_to_copy", "aten::clone", "aten::_unsafe_view")
_COMPILED_GRAPH = "## Call CompiledFxGraph"
# CPU-side CUDA runtime/driver calls that put work on the GPU.
_LAUNCH_APIS = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                          "cudaGraphLaunch", "cudaMemcpyAsync", "cudaMemsetAsync", "cudaLaunchCooperativeKernel"})

KERNEL_NOTES = {
    "cuda": "kernels: GPU activities (kernels, memcpy, memset) of one iteration, counted with torch.profiler "
            "(CUDA graph replays included: their kernels still run); launches: the CPU-side CUDA launch calls "
            "of one iteration (a graph replay is one cudaGraphLaunch).",
    "cpu": "kernels (cpu): the ops one iteration runs, counted with torch.profiler: Inductor's generated C++ "
           "kernels and the extern ATen calls of compiled graphs (compiled with cpp.enable_kernel_profile), "
           "plus top-level ATen ops outside compiled graphs (eager, loss, graph breaks, autograd of eager "
           "ops); views, allocations and no-op copies are not counted.",
}


# Kineto's C++ logger writes these to fd 2 on every profile, whatever KINETO_LOG_LEVEL says.
_KINETO_LINE = re.compile(r"^(USDT|STAGE|INFO):\d{4}-\d\d-\d\d [^\]]*\.cpp:\d+\]")


@contextlib.contextmanager
def _without_kineto_noise():
    """Run the block with fd 2 captured, then pass on everything but Kineto's log lines."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp, warnings.catch_warnings():
        # torch 2.11 warns once per process that the profiler "clears events at the end of each cycle"
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            for line in tmp.read().decode(errors="replace").splitlines(keepends=True):
                if not _KINETO_LINE.match(line):
                    sys.stderr.write(line)
            sys.stderr.flush()


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def count_kernels(step: Callable[[], Any], device: str) -> dict[str, int]:
    """Kernels one call of ``step`` runs, counted with torch.profiler (see :data:`KERNEL_NOTES`).

    Args:
        step: the call to profile (one iteration: a compiled forward, or a whole training step).
        device: ``"cuda"`` or ``"cpu"`` (on CPU, compile with ``cpp.enable_kernel_profile`` so that
            Inductor's generated C++ kernels show up).

    Returns ``{"kernels": n}`` and on CUDA also ``{"launches": n}``.
    """
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    _sync(device)
    with _without_kineto_noise(), profile(activities=acts) as prof:
        step()
        _sync(device)
    events = prof.events()
    if device == "cuda":
        dev = sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
        launches = sum(1 for e in events if e.device_type != torch.autograd.DeviceType.CUDA and e.name in _LAUNCH_APIS)
        return {"kernels": dev, "launches": launches}
    return {"kernels": sum(1 for e in events if _is_cpu_kernel(e))}


def _is_cpu_kernel(e) -> bool:
    parent = e.cpu_parent
    if parent is not None and parent.name.startswith(_COMPILED_GRAPH):
        if e.name in _NO_KERNEL:
            return False
        return e.name not in _MAYBE_COPY or _has_copy_child(e)
    if not e.name.startswith("aten::") or e.name in _NO_KERNEL:
        return False
    a = parent
    while a is not None:  # nested inside another op: that op was counted
        if a.name.startswith("aten::") or a.name.startswith(_COMPILED_GRAPH):
            return False
        a = a.cpu_parent
    return e.name not in _MAYBE_COPY or _has_copy_child(e)


def _has_copy_child(e) -> bool:
    stack = list(e.cpu_children)
    while stack:
        c = stack.pop()
        if c.name in _COPIES:
            return True
        stack.extend(c.cpu_children)
    return False
