"""The import contract of the project's layers (docs/DESIGN.md, "Layers"), read from the source with ``ast``.

Layers, bottom to top (a module may import its own layer and the layers below it):

0. core: ``optimus_eq`` (its ``__init__`` too) and ``optimus_greedy``: terms, patterns, e-graph, searches,
   horizontal machinery, extraction, cost model. No FX, no bridge.
1. bridge: ``optimus_bridge``: FX graph <-> rows of the term language (translate, lower, vocabularies, the
   eager facts read off FX meta).
2. facade: ``optimus_eq.api`` (``optimize``), ``optimus_eq.facade`` (``backend``, the passes), and the
   torch.compile / Inductor / export hooks of the bridge package.
3. tools: ``optimus_eq.demo`` and the benchmark suite ``optimus_bench``.
4. cli: ``optimus_eq.cli``.

``import optimus_eq`` gives the public names of the facade through a module ``__getattr__`` (PEP 562): the
package's ``__init__`` is imported by every core module, so it imports only the core eagerly.

The graph holds every import of a project module, at the top of a module or inside a function, and the
packages that importing a module runs first (``import a.b.c`` runs ``a/__init__`` and ``a/b/__init__``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {"src": ("optimus_eq", "optimus_greedy"), "bridge": ("optimus_bridge",), "bench": ("optimus_bench",)}
LAYERS = ("core", "bridge", "facade", "tools", "cli")
#: modules above the layer of their package (the rest of optimus_eq / optimus_greedy is core, of
#: optimus_bridge bridge, of optimus_bench tools)
PLACED = {
    "optimus_eq.api": "facade",
    "optimus_eq.facade": "facade",
    "optimus_bridge.backend": "facade",
    "optimus_bridge.post_grad": "facade",
    "optimus_bridge.export": "facade",
    "optimus_eq.demo": "tools",
    "optimus_eq.modelrun": "tools",
    "optimus_eq.explain": "tools",
    "optimus_eq.pictures": "tools",
    "optimus_eq.cli": "cli",
    "optimus_eq.cli_output": "cli",
}
PACKAGE_LAYER = {"optimus_eq": "core", "optimus_greedy": "core", "optimus_bridge": "bridge", "optimus_bench": "tools"}
#: (importer, imported) imports made on first use on purpose, each with its reason
LAZY = {
    ("optimus_eq", "optimus_eq.facade"): "PEP 562: `optimus_eq.optimize` etc. without the core importing the facade",
    ("optimus_eq", "optimus_eq.egraph"): "PEP 562: `import optimus_eq` (and `optimus-eq --help`) loads no torch, no egglog",
    ("optimus_eq", "optimus_eq.patterns"): "PEP 562: `import optimus_eq` (and `optimus-eq --help`) loads no torch, no egglog",
    ("optimus_eq.cli", "optimus_eq.demo"): "the demo imports torch: `--help` stays under a second",
    ("optimus_eq.cli", "optimus_eq.modelrun"): "optimize/explain import torch: `--help` stays under a second",
    ("optimus_eq.cli", "optimus_eq.explain"): "explain imports torch: `--help` stays under a second",
    # the bench and calibrate subcommands: the suite imports torch._inductor, and a checkout without bench/ on
    # the path gets a message from those two subcommands instead of a command line that does not start
    ("optimus_eq.cli", "optimus_bench.runner"): "optional subcommand",
    ("optimus_eq.cli", "optimus_bench.models"): "optional subcommand",
    ("optimus_eq.cli", "optimus_bench.strategies"): "optional subcommand",
    ("optimus_eq.cli", "optimus_bench.calibrate"): "optional subcommand",
}
#: (importer, imported) imports against the contract, each with its reason (the splits of translate.py and lower.py emptied it):
#: (left out of the checks; the list shrinks, never grows)
PENDING = {
}
SKIPPED = {**LAZY, **PENDING}
#: outside packages the core must not import
CORE_FORBIDDEN = ("torch.fx", "optimus_bridge")


def _modules() -> dict[str, Path]:
    out = {}
    for folder, packages in SOURCES.items():
        for package in packages:
            for path in sorted((ROOT / folder / package).rglob("*.py")):
                name = ".".join(path.relative_to(ROOT / folder).with_suffix("").parts)
                out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def layer(module: str) -> str:
    return PLACED.get(module) or PACKAGE_LAYER[module.split(".")[0]]


def _imports(module: str, path: Path):
    """``(imported name, line, inside a function)`` for every import statement of ``module``."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), str(path))

    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, child.lineno, in_function
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = module.split(".")[: len(module.split(".")) - child.level + is_package]
                    base = ".".join(parts + ([base] if base else []))
                for alias in child.names:
                    yield (f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base), child.lineno, in_function
            yield from walk(child, inner)

    yield from walk(tree, False)


def _project_module(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _edges():
    """``(importer, imported, line, inside a function, implied)``; implied: a package run before ``imported``."""
    for module, path in MODULES.items():
        for name, line, in_function in _imports(module, path):
            target = _project_module(name)
            if target is None or target == module:
                continue
            yield module, target, line, in_function, False
            parts = target.split(".")
            for k in range(1, len(parts)):
                package = ".".join(parts[:k])
                if not module.startswith(package + ".") and package != module:
                    yield module, package, line, in_function, True


EDGES = list(_edges())


def test_the_module_list_is_read():
    assert {"optimus_eq", "optimus_eq.api", "optimus_bridge.translate", "optimus_greedy.search"} <= set(MODULES)
    assert any(t == "optimus_eq.terms" for m, t, *_ in EDGES if m == "optimus_bridge.translate")


def test_no_import_cycle():
    g = nx.DiGraph()
    for a, b, line, _, _ in EDGES:
        if (a, b) not in SKIPPED:
            g.add_edge(a, b, line=line)
    cycles = [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]
    messages = []
    for members in cycles:
        cycle = nx.find_cycle(g.subgraph(members))
        messages.append(" -> ".join(f"{a} (line {g.edges[a, b]['line']})" for a, b in cycle) + f" -> {cycle[0][0]}")
    assert not messages, "import cycles between project modules:\n" + "\n".join(messages)


def test_every_import_goes_down_the_layers():
    wrong = sorted({f"{MODULES[a].relative_to(ROOT)}:{line} ({layer(a)}) imports {b} ({layer(b)})"
                    for a, b, line, _, implied in EDGES
                    if (a, b) not in SKIPPED and not implied and LAYERS.index(layer(b)) > LAYERS.index(layer(a))})
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


@pytest.mark.slow
def test_the_core_reads_no_fx_and_no_bridge():
    wrong = []
    for module, path in MODULES.items():
        if layer(module) != "core":
            continue
        for name, line, _ in _imports(module, path):
            if (module, _project_module(name)) in PENDING:
                continue
            if any(name == f or name.startswith(f + ".") for f in CORE_FORBIDDEN):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not wrong, "the core imports FX or the bridge:\n" + "\n".join(wrong)


def test_project_modules_are_imported_at_the_top():
    """Function-local imports are for optional heavy dependencies, not to hide a cycle (LAZY lists the
    imports made on first use on purpose)."""
    wrong = sorted({f"{MODULES[a].relative_to(ROOT)}:{line} imports {b} inside a function"
                    for a, b, line, in_function, implied in EDGES if in_function and not implied and (a, b) not in SKIPPED})
    assert not wrong, "\n".join(wrong)


def test_exceptions_are_still_there():
    """An entry of LAZY or PENDING that no longer exists is dropped from its list, so it cannot hide a new
    import."""
    present = {(a, b) for a, b, *_ in EDGES}
    assert set(SKIPPED) <= present, f"no longer imported, drop from the lists: {sorted(set(SKIPPED) - present)}"
