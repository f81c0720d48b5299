"""No test module imports another: shared scenarios and fixtures live in fixture modules
(`*_fixtures.py`, `conftest.py`), so a test file can move or change without breaking three others
(seven modules once imported their helpers from test_tracking.py)."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _imported_modules(tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
    return out


def test_no_test_module_imports_another() -> None:
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    names = listed.stdout.split()
    test_files = [name for name in names if "/tests/" in f"/{name}" and Path(name).name.startswith("test_")]
    assert len(test_files) > 50, test_files
    offenders = {}
    for name in test_files:
        tree = ast.parse((ROOT / name).read_text())
        found = [m for m in _imported_modules(tree) if m.split(".")[-1].startswith("test_")]
        if found:
            offenders[name] = found
    assert not offenders, f"move what these import into a fixture module: {offenders}"
