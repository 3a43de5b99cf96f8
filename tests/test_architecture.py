"""The import rules of docs/architecture.md hold: the layers, and no cycle inside any package.

import-linter builds the import graph from the source (imports inside functions included), so a
lazy import that goes upward breaks this test as surely as a top-level one.
"""

from __future__ import annotations

import ast
import contextlib
import io
from pathlib import Path

from conftest import REPO


def test_import_contracts_are_kept():
    from importlinter.cli import lint_imports

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True)
    assert code == 0, out.getvalue()[-3000:]


def test_shared_run_types_import_nothing_of_the_project():
    """RunSpec, Step, Mount and the Reporter sit below every package that uses them."""
    for name in ("spec.py", "events.py", "ids.py"):
        tree = ast.parse((REPO / "src" / "madengine" / "core" / name).read_text())
        imported = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module]
        imported += [a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names]
        assert not [m for m in imported if m.startswith("madengine")], (name, imported)


def test_the_core_never_prints_or_exits():
    """Only the CLI and programs (modules run as ``python -m``: the portable harness and cell code
    that run inside containers) print or exit."""
    source = REPO / "src" / "madengine"
    offenders = []
    for path in source.rglob("*.py"):
        text = path.read_text()
        if path.is_relative_to(source / "cli") or path.is_relative_to(source / "scripts") or \
                path.name == "__main__.py" or 'if __name__ == "__main__":' in text:
            continue
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else \
                    f"{getattr(func.value, 'id', '')}.{func.attr}" if isinstance(func, ast.Attribute) else ""
                if name in ("print", "sys.exit", "exit"):
                    offenders.append(f"{path.relative_to(source)}:{node.lineno} {name}")
    assert not offenders, offenders
