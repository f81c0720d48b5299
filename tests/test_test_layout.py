"""Tests laid out like the code, and no test module importing another.

No test module imports another: shared scenarios and fixtures live in fixture modules
(`*_fixtures.py`, `conftest.py`), so a test file can move or change without breaking three others
(seven modules once imported their helpers from test_tracking.py).

The service's tests mirror its packages: the tests of `kperf.core.mail` are in
service/tests/core/mail/, those of `kperf.stats` in service/tests/stats/, and service/tests/ itself
holds the tests of kperf as a whole and of its top-level modules (`kperf.up`, `kperf.web_guard`, ...)
beside what the folders share: conftest.py and the fixture modules, imported as `tests.<module>`
(pytest.ini, docs/development.md, "Where tests live").
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
SERVICE_TESTS = PurePosixPath("service/tests")
KPERF = ROOT / "service" / "kperf"


def _listed() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [name for name in listed.stdout.split() if (ROOT / name).is_file()]


def _imported_modules(tree: ast.AST) -> list[str]:
    """Every module an import can bind: `from a import b` may bind the module a.b."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            out.append(base)
            out += [f"{base}.{alias.name}" if node.module else base + alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
    return out


def _is_test_module(name: str) -> bool:
    return PurePosixPath(name).name.startswith("test_")


def _service_test_files() -> list[PurePosixPath]:
    return [PurePosixPath(name) for name in _listed() if PurePosixPath(name).is_relative_to(SERVICE_TESTS)]


def _is_module(dotted: str) -> bool:
    path = KPERF.parent / dotted.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _code_modules(tree: ast.AST) -> list[str]:
    """The kperf modules a test imports: `from kperf.core import models` is kperf.core.models,
    `from kperf.core.models import Job` is kperf.core.models."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                below = f"{node.module}.{alias.name}"
                out.append(below if _is_module(below) else node.module)
        elif isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
    return out


def _names(package: str, module: str) -> bool:
    """`module` is the package itself or a module directly in it; a subpackage has its own folder."""
    if module == package:
        return True
    parent, _, last = module.rpartition(".")
    return parent == package and (KPERF.parent / package.replace(".", "/") / f"{last}.py").is_file()


def test_no_test_module_imports_another() -> None:
    test_files = [name for name in _listed() if "/tests/" in f"/{name}" and _is_test_module(name)]
    assert len(test_files) > 50, test_files
    offenders = {}
    for name in test_files:
        tree = ast.parse((ROOT / name).read_text())
        found = [m for m in _imported_modules(tree) if m.split(".")[-1].startswith("test_")]
        if found:
            offenders[name] = found
    assert not offenders, f"move what these import into a fixture module: {offenders}"


def test_every_service_test_folder_mirrors_a_package_of_kperf() -> None:
    """service/tests/<path>/ is a package (pytest's prepend import mode names its modules
    tests.<path>.<module>, so two folders may hold modules of one name) for the package
    service/kperf/<path>/; the modules tests share stay in service/tests itself, where every
    folder imports them from."""
    files = _service_test_files()
    folders = {name.parent for name in files} - {SERVICE_TESTS}
    assert len(folders) > 5, folders
    not_packages = sorted(str(f) for f in folders if f / "__init__.py" not in files)
    assert not not_packages, f"add an __init__.py to: {not_packages}"
    no_code = sorted(str(f) for f in folders if not (KPERF / f.relative_to(SERVICE_TESTS) / "__init__.py").is_file())
    assert not no_code, f"these folders mirror no package of service/kperf: {no_code}"
    helpers = sorted(
        str(name)
        for name in files
        if name.parent != SERVICE_TESTS and name.name != "__init__.py" and not _is_test_module(name.name)
    )
    assert not helpers, f"shared modules live in service/tests, beside conftest.py: {helpers}"


def test_every_service_test_module_names_the_package_of_its_folder() -> None:
    """A module in service/tests/core/mail/ imports kperf.core.mail or one of its modules, or its
    docstring names them (a test that drives the package from outside, over HTTP or a command,
    says which code it tests). The modules of service/tests itself test kperf as a whole."""
    checked, strays = 0, {}
    for name in _service_test_files():
        if name.parent == SERVICE_TESTS or not _is_test_module(name.name):
            continue
        package = "kperf." + ".".join(name.parent.relative_to(SERVICE_TESTS).parts)
        tree = ast.parse((ROOT / str(name)).read_text())
        docstring = ast.get_docstring(tree) or ""
        mentioned = re.findall(r"\bkperf(?:\.\w+)+", docstring)
        checked += 1
        if not any(_names(package, module) for module in _code_modules(tree) + mentioned):
            strays[str(name)] = package
    assert checked > 50, checked
    assert not strays, f"move each to the folder of the package it tests, or name that package: {strays}"
