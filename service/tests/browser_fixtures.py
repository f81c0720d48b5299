"""Shared test scenarios, moved out of test_browser.py so no test module imports another."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright
from playwright.sync_api import Error as PlaywrightError

from tests.finding_fixtures import REGRESSED, finished  # noqa: F401 (a fixture)

CHROMIUM = os.environ.get("KPERF_CHROMIUM", "/usr/bin/chromium")


PASSWORD = "alice-password-1"  # the `alice` fixture's


class Chromium:
    """The module's browser, or why it could not be started.

    `new_page` fails the calling test (rather than erroring every test's
    setup, or skipping) when Chromium is missing, with what to install."""

    def __init__(self, browser: Browser | None, problem: str = "") -> None:
        self.browser = browser
        self.problem = problem
        self.contexts: list[BrowserContext] = []

    def new_page(self, base_url: str) -> Page:
        if self.browser is None:
            pytest.fail(self.problem)
        for old in self.contexts:
            old.close()
        context = self.browser.new_context(base_url=base_url)
        context.set_default_timeout(15_000)
        self.contexts = [context]
        return context.new_page()

    def settle_and_close(self) -> None:
        """Wait until no page has a request in flight, then close them all.

        A page the test is done with may still be loading its plots; the live server answering
        it reads the tables that the flush after the test truncates, and the two deadlocked once
        (the flush's TRUNCATE against a plot's SELECT). So the pages finish first."""
        for context in self.contexts:
            for page in context.pages:
                with contextlib.suppress(PlaywrightError):
                    page.wait_for_load_state("networkidle", timeout=30_000)
            context.close()
        self.contexts = []


@pytest.fixture(scope="module")
def chromium() -> Iterator[Chromium]:
    with pytest.MonkeyPatch.context() as mp:
        # Playwright's sync API keeps an asyncio loop running in this thread,
        # which makes Django refuse ORM calls from it (the tests' own set-up
        # and the database flush after each test). Nothing here is async: the
        # browser waits for the live server, which runs in its own thread.
        mp.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        # A loaded CI machine can take a while over the first page of a run.
        expect.set_options(timeout=10_000)
        with sync_playwright() as pw:
            if not Path(CHROMIUM).is_file():
                yield Chromium(
                    None,
                    f"the browser tests need Chromium at {CHROMIUM} and it is not there: "
                    "install Debian's package with `apt-get install chromium` (.ci/run does), "
                    "or point KPERF_CHROMIUM at a Chromium binary",
                )
                return
            try:
                browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
            except PlaywrightError as e:
                yield Chromium(
                    None,
                    f"Chromium at {CHROMIUM} did not start: install or repair Debian's package with "
                    f"`apt-get install chromium` (.ci/run does). Playwright said:\n{e}",
                )
                return
            try:
                yield Chromium(browser)
            finally:
                browser.close()


@pytest.fixture(autouse=True)
def pages_settled_before_the_flush(chromium: Chromium, transactional_db: Any) -> Iterator[None]:
    """Every test's pages closed before its database is flushed: this fixture is set up after the
    database's, so it is torn down before it (Chromium.settle_and_close says why)."""
    yield
    chromium.settle_and_close()


def log_in(page: Page, username: str = "alice", password: str = PASSWORD) -> None:
    """Open the front page, get sent to the login form, and log in through it."""
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/$"))
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(r"^http://[^/]+/$"))
    expect(page.get_by_role("heading", name="Submissions")).to_be_visible()
    expect(page.locator("header .who")).to_contain_text(username)
