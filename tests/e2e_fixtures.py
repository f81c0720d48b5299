"""Shared test scenarios, moved out of test_e2e.py so no test module imports another."""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests

from kperf_testing.kbuild import (
    kernel_tree_path,
    stack_build_root,
    stack_mirror,
)
from kperf_testing.plugin import redis_stack_db
from kperf_testing.stack import RunningStack, running_stack

TIMEOUT_S = 40 * 60


def stack_env(tmp_path: Path, cache: Path) -> tuple[dict[str, str], Callable[[], None]]:
    """Environment for a stack of our own, and how to drop its database afterwards."""
    env = {"KPERF_CCACHE_DIR": str(cache / "ccache"), "KPERF_LOG_LEVEL": "INFO"}
    # The lab's mirror and warm build trees, where the fixture kernels were
    # built (kperf_testing.kbuild): the stack's service builds the base and
    # the fixture branches the test cache has built already in those trees,
    # recompiling nothing, and its other heads incrementally from them.
    env["KPERF_MIRROR_ROOT"] = str(stack_mirror(kernel_tree_path(cache), cache).parent)
    env["KPERF_BUILD_ROOT"] = str(stack_build_root(cache))
    # The series test copies its result to a list, as a developer would:
    # an address this lab allows (docs/security.md, "Mail").
    env["KPERF_MAIL_ALLOWED_RECIPIENTS"] = "linux-mm@example.org"
    original = os.environ.get("KPERF_ORIGINAL_DATABASE_URL", "")

    def nothing() -> None:
        pass

    drop: Callable[[], None] = nothing
    if original.startswith("postgres://") and "%2F" not in original:
        # A real server: a fresh database of our own on it.
        name = f"kperf_e2e_{os.getpid()}"
        admin = re.sub(r"/[^/]*$", "/postgres", original)

        def sql(statement: str) -> None:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(statement)

        sql(f'DROP DATABASE IF EXISTS "{name}"')
        sql(f'CREATE DATABASE "{name}"')
        env["DATABASE_URL"] = re.sub(r"/[^/]*$", f"/{name}", original)

        def drop_it() -> None:
            sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

        drop = drop_it
    else:
        env["DATABASE_URL"] = ""  # kperf-up starts its own embedded server
    broker = os.environ.get("CELERY_BROKER_URL", "")
    if broker.startswith("redis://"):
        import redis

        env["CELERY_BROKER_URL"] = re.sub(r"/\d*$", f"/{redis_stack_db()}", broker)
        redis.Redis.from_url(env["CELERY_BROKER_URL"]).flushdb()
    else:
        env["CELERY_BROKER_URL"] = ""  # kperf-up keeps the queues in its database
    return env, drop


def wait_final(stack: RunningStack, sub_id: int) -> dict[str, Any]:
    deadline = time.monotonic() + TIMEOUT_S
    last = ""
    while time.monotonic() < deadline:
        d: dict[str, Any] = stack.api("GET", f"/submissions/{sub_id}").json()
        state = f"{d['status']} {[(b['side'], b['status'], b['phase']) for b in d['builds']]} {d.get('progress')}"
        if state != last:
            print(f"submission {sub_id}: {state}", flush=True)
            last = state
        if d["status"] in ("done", "failed"):
            return d
        # A second, not five: on average half the poll is added to every
        # submission's wait, and a run waits for about twenty of them.
        time.sleep(1)
    raise AssertionError(
        f"submission {sub_id} not finished after {TIMEOUT_S} s: {last}\n"
        f"builds log:\n{stack.log('worker-builds')[-3000:]}\nrunner log:\n{stack.log('runner')[-3000:]}"
    )


def verdicts(d: dict[str, Any]) -> dict[str, str]:
    return {m["metric"]: m["verdict"] for c in d["comparisons"] for m in c["metrics"]}


def web_page(stack: RunningStack, path: str) -> str:
    s = requests.Session()
    s.get(f"{stack.url}/accounts/login/", timeout=30)
    s.post(
        f"{stack.url}/accounts/login/",
        data={
            "username": stack.creds["admin_user"],
            "password": stack.creds["admin_password"],
            "csrfmiddlewaretoken": s.cookies["csrftoken"],
        },
        headers={"Referer": f"{stack.url}/accounts/login/"},
        timeout=30,
    )
    resp = s.get(f"{stack.url}{path}", timeout=30)
    assert resp.status_code == 200 and "Log in" not in resp.text
    return resp.text


@contextlib.contextmanager
def own_stack(
    tmp_path_factory: pytest.TempPathFactory, kperf_cache: Path, name: str, args: list[str] | None = None
) -> Iterator[RunningStack]:
    """A stack with a database of its own (kperf-up given `args`), dropped afterwards."""
    tmp = tmp_path_factory.mktemp(name)
    env, drop_database = stack_env(tmp, kperf_cache)
    try:
        with running_stack(tmp / "home", env, args) as running:
            yield running
    finally:
        drop_database()
