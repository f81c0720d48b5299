"""What the base and head kernels of a submission were configured with, and where they differ.

Two kernels built from different configurations are two experiments: a
release that turns on CONFIG_SLUB_TINY where the other has SLUB measures
another allocator, not the code change (docs/submitting.md, "When the
configurations differ"). kperf asks for the same base and fragments on
both sides, but Kconfig's defaults move between releases and a patch may
change them, so the final .config of each build (its "config" artifact) is
read once, kept on the build, and the options whose values differ are
shown on the page, in the API and in the result mail.
"""

from __future__ import annotations

import logging

from typing_extensions import TypedDict

from kperf.core.builds import artifacts
from kperf.core.models import KernelBuild, Submission, SubmissionBuild
from kperf_kbuild.kconfig import parse_fragment, release_neutral

log = logging.getLogger(__name__)


class OptionDifference(TypedDict):
    option: str
    # "y", "m", "n" (not set, or not a symbol of that tree) or the value.
    base: str
    head: str


def options(build: KernelBuild) -> dict[str, str] | None:
    """The build's final .config, read from its artifact once and kept on the row; None when it has none.

    A .config that cannot be read now (the storage is down) is not kept, so
    it is read again next time.
    """
    if build.config_options is not None:
        return dict(build.config_options)
    meta = build.artifacts.get("config")
    if not meta:
        return None
    try:
        text = artifacts.read_checked(meta, f"the .config of build {build.pk}").decode("utf-8", "replace")
        # The .config came out of the submitter's tree: a value with control
        # characters (a terminal escape for whoever reads the mail) is shown
        # with those replaced.
        parsed = {name: _printable(value) for name, value in parse_fragment(text).items()}
    except artifacts.ArtifactUnavailable as e:
        log.warning("build %s: %s", build.pk, e)
        return None
    except ValueError as e:
        log.warning("build %s: its config artifact is not a .config: %s", build.pk, e)
        return None
    KernelBuild.objects.filter(pk=build.pk).update(config_options=parsed)
    build.config_options = parsed
    return parsed


def _printable(value: str) -> str:
    return value if value.isprintable() else "".join(c if c.isprintable() else "?" for c in value)


# What the architecture or the compiler can do, not a choice of what to build:
# listed after the choices, so that a mail's first lines are the ones that
# decide what was measured (two releases differ in dozens of these).
_CAPABILITY_PREFIXES: tuple[str, ...] = tuple(
    f"CONFIG_{p}_" for p in ("ARCH", "HAVE", "CC", "AS", "LD", "TOOLCHAIN", "RUSTC", "PAHOLE", "GCC", "CLANG")
)


def differences(base: dict[str, str], head: dict[str, str]) -> list[OptionDifference]:
    """Options whose values differ, choices first and then capabilities, each by name; an option
    one side lacks reads as not set ("n"), as in Kconfig.

    Both sides are read release-neutrally (kconfig.release_neutral): 6.1's
    int BASE_SMALL=0 and 6.12's unset bool are the same choice.
    """
    base, head = release_neutral(base), release_neutral(head)
    return [
        OptionDifference(option=name, base=base.get(name, "n"), head=head.get(name, "n"))
        for name in sorted(base.keys() | head.keys(), key=lambda n: (n.startswith(_CAPABILITY_PREFIXES), n))
        if base.get(name, "n") != head.get(name, "n")
    ]


def submission_differences(sub: Submission) -> dict[str, list[OptionDifference]]:
    """Per arch whose base and head are both built with a .config: the options that differ (arches alike: [])."""
    sides: dict[str, dict[str, KernelBuild]] = {}
    links = SubmissionBuild.objects.filter(submission=sub, build__status=KernelBuild.Status.DONE)
    for link in links.select_related("build"):
        sides.setdefault(link.build.arch, {})[link.side] = link.build
    out: dict[str, list[OptionDifference]] = {}
    for arch, builds in sorted(sides.items()):
        if "base" not in builds or "head" not in builds:
            continue
        base, head = options(builds["base"]), options(builds["head"])
        if base is not None and head is not None:
            out[arch] = differences(base, head)
    return out
