"""What the optimizer's first call in a fresh process imports (issue 9; the seconds are in bench/first_call.py).

HiGHS is loaded without scipy.optimize's ``__init__`` and egglog's bindings without egglog's Python front end;
a later ordinary import of either package must still work and give the very same extension module.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str) -> dict:
    env = {"PYTHONPATH": ":".join(str(ROOT / p) for p in ("src", "bridge", "bench")), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_egglog_bindings_without_the_front_end_then_the_package_as_usual():
    got = _run(
        "import json, sys\n"
        "from optimus_eq.egraph import EGraph\n"
        "from optimus_eq.patterns import DEFAULT_REGISTRY\n"
        "before = sorted(m for m in ('egglog', 'egglog.bindings', 'black', 'jinja2') if m in sys.modules)\n"
        "with EGraph(DEFAULT_REGISTRY.select(None)) as eg:\n"
        "    size = eg.size()\n"
        "    import egglog, egglog.bindings\n"
        "    from optimus_eq.egglog_bindings import bindings as ours\n"
        "    same = egglog.bindings is ours and isinstance(eg.egraph, egglog.bindings.EGraph)\n"
        "x = egglog.EGraph()\n"
        "print(json.dumps({'before': before, 'same': same, 'size': size}))\n")
    assert got == {"before": [], "same": True, "size": 0}


@pytest.mark.slow
def test_highs_without_scipy_optimize_then_scipy_optimize_as_usual():
    got = _run(
        "import json, sys\n"
        "import numpy as np\n"
        "from optimus_eq.extract import ilp\n"
        "ilp.load_solver()\n"
        "core = ilp._highs()\n"
        "before = 'scipy.optimize' in sys.modules\n"
        "x, optimal, gap = ilp._milp(np.array([1.0, 2.0, 3.0]), [0, 0, 0], [0, 1, 2], [1.0, 1.0, 1.0], [1.0], [1.0],"
        " 3, np.ones(3), 5.0)\n"
        "import scipy.optimize\n"
        "from scipy.optimize._highspy import _core\n"
        "print(json.dumps({'direct': core is not None, 'before': before, 'same': _core.HighsLp is core.HighsLp,"
        " 'x': [round(v) for v in x], 'optimal': optimal}))\n")
    assert got == {"direct": True, "before": False, "same": True, "x": [1, 0, 0], "optimal": True}


@pytest.mark.slow
def test_small_graphs_extract_without_scipy_sparse_and_to_the_same_plan():
    """A fresh process's first eqsat optimize of a small graph (a cycle-free split/cat tangle plus a horizontal
    group, exact stage included) imports neither scipy.sparse nor its csgraph (networkx does the graph routines,
    numpy the ILP's column-compressed matrix); the same graph with scipy's routines forced
    (``prune.SMALL_GRAPH = 0``) extracts the same plan at the same cost, with the same component labels."""
    code = (
        "import json, sys, torch\n"
        "import optimus_eq\n"
        "from optimus_eq.extract import prune\n"
        "if FORCE: prune.SMALL_GRAPH = 0\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lins = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(4))\n"
        "    def forward(self, x):\n"
        "        s = torch.split(x, 8, dim=1)\n"
        "        ys = [torch.tanh(l(s[i])) for i, l in enumerate(self.lins)]\n"
        "        t = torch.split(torch.cat(ys, 1), 8, 1)\n"
        "        return torch.cat([torch.relu(t[i]) for i in range(4)], 1)\n"
        "gm = torch.fx.symbolic_trace(M())\n"
        "x = torch.randn(16, 32)\n"
        "out, rep = optimus_eq.optimize(gm, (x,), strategy='eqsat')\n"
        "stats = {k: v for k, v in rep.extraction.items() if not k.endswith('_s')}\n"
        "print(json.dumps({'sparse': 'scipy.sparse' in sys.modules, 'code': out.code, 'stats': repr(stats),"
        " 'eq': bool(torch.allclose(out(x), gm(x)))}))\n")
    small = _run("FORCE = False\n" + code)
    forced = _run("FORCE = True\n" + code)
    assert small["eq"] and forced["eq"]
    assert not small["sparse"] and forced["sparse"]
    assert small["code"] == forced["code"] and small["stats"] == forced["stats"]
