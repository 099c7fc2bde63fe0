"""PyTorch's logging conventions: ``TORCH_LOGS="+optimus_eq"`` prints each report during torch.compile, and
``TORCH_TRACE`` gets an ``optimus_eq_report`` artifact (the user's path: a fresh process, env vars set before
torch is imported)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = """
import torch
import optimus_eq

def f(x):
    return torch.cat([torch.tanh(p) for p in torch.split(x, 2, dim=1)], dim=1)

torch.compile(f, backend=optimus_eq.backend(strategy="greedy", compile=False))(torch.randn(3, 8))
"""


def _run(tmp_path, **env):
    script = tmp_path / "model.py"
    script.write_text(PROGRAM)
    base = {k: v for k, v in os.environ.items() if k not in ("TORCH_LOGS", "TORCH_TRACE")}
    env = {**base, "PYTHONPATH": ":".join(str(ROOT / p) for p in ("src", "bridge", "bench")), **env}
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_torch_logs_prints_the_report_during_torch_compile(tmp_path):
    trace = tmp_path / "trace"
    done = _run(tmp_path, TORCH_LOGS="+optimus_eq", TORCH_TRACE=str(trace))
    assert done.returncode == 0, done.stderr
    assert "optimus_eq[greedy, pre_grad]: FX nodes 12 -> 3" in done.stderr     # INFO: the summary
    assert "input ops: " in done.stderr and "split removed" in done.stderr     # DEBUG (+): op fates
    logged = "".join(p.read_text() for p in trace.iterdir())
    assert '"name": "optimus_eq_report"' in logged and '"frame_id": 0' in logged  # tied to the compile


@pytest.mark.slow
def test_no_report_without_torch_logs(tmp_path):
    done = _run(tmp_path)  # (an empty TORCH_LOGS makes torch 2.13's import fail: unset, not empty)
    assert done.returncode == 0, done.stderr
    assert "optimus_eq[greedy" not in done.stderr
