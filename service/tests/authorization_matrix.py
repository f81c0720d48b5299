"""Who may see and change what: the decision for every route (test_authorization.py checks it).

Statuses are in PRINCIPALS order; the `lab` fixture of test_authorization.py
makes the objects whose ids the paths name.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.test import Client

from tests.conftest import AuthHeader

TREE = "https://git.example.org/linux.git"
PRINCIPALS = ("anonymous", "owner", "other", "staff", "runner")
# A real spawn run, so a submission's boots export as mmtests runs.
RAW = (Path(__file__).parents[2] / "runners" / "tests" / "data" / "spawn-native-x86_64.txt").read_text()
SHA = {
    name: str(i) * 40
    for i, name in enumerate(("alice-base", "alice-head", "bob-head", "alice-branch", "bob-branch", "ref-branch"), 1)
}


@dataclass
class Lab:
    """Two users (alice owns what the matrix targets, bob is the other), one staff user, one runner."""

    users: dict[str, User]
    tokens: dict[str, str]
    ids: dict[str, int | str] = field(default_factory=dict)

    def client(self, principal: str, path: str) -> tuple[Client, AuthHeader]:
        """A test client acting as the principal: bearer token on the API, a session on pages."""
        client = Client()
        if principal in self.users and not path.startswith("/api/"):
            client.force_login(self.users[principal])
            return client, {}
        token = self.tokens.get(principal)
        return client, ({"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {})

    def call(self, principal: str, method: str, path: str, body: Any = None) -> Any:
        client, headers = self.client(principal, path)
        data = json.dumps(body) if body is not None else ""
        return client.generic(method, path, data, content_type="application/json", **headers)


Body = Callable[[Lab], Any] | None


def import_body(lab: Lab) -> dict[str, Any]:
    sample = {"metric": "spawn-vmas-0", "iteration": 0, "value": 1.0}
    return {"kernel_sha": "c" * 40, "machine_class": "qemu-x86_64", "benchmarks": {"spawn": {"samples": [sample]}}}


# Statuses in PRINCIPALS order: anonymous, owner (alice), other (bob), staff, runner.
# 401: no credentials the route takes; 302: pages send to the login form;
# 404: not the principal's to see, answered as if missing; 403: seen, not theirs to change.
PUBLIC = (200,) * 5
SIGNED_IN = (401, 200, 200, 200, 401)
OWNER_API = (401, 200, 404, 200, 401)
OWNER_PAGE = (302, 200, 404, 200, 302)
PAGE = (302, 200, 200, 200, 302)
RUNNER = (401, 401, 401, 401, 200)
BUILDERS_ONLY = (401,) * 5

ROUTES: dict[str, tuple[str, str, Body, tuple[int, ...]]] = {
    # Django's admin, all of it: staff only (others are sent to its login form).
    "admin": ("GET", "/admin/", None, (302, 302, 302, 200, 302)),
    "login": ("GET", "/accounts/login/", None, PUBLIC),
    "logout": ("POST", "/accounts/logout/", None, (302,) * 5),
    # The API's schema and docs describe routes, not data.
    "api-v1:openapi-json": ("GET", "/api/v1/openapi.json", None, PUBLIC),
    "api-v1:openapi-view": ("GET", "/api/v1/docs", None, PUBLIC),
    "api-v1:api-root": ("GET", "/api/v1/", None, (404,) * 5),
    "api-v1:health": ("GET", "/api/v1/health", None, PUBLIC),
    "api-v1:issue_token": (
        "POST",
        "/api/v1/auth/token",
        lambda lab: {"username": "alice", "password": "alice-password-1"},
        (201,) * 5,
    ),
    # Lab-level: what any signed-in user needs to choose and judge.
    "api-v1:list_benchmarks": ("GET", "/api/v1/benchmarks", None, SIGNED_IN),
    "api-v1:list_runners": ("GET", "/api/v1/runners", None, SIGNED_IN),
    # One runner's health history; only staff change its health (docs/calibration.md).
    "api-v1:runner_checks": ("GET", "/api/v1/runners/qemu-1/checks", None, SIGNED_IN),
    "api-v1:release_runner": (
        "POST",
        "/api/v1/runners/qemu-1/release",
        lambda lab: {"note": "fixed"},
        (401, 403, 403, 200, 401),
    ),
    "api-v1:quarantine_runner": (
        "POST",
        "/api/v1/runners/qemu-1/quarantine",
        lambda lab: {"note": "fan"},
        (401, 403, 403, 200, 401),
    ),
    "api-v1:noise": ("GET", "/api/v1/noise?machine_class=qemu-x86_64", None, SIGNED_IN),
    "api-v1:create_submission": (
        "POST",
        "/api/v1/submissions",
        lambda lab: {"tree": TREE, "branch": "mm-fix", "base": "v6.1", "benchmarks": ["spawn"]},
        (401, 201, 201, 201, 401),
    ),
    "api-v1:list_submissions": ("GET", "/api/v1/submissions", None, SIGNED_IN),
    "api-v1:get_submission": ("GET", "/api/v1/submissions/{sub}", None, OWNER_API),
    "api-v1:submission_mmtests": (
        "GET",
        "/api/v1/submissions/{sub}/mmtests?side=head&benchmark=spawn",
        None,
        OWNER_API,
    ),
    "api-v1:import_mmtests": ("POST", "/api/v1/imports/mmtests", import_body, (401, 403, 403, 201, 401)),
    # Alice's two kernels: bob sees none of their boots, so there is nothing to compare for him.
    "api-v1:compare_kernels": (
        "GET",
        f"/api/v1/compare?machine_class=qemu-x86_64&benchmark=spawn&base={SHA['alice-base']}&head={SHA['alice-head']}",
        None,
        OWNER_API,
    ),
    # Re-posting alice's branch: bob may not take it over.
    "api-v1:track_branch": (
        "POST",
        "/api/v1/branches",
        lambda lab: {"tree": TREE, "branch": "alice-branch", "benchmarks": ["spawn"], "boots": 3},
        (401, 201, 409, 201, 401),
    ),
    "api-v1:list_branches": ("GET", "/api/v1/branches", None, SIGNED_IN),
    "api-v1:get_branch": ("GET", "/api/v1/branches/{branch}", None, OWNER_API),
    "api-v1:update_branch": ("PATCH", "/api/v1/branches/{branch}", lambda lab: {"enabled": False}, OWNER_API),
    "api-v1:poll_branch": ("POST", "/api/v1/branches/{branch}/poll", None, (401, 202, 404, 202, 401)),
    "api-v1:branch_series": (
        "GET",
        "/api/v1/branches/{branch}/series?machine_class=qemu-x86_64&benchmark=spawn",
        None,
        OWNER_API,
    ),
    # Triage: the owner (and a branch's watchers) and staff decide; others are told nothing (docs/triage.md).
    "api-v1:get_submission_triage": ("GET", "/api/v1/submissions/{sub}/triage", None, OWNER_API),
    "api-v1:triage_submission": (
        "POST",
        "/api/v1/submissions/{sub}/triage",
        lambda lab: {"state": "expected", "note": "a trade-off"},
        OWNER_API,
    ),
    "api-v1:get_change_point_triage": ("GET", "/api/v1/change-points/{cp}/triage", None, OWNER_API),
    "api-v1:triage_change_point": (
        "POST",
        "/api/v1/change-points/{cp}/triage",
        lambda lab: {"state": "fixed", "fixed_by": "abcdef1"},
        OWNER_API,
    ),
    "api-v1:list_regressions": ("GET", "/api/v1/regressions", None, SIGNED_IN),
    # Addresses for result mails are each user's own: asked, listed and forgotten per user (docs/submitting.md).
    "api-v1:list_addresses": ("GET", "/api/v1/addresses", None, SIGNED_IN),
    "api-v1:request_address": (
        "POST",
        "/api/v1/addresses",
        lambda lab: {"address": "reader@elsewhere.example"},
        (401, 201, 201, 201, 401),
    ),
    "api-v1:remove_address": ("DELETE", "/api/v1/addresses/dev@elsewhere.example", None, (401, 200, 404, 404, 401)),
    # The runner protocol: runner tokens only, and only the runner's own jobs and builds.
    "api-v1:heartbeat": ("POST", "/api/v1/runner/heartbeat", lambda lab: {}, RUNNER),
    "api-v1:claim": ("POST", "/api/v1/runner/claim", None, RUNNER),
    "api-v1:progress": ("POST", "/api/v1/runner/jobs/{leased}/progress", lambda lab: {"attempt": 1}, RUNNER),
    # 422: past authorization, the empty upload itself is refused.
    "api-v1:results": (
        "POST",
        "/api/v1/runner/jobs/{leased}/results",
        lambda lab: {"attempt": 1, "boots": []},
        (401, 401, 401, 401, 422),
    ),
    "api-v1:fail": (
        "POST",
        "/api/v1/runner/jobs/{leased}/fail",
        lambda lab: {"attempt": 1, "kind": "infra", "message": "lost the board"},
        RUNNER,
    ),
    "api-v1:artifact": ("GET", "/api/v1/runner/builds/{build}/artifacts/kernel", None, RUNNER),
    # The build-machine protocol and the mirrors it fetches from: build machines' tokens only
    # (none of these principals is one; what a build machine may do is in test_build_machines.py).
    "api-v1:builder-claim": ("POST", "/api/v1/builder/claim", lambda lab: {}, BUILDERS_ONLY),
    "api-v1:builder-progress": (
        "POST",
        "/api/v1/builder/builds/{build}/progress",
        lambda lab: {"attempt": 1},
        BUILDERS_ONLY,
    ),
    "api-v1:builder-upload": (
        "PUT",
        "/api/v1/builder/builds/{build}/artifacts/kernel?attempt=1&offset=0",
        None,
        BUILDERS_ONLY,
    ),
    "api-v1:builder-finish": (
        "POST",
        "/api/v1/builder/builds/{build}/finish",
        lambda lab: {"attempt": 1, "ok": True},
        BUILDERS_ONLY,
    ),
    "api-v1:builder-fail": (
        "POST",
        "/api/v1/builder/builds/{build}/fail",
        lambda lab: {"attempt": 1, "reason": "x"},
        BUILDERS_ONLY,
    ),
    "builder-git": ("GET", "/builder-git/{tree}/info/refs?service=git-upload-pack", None, BUILDERS_ONLY),
    # Web pages.
    "submission-list": ("GET", "/", None, PAGE),
    "submission-new": ("GET", "/submissions/new", None, PAGE),
    "submission-detail": ("GET", "/submissions/{sub}", None, OWNER_PAGE),
    "branch-list": ("GET", "/branches/", None, PAGE),
    "branch-detail": ("GET", "/branches/{branch}", None, OWNER_PAGE),
    "build-log": ("GET", "/builds/{build}/log", None, OWNER_PAGE),
    "job-console": ("GET", "/jobs/{job}/console", None, OWNER_PAGE),
    # Pictures follow their page (docs/plots.md).
    "submission-plot-metric": (
        "GET",
        "/submissions/{sub}/plots/metric.svg?{plot}&metric=spawn-vmas-0",
        None,
        OWNER_PAGE,
    ),
    "submission-plot-shape": ("GET", "/submissions/{sub}/plots/shape.svg?{plot}", None, OWNER_PAGE),
    "branch-plot-series": (
        "GET",
        "/branches/{branch}/plots/series.svg?class={class_id}&benchmark=spawn&clock=instructions&metric=spawn-vmas-0",
        None,
        OWNER_PAGE,
    ),
    # The lab page: every signed-in user reads it; staff release and quarantine (then back to the page).
    "lab": ("GET", "/lab/", None, PAGE),
    "lab-release": ("POST", "/lab/runners/qemu-1/release", None, (302, 403, 403, 302, 302)),
    "lab-quarantine": ("POST", "/lab/runners/qemu-1/quarantine", None, (302, 403, 403, 302, 302)),
    # A user's addresses; the page a confirmation link opens is for whoever reads the mail, signed in or not.
    "addresses": ("GET", "/addresses", None, PAGE),
    "address-confirm": ("GET", "/addresses/confirm/{confirm_token}", None, PUBLIC),
    # The triage form (no state given: back to the page saying so).
    "triage-change": ("POST", "/triage/{sub_triage}", None, (302, 302, 404, 302, 302)),
}
