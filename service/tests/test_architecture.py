"""Layering rules that review alone would let slip."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "kperf" / "core"


def test_the_statistics_import_without_django_or_celery() -> None:
    probe = (
        "import sys, kperf.stats, kperf.stats.abtest, kperf.stats.changepoints, kperf.stats.builds;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'celery', 'kombu'));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_runner_and_its_tests_never_import_the_service() -> None:
    """The agent speaks to the service over HTTP only (docs/runner-protocol.md); its tests too."""
    runners = CORE.parents[2] / "runners"
    offenders = []
    for path in runners.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            if any(n.split(".")[0] in ("kperf", "django", "celery") for n in names):
                offenders.append(str(path.relative_to(runners)))
    assert offenders == []


def test_the_domain_never_imports_the_task_module() -> None:
    """Tasks import the domain, never the reverse: the domain names tasks (kperf.core.lifecycle.dispatch)."""
    offenders = []
    for path in CORE.rglob("*.py"):
        if "tasks" in path.relative_to(CORE).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module == "kperf.core"
                and any(a.name == "tasks" for a in node.names)
            ):
                offenders.append(str(path.relative_to(CORE)))
            if isinstance(node, ast.ImportFrom) and node.module == "kperf.core.tasks":
                offenders.append(str(path.relative_to(CORE)))
    assert offenders == []


def _is_alert_status(value: ast.expr | None) -> bool:
    """`Alert.Status.X` (or `models.Alert.Status.X`): the mail outbox's own status, sent again from the admin."""
    return value is not None and "Alert.Status." in ast.unparse(value)


def test_every_status_change_goes_through_the_state_table() -> None:
    """No module assigns a status of a submission, commit, build or job by hand: only
    lifecycle/states.py does, writing the StatusChange row. The one other status, the
    mail outbox's (Alert), is told apart by its value, not by exempting files."""
    offenders = []
    for path in CORE.rglob("*.py"):
        if path.relative_to(CORE).as_posix() == "lifecycle/states.py" or "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and not _is_alert_status(node.value):
                for target in node.targets:
                    # An exception's own HTTP status (self.status) is not a row's.
                    owner = getattr(target, "value", None)
                    is_self = isinstance(owner, ast.Name) and owner.id == "self"
                    if isinstance(target, ast.Attribute) and target.attr == "status" and not is_self:
                        offenders.append(f"{path.relative_to(CORE)}:{node.lineno}")
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", "") == "update"
                and any(k.arg == "status" and not _is_alert_status(k.value) for k in node.keywords)
            ):
                offenders.append(f"{path.relative_to(CORE)}:{node.lineno}")
    assert offenders == []
