"""Which configuration profile each build of an owner gets, and on which machine classes it is measured.

A machine class names the profile its kernels are built with
(MachineClass.profile, `tiny` unless an operator says otherwise). A
submission or tracked branch that names none gets each class's own; one
that names a profile gets it everywhere it is measured. A submission is
measured on every class of its arches (a class of another profile compares
its two sides only, and keeps them out of its history); a tracked branch
only on the classes of its profile, since a branch's commits are its history
(docs/kernels.md).
"""

from __future__ import annotations

from kperf.core.builds import queue
from kperf.core.models import KernelBuild, MachineClass, Tree
from kperf_kbuild.driver import DEFAULT_PROFILE, PROFILES, config_digest


class ProfileError(ValueError):
    """A profile a submitter or operator asked for that kperf cannot give; the message says why and what to do."""


def clean_profile(profile: str | None) -> str:
    """'' (each class's own) or a known profile name."""
    value = (profile or "").strip()
    if value and value not in PROFILES:
        raise ProfileError(
            f"unknown configuration profile {value!r}: choose {', '.join(PROFILES)}, "
            "or none for each machine class's own (docs/kernels.md)"
        )
    return value


def class_profile(mclass: MachineClass, chosen: str) -> str:
    return chosen or mclass.profile or DEFAULT_PROFILE


def needed(arch: str, chosen: str) -> list[str]:
    """The profiles an owner measured on `arch` needs built, in a stable order."""
    if chosen:
        return [chosen]
    found = {c.profile or DEFAULT_PROFILE for c in MachineClass.objects.filter(arch=arch)}
    return sorted(found or {DEFAULT_PROFILE})


def branch_classes(arch: str, chosen: str) -> list[MachineClass]:
    """The classes a tracked branch's commits of `arch` are measured on: its profile's, or every class."""
    classes = MachineClass.objects.filter(arch=arch).order_by("name")
    return list(classes.filter(profile=chosen) if chosen else classes)


def check_branch_profile(arches: list[str], chosen: str) -> None:
    """ProfileError when a branch's profile has no machine class to be measured on for some arch."""
    if not chosen:
        return
    for arch in arches:
        if not branch_classes(arch, chosen):
            raise ProfileError(
                f"no machine class of {arch} measures the {chosen} profile, so a tracked branch of it would "
                f"have no history: track it without a profile, or ask the operator for a class of that profile "
                f"(kperf-manage add_runner <runner> --machine-class <class> --arch {arch} --profile {chosen})"
            )


def need_build(tree: Tree, sha: str, arch: str, profile: str, scope: str) -> KernelBuild:
    """The build of (sha, arch) with `profile`, queued when it must run (see queue.need_build)."""
    return queue.need_build(tree, sha, arch, config_digest(arch, profile=profile), scope, profile=profile)


def pick(builds: list[KernelBuild], arch: str, profile: str) -> KernelBuild | None:
    """The build of `arch` and `profile` among an owner's builds; None for a class
    whose profile came after the owner's builds were chosen (it is not measured)."""
    return next((b for b in builds if b.arch == arch and b.profile == profile), None)
