"""The README's Python examples that say they are run by this file still run (and their asserts hold)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def _examples() -> list[str]:
    text = README.read_text()
    out = []
    for m in re.finditer(r"run by `tests/test_readme.py`.*?```python\n(.*?)```", text, flags=re.S):
        out.append(m.group(1))
    return out


def test_readme_has_examples_to_run():
    assert _examples(), "README.md lost its examples marked as run by tests/test_readme.py"


@pytest.mark.parametrize("index", range(len(_examples())))
def test_readme_example_runs(index):
    torch._dynamo.reset()
    exec(compile(_examples()[index], f"README.md example {index}", "exec"), {"__name__": "readme_example"})


def test_ci_runs_the_readme_s_test_command():
    """`.ci/run` runs the README's test command (its second shell block) as written, and that command
    prints the slowest tests (CI's log shows where the time goes)."""
    blocks = re.findall(r"```sh\n(.*?)\n```", README.read_text(), flags=re.S)
    assert len(blocks) >= 2, "README.md lost its set-up-and-test command"
    command = blocks[1].strip()
    ci = (README.parent / ".ci" / "run").read_text().splitlines()
    assert command in ci, f".ci/run no longer runs the README's test command: {command}"
    assert "--durations=" in command
