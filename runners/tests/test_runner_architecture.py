"""The runner installs on minimal bare-metal root filesystems: Python 3.9+ and
the standard library, nothing else, and never the service."""

from __future__ import annotations

import ast
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kperf_runner

PACKAGE = Path(kperf_runner.__file__).resolve().parent
MODULES = sorted(PACKAGE.rglob("*.py"))


def _imported_top_levels(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module.split(".")[0])
    return names


def test_the_package_has_the_modules_the_service_and_docs_name() -> None:
    names = {path.relative_to(PACKAGE).as_posix() for path in MODULES}
    for expected in (
        "benchmarks/__init__.py",
        "benchmarks/base.py",
        "initramfs.py",
        "toolchain.py",
        "console.py",
        "client.py",
        "agent.py",
        "cli.py",
        "backends/__init__.py",
        "backends/qemu.py",
    ):
        assert expected in names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_every_module_imports_only_the_standard_library_and_itself(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    foreign = [
        name for name in _imported_top_levels(tree) if name not in sys.stdlib_module_names and name != "kperf_runner"
    ]
    assert foreign == [], f"{path.name} imports {foreign}: the runner is stdlib-only"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_every_module_parses_as_python_3_9(path: Path) -> None:
    source = path.read_text()
    tree = ast.parse(source, filename=str(path), feature_version=(3, 9))
    # `X | None` in an annotation is only safe on 3.9 when it is never
    # evaluated, which is what the __future__ import guarantees.
    if any(_has_union(annotation) for annotation in _annotations(tree)):
        assert "from __future__ import annotations" in source, path.name


def _annotations(tree: ast.AST) -> list[ast.expr]:
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.AnnAssign, ast.arg)) and node.annotation is not None:
            found.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns:
            found.append(node.returns)
    return found


def _has_union(annotation: ast.expr) -> bool:
    return any(isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr) for node in ast.walk(annotation))


def _python39() -> str | None:
    candidates = [shutil.which("python3.9") or ""]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.9*/bin/python3.9")))
    for candidate in candidates:
        if candidate and subprocess.run([candidate, "-V"], capture_output=True, check=False).returncode == 0:
            return candidate
    return None


def test_the_package_imports_and_runs_on_python_3_9(tmp_path: Path) -> None:
    """Where a Python 3.9 is installed, import everything and run the parsers on it."""
    python = _python39()
    if python is None:
        pytest.skip("no python3.9 on this machine")
    modules = [
        "kperf_runner." + path.relative_to(PACKAGE).with_suffix("").as_posix().replace("/", ".")
        for path in MODULES
        if path.name != "__init__.py"
    ]
    script = "\n".join(
        [
            "import importlib, sys",
            *(f"importlib.import_module({name!r})" for name in modules),
            "from kperf_runner.benchmarks import resolve_params, get_benchmark",
            "from kperf_runner.console import parse_console",
            "p = resolve_params('spawn', 'quick', {'extra_vmas': '0,5', 'iterations': 1})",
            "out = 'spawn vmas=0 iteration=0 count=10 elapsed=1.000000\\n'",
            "out += 'Process Creation  126.0  10.0  0.8\\n'",
            "out += 'spawn vmas=5 iteration=0 count=5 elapsed=1.000000\\n'",
            "out += 'Process Creation  126.0  5.0  0.4\\n'",
            "assert len(get_benchmark('spawn').parse(out, p)) == 2",
            "assert parse_console('KPERF-ENV cpus=2\\nKPERF-DONE\\n').done",
            "from kperf_runner.cli import main",
            "sys.exit(main(['version']))",
        ]
    )
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    run = subprocess.run(
        [python, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("kperf-runner ")
