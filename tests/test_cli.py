"""The command line (`optimus_eq.cli.main`, in-process): `--version`, a parser that imports nothing heavy,
`optimize` and `explain` on a model file written here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from optimus_eq.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_version_prints_the_version_and_exits_0(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("optimus-eq ") and len(out.split()) >= 2


def test_the_parser_imports_no_torch_and_no_egglog():
    """`optimus-eq --help` stays fast by importing neither (checked as imported modules, not as time)."""
    code = ("import sys, optimus_eq.cli as c; c.build_parser().format_help(); "
            "import optimus_eq; optimus_eq.Report; "
            "print(sorted(m for m in ('torch', 'egglog', 'optimus_eq.demo') if m in sys.modules))")
    env = {"PYTHONPATH": ":".join(str(ROOT / p) for p in ("src", "bridge", "bench")), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in ("demo", "bench", "calibrate"):
        assert name in out


def test_lazy_core_names_still_resolve():
    import optimus_eq

    assert optimus_eq.Limits().iterations > 0
    assert "split_cat_pass" in {p.name for p in optimus_eq.DEFAULT_REGISTRY}
    assert {"Limits", "optimize", "Pattern"} <= set(dir(optimus_eq))
    with pytest.raises(AttributeError):
        optimus_eq.no_such_name
