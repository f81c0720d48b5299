"""Base and head built with different configurations: the page, the API and the mail list the differing options.

Two releases' Kconfig defaults differ (6.12's tinyconfig turns on
CONFIG_SLUB_TINY, 6.1's has no such symbol), so a comparison can measure two
allocators without a word; kperf reads each build's final .config (its
"config" artifact) and says where they differ (kperf.core.builds.configs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kperf.core.builds import artifacts, configs
from kperf.core.mail import alerts
from kperf.core.models import KernelBuild, Submission

from tests.lab_fixtures import submission_page
from tests.mail_fixtures import Inbox, finished_submission, real_smtp_backend  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db

COMMON = "# Linux/x86 6.1 Kernel Configuration\nCONFIG_SMP=y\nCONFIG_SLUB=y\n# CONFIG_SLOB is not set\n"
BASE = COMMON + "CONFIG_HZ=250\n# CONFIG_TRANSPARENT_HUGEPAGE_MADVISE is not set\n"
HEAD = COMMON + 'CONFIG_HZ=1000\nCONFIG_SLUB_TINY=y\nCONFIG_CMDLINE="console=ttyS0 loglevel=8 quiet"\n'


def finished_with_configs(alice: Any, mclass: Any, runner: Any, tmp: Path, texts: dict[str, str]) -> Submission:
    """A finished submission whose builds kept these .config texts (per side) as their "config" artifact."""

    def store(sub: Submission) -> None:
        for link in sub.submission_builds.select_related("build"):
            build = link.build
            build.artifacts["config"] = artifacts.put_bytes(f"test/{build.pk}/config", texts[link.side].encode())
            build.save(update_fields=["artifacts"])

    return finished_submission(alice, mclass, runner, tmp, head_level=1000.0, prepare=store)


def test_differing_configurations_are_listed_on_the_page_in_the_api_and_in_the_mail(
    smtp: Inbox,
    alice: Any,
    alice_api: Any,
    qemu_class: Any,
    runner_api: Any,
    tmp_path: Path,
) -> None:
    user_api, runner = alice_api, runner_api[1]
    sub = finished_with_configs(alice, qemu_class, runner, tmp_path, {"base": BASE, "head": HEAD})

    detail = user_api.get(f"/submissions/{sub.pk}").json()
    assert detail["config_differences"] == {
        "x86_64": [
            {"option": "CONFIG_CMDLINE", "base": "n", "head": '"console=ttyS0 loglevel=8 quiet"'},
            {"option": "CONFIG_HZ", "base": "250", "head": "1000"},
            {"option": "CONFIG_SLUB_TINY", "base": "n", "head": "y"},
        ]
    }
    # Read from the storage once, then kept on the build.
    assert all(b.config_options for b in KernelBuild.objects.filter(submission_builds__submission=sub))

    page = submission_page(alice, sub)
    assert 'id="config-differences-x86_64" data-options="3"' in page
    assert '<tr data-option="CONFIG_SLUB_TINY"><td><code>CONFIG_SLUB_TINY</code></td><td>n</td><td>y</td></tr>' in page

    assert alerts.send_pending() == 1
    [(_, msg)] = smtp.messages
    body = msg.get_content().replace("\r\n", "\n")
    assert "Warning: the base and head kernels for x86_64 were built with different\nconfigurations" in body
    assert "  CONFIG_SLUB_TINY  base n, head y" in body
    assert '  CONFIG_CMDLINE    base n, head "console=ttyS...' in body
    assert body.index("Warning:") < body.index("spawn on qemu-x86_64")
    assert max(len(line) for line in body.splitlines()) <= 80


def test_the_same_configuration_says_nothing_and_an_unreadable_one_is_read_again_later(
    smtp: Inbox,
    alice: Any,
    alice_api: Any,
    qemu_class: Any,
    runner_api: Any,
    tmp_path: Path,
) -> None:
    user_api, runner = alice_api, runner_api[1]
    sub = finished_with_configs(alice, qemu_class, runner, tmp_path, {"base": BASE, "head": BASE})
    assert user_api.get(f"/submissions/{sub.pk}").json()["config_differences"] == {"x86_64": []}
    assert "config-differences" not in submission_page(alice, sub)
    assert alerts.send_pending() == 1
    assert "Warning" not in smtp.messages[0][1].get_content()

    # A .config the storage cannot give back now is not kept as empty: nothing is said, and it is read next time.
    head = KernelBuild.objects.get(submission_builds__submission=sub, submission_builds__side="head")
    head.config_options = None
    head.artifacts["config"] = {**head.artifacts["config"], "key": "test/missing/config"}
    head.save(update_fields=["config_options", "artifacts"])
    assert configs.submission_differences(sub) == {}
    head.refresh_from_db()
    assert head.config_options is None


def test_control_characters_of_a_submitted_trees_config_are_not_shown(
    alice: Any, alice_api: Any, qemu_class: Any, runner_api: Any, tmp_path: Path
) -> None:
    """The .config comes out of the submitter's tree: a terminal escape in a value reaches no page or mail."""
    escape = COMMON + 'CONFIG_CMDLINE="\x1b[2Jquiet"\n'
    sub = finished_with_configs(alice, qemu_class, runner_api[1], tmp_path, {"base": BASE, "head": escape})
    diffs = alice_api.get(f"/submissions/{sub.pk}").json()["config_differences"]["x86_64"]
    assert {"option": "CONFIG_CMDLINE", "base": "n", "head": '"?[2Jquiet"'} in diffs


def test_two_releases_spelling_the_same_size_of_core_structures_do_not_differ() -> None:
    # 6.1's full-size kernel (bool BASE_FULL, int BASE_SMALL) against 6.12's
    # (only a bool BASE_SMALL): the same choice, so no warning.
    v61 = {"CONFIG_BASE_FULL": "y", "CONFIG_BASE_SMALL": "0", "CONFIG_SLUB": "y"}
    v612 = {"CONFIG_BASE_SMALL": "n", "CONFIG_SLUB": "y"}
    assert configs.differences(v61, v612) == []
    # 6.1 left small by tinyconfig, against 6.12's full: a difference, named both ways.
    small = {**v61, "CONFIG_BASE_FULL": "n", "CONFIG_BASE_SMALL": "1"}
    assert configs.differences(small, v612) == [
        {"option": "CONFIG_BASE_FULL", "base": "n", "head": "y"},
        {"option": "CONFIG_BASE_SMALL", "base": "y", "head": "n"},
    ]


def test_choices_are_listed_before_what_the_architecture_and_compiler_can_do() -> None:
    base = {"CONFIG_ARCH_HAS_X": "y", "CONFIG_CC_HAS_Y": "y", "CONFIG_X86_KERNEL_IBT": "n", "CONFIG_HZ": "250"}
    head = {"CONFIG_ARCH_HAS_X": "n", "CONFIG_CC_HAS_Y": "n", "CONFIG_X86_KERNEL_IBT": "y", "CONFIG_HZ": "1000"}
    assert [d["option"] for d in configs.differences(base, head)] == [
        "CONFIG_HZ",
        "CONFIG_X86_KERNEL_IBT",
        "CONFIG_ARCH_HAS_X",
        "CONFIG_CC_HAS_Y",
    ]
