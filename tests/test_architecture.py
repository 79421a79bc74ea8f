"""The package's structure: no import cycles, no private names imported across modules, the
layers of pyproject.toml's import-linter contract, small modules, a short top level, and test
modules that share code through helpers.py rather than by importing each other.

cli/, profiling/ and quantize/ sit beside redrafter_mlx/ in the checkout but install inside it
(`redrafter_mlx.cli`, ...), so the import checks run on a copy laid out as installed."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).parent.parent
PACKAGE = "redrafter_mlx"
INSTALLED_INSIDE = ("cli", "profiling", "quantize")  # checkout folders installed as redrafter_mlx.<name>
SOURCE_DIRS = (ROOT / PACKAGE, *(ROOT / name for name in INSTALLED_INSIDE))
MAX_LINES = 350
MAX_TOP_LEVEL_MODULES = 8


def python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.fixture(scope="module")
def installed_layout(tmp_path_factory) -> Path:
    """A folder holding redrafter_mlx/ as installed (its Python files, cli/ profiling/ and
    quantize/ inside it), to put first on sys.path."""
    root = tmp_path_factory.mktemp("layout")
    ignore = shutil.ignore_patterns("__pycache__", "assets")
    shutil.copytree(ROOT / PACKAGE, root / PACKAGE, ignore=ignore)
    for name in INSTALLED_INSIDE:
        shutil.copytree(ROOT / name, root / PACKAGE / name, ignore=ignore)
    return root


@pytest.fixture(scope="module")
def graph(installed_layout) -> grimp.ImportGraph:
    """The import graph of the installed layout (every import, function-level ones included)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(installed_layout))
        patch.delitem(sys.modules, PACKAGE, raising=False)  # else find_spec answers with the checkout's package
        return grimp.build_graph(PACKAGE, cache_dir=None)


def strongly_connected_components(graph: grimp.ImportGraph) -> list[list[str]]:
    """Tarjan's algorithm over the modules; each component of 2+ modules holds a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            components.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return components


def a_cycle(graph: grimp.ImportGraph, component: list[str]) -> list[str]:
    """One import loop through the component's first module: first -> ... -> first."""
    first = component[0]
    following = min(m for m in graph.find_modules_directly_imported_by(first) if m in component)
    return [first, *graph.find_shortest_chain(importer=following, imported=first)]


def test_no_import_cycles(graph):
    assert len(graph.modules) > 50 and f"{PACKAGE}.cli.main" in graph.modules  # the whole layout was read
    cycles = [" -> ".join(a_cycle(graph, c)) for c in strongly_connected_components(graph) if len(c) > 1]
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_import_linter_layers_contract_holds(installed_layout):
    """pyproject.toml's contract, run on the installed layout (where cli, profiling and
    quantize exist: the checkout's own `lint-imports` sees them as absent optional layers)."""
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run(
        [str(lint_imports), str(ROOT / "pyproject.toml"), "--no-cache", "--no-logo"],
        capture_output=True,
        text=True,
        cwd=installed_layout,
        timeout=300,
        env={"PATH": str(lint_imports.parent), "PYTHONPATH": str(installed_layout)},
    )
    assert result.returncode == 0, result.stdout + result.stderr


def private_imports(path: Path) -> list[str]:
    """`from x import _name` lines of the file (dunders like __version__ are public)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                private = alias.name.startswith("_") and not (alias.name.startswith("__") and alias.name.endswith("__"))
                if private:
                    source = "." * node.level + (node.module or "")
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {source} import {alias.name}")
    return found


def test_no_module_imports_a_private_name_of_another():
    found = [line for folder in SOURCE_DIRS for path in python_files(folder) for line in private_imports(path)]
    assert not found, "private names imported:\n" + "\n".join(found)


def test_no_module_is_over_the_line_limit():
    counts = {path: len(path.read_text().splitlines()) for folder in SOURCE_DIRS for path in python_files(folder)}
    assert len(counts) > 50
    over = [f"{path.relative_to(ROOT)}: {n} lines" for path, n in sorted(counts.items()) if n > MAX_LINES]
    assert not over, f"modules over {MAX_LINES} lines:\n" + "\n".join(over)


def test_the_top_level_of_the_package_is_short():
    modules = sorted(p.name for p in (ROOT / PACKAGE).glob("*.py") if p.name != "__init__.py")
    assert len(modules) <= MAX_TOP_LEVEL_MODULES, f"{len(modules)} top-level modules: {modules}"


def imported_test_modules(path: Path) -> list[str]:
    """Imports of test modules (or conftest) by the file: test code is shared through helpers.py."""

    def is_test_module(name: str) -> bool:
        last = name.rsplit(".", 1)[-1]
        return last.startswith("test_") or last == "conftest"

    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            names = [module] if module else []
            if not module or module == "tests":  # from . import test_x / from tests import test_x
                names += [alias.name for alias in node.names]
        else:
            continue
        found += [f"{path.name}:{node.lineno}: {name}" for name in names if is_test_module(name)]
    return found


def test_no_test_module_imports_another():
    test_files = sorted(Path(__file__).parent.glob("*.py"))
    assert Path(__file__) in test_files
    found = [line for path in test_files for line in imported_test_modules(path)]
    assert not found, "test modules imported:\n" + "\n".join(found)
