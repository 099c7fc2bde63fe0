"""egglog's Rust bindings (``egglog.bindings``), the only part of egglog the project uses, loaded without the
``egglog`` package's ``__init__``.

That ``__init__`` imports egglog's Python front end (its builtins, the pretty printer and with it ``black``,
``jinja2``, ``graphviz``): about 0.4-0.5 s of every process that imports the optimizer, on this repository's
CPU machine (egglog 13.2.0), against 0.04 s for the extension module alone. The module is loaded from its file
in the installed package (found with ``importlib.util.find_spec``, which runs nothing) and then left out of
``sys.modules``, so that a later ``import egglog`` (a user's) imports the package as usual and gets this same
extension module (Python keeps one per extension file), with ``egglog.bindings`` set. Where egglog is imported
already, or the file is not where egglog keeps it, the usual ``from egglog import bindings`` is used.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def _load():
    if "egglog" in sys.modules:
        from egglog import bindings as module

        return module
    try:
        package = importlib.util.find_spec("egglog")
        folder = os.path.dirname(package.origin)
        path = next(p for p in (os.path.join(folder, "bindings" + s) for s in importlib.machinery.EXTENSION_SUFFIXES)
                    if os.path.exists(p))
        spec = importlib.util.spec_from_file_location("egglog.bindings", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception:  # another layout: the package's own import
        from egglog import bindings as module

        return module
    if sys.modules.get("egglog.bindings") is module:
        del sys.modules["egglog.bindings"]  # the package's import, when it comes, binds it (module doc)
    return module


bindings = _load()

__all__ = ["bindings"]
