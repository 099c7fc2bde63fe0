"""The house rule of issue 14: each registered pattern name occurs in one module of src/ and bridge/, its
home, which holds all of the pattern (rules or group key and builder, declaration, doc, the facts other
modules read off its fields). Docs and tests may mention any name. A name is matched as a whole word, so
``batch_linear`` does not match ``batch_linear_lhs``."""

from __future__ import annotations

import re
from pathlib import Path

from optimus_eq.patterns import DEFAULT_REGISTRY
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _modules() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for d in ("src", "bridge") for p in (ROOT / d).rglob("*.py")}


@pytest.mark.slow
def test_each_pattern_name_lives_in_one_module():
    modules = _modules()
    spread = {}
    for name in DEFAULT_REGISTRY.names():
        word = re.compile(rf"(?<!\w){re.escape(name)}(?!\w)")
        homes = sorted(path for path, text in modules.items() if word.search(text))
        if len(homes) != 1:
            spread[name] = homes
    assert not spread, f"pattern names outside their home module (name -> modules): {spread}"

