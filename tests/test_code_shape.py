"""No file over 600 lines, and no product function over 80: a reader sees a module, and a function, whole."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The product's code; test tooling (testing/kperf_testing) is held to the file limit only.
PRODUCT = ("service/kperf/", "runners/kperf_runner/", "kernel-builds/kperf_kbuild/", "dashboards/")
TOOLING = ("/migrations/", "/tests/")


def python_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [name for name in listed.stdout.split() if (ROOT / name).is_file()]


def test_no_python_file_is_over_600_lines() -> None:
    long = {name: n for name in python_files() if (n := len((ROOT / name).read_text().splitlines())) > 600}
    assert not long, f"split these by what they are about: {long}"


def test_no_product_function_is_over_80_lines() -> None:
    long = []
    for name in python_files():
        if not name.startswith(PRODUCT) or any(part in name for part in TOOLING):
            continue
        for node in ast.walk(ast.parse((ROOT / name).read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.end_lineno is None:
                continue
            if (length := node.end_lineno - node.lineno + 1) > 80:
                long.append(f"{name}:{node.lineno} {node.name} ({length} lines)")
    assert not long, long


def test_every_product_logger_is_named_after_its_module() -> None:
    """`logging.getLogger(__name__)`: a log line's name says which module wrote it, and a name
    written by hand drifts from the module it was moved to."""
    named = []
    for name in python_files():
        if not name.startswith(PRODUCT) or any(part in name for part in TOOLING):
            continue
        for node in ast.walk(ast.parse((ROOT / name).read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "getLogger"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                named.append(f"{name}:{node.lineno} getLogger({node.args[0].value!r})")
    assert not named, named
