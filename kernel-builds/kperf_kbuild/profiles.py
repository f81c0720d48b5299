"""Configuration profiles: which kernel configuration a build makes (docs/kernels.md).

- ``tiny``: tinyconfig plus the arch fragment. Fast to build: CI's and the
  lab's default.
- ``mm``: ``tiny`` plus what real machines' memory management passes
  through (memcg, block layer and swap on zram, NUMA, MGLRU) and the pinned
  choices that would otherwise move between releases (configs/profiles/).
- ``distro``: the distribution's own configuration for the tree's release
  (Debian's ``linux-config-<release>`` package, cloud flavour), with every
  module turned off, then the arch fragment and configs/profiles/distro.config.

A profile that does not fit a tree (no distribution configuration for its
release) is the kernel's result, not the build machine's fault:
ProfileMismatch carries the message the submitter reads.
"""

from __future__ import annotations

import lzma
import os
import re
from pathlib import Path

from kperf_kbuild import nofollow

PROFILES = ("tiny", "mm", "distro")
DEFAULT_PROFILE = "tiny"
# What a profile's kernels have that some benchmark grids need (Grid.needs):
# tinyconfig has no cgroups and no block layer; mm and distro have the
# memory controller, and zram for the swap the test kernel's init sets up.
PROFILE_FEATURES: dict[str, frozenset[str]] = {
    "tiny": frozenset(),
    "mm": frozenset({"memcg", "swap", "numa"}),
    "distro": frozenset({"memcg", "swap", "numa"}),
}

# The base every tiny and mm build starts from. Part of the config digest.
BASE_CONFIG = "tinyconfig"

PROFILES_DIR = Path(__file__).resolve().parent / "configs" / "profiles"

# Where Debian's linux-config-<release> packages put their files; a lab
# with configurations elsewhere says so with KPERF_DISTRO_CONFIGS.
DISTRO_CONFIGS_ENV = "KPERF_DISTRO_CONFIGS"
DISTRO_CONFIGS_DEFAULT = Path("/usr/src")
_DEBIAN_ARCH = {"x86_64": "amd64", "arm64": "arm64"}
# The flavour made for virtual machines: the fewest drivers of Debian's
# configurations, so the build stays in reasonable time.
DISTRO_FLAVOUR = "cloud"

# A kernel Makefile's first lines; a tree's Makefile longer than this before
# its version is not one kperf builds.
_MAKEFILE_HEAD_BYTES = 4096


class ProfileMismatch(Exception):
    """The profile does not fit this tree: a result of the kernel, with what to do."""


def check_profile(profile: str) -> None:
    if profile not in PROFILES:
        raise ValueError(f"unknown configuration profile {profile!r}; kperf has {', '.join(PROFILES)}")


def profile_fragments(profile: str, arch: str) -> tuple[Path, ...]:
    """The profile's fragments for `arch`, merged after the arch fragment, common part first."""
    check_profile(profile)
    if profile == DEFAULT_PROFILE:
        return ()
    names = (f"{profile}.config", f"{profile}-{arch}.config")
    return tuple(path for name in names if (path := PROFILES_DIR / name).is_file())


def tree_release(src: Path) -> str:
    """'6.1' from the tree's top Makefile (VERSION and PATCHLEVEL), read without following links."""
    try:
        head = nofollow.read_text(src / "Makefile")[:_MAKEFILE_HEAD_BYTES]
    except (OSError, UnicodeDecodeError) as e:
        raise ProfileMismatch(f"profile distro: cannot read the tree's Makefile for its release ({e})") from None
    version = re.search(r"^VERSION\s*=\s*(\d+)\s*$", head, re.MULTILINE)
    patchlevel = re.search(r"^PATCHLEVEL\s*=\s*(\d+)\s*$", head, re.MULTILINE)
    if not version or not patchlevel:
        raise ProfileMismatch("profile distro: the tree's Makefile names no VERSION and PATCHLEVEL")
    return f"{version[1]}.{patchlevel[1]}"


def distro_configs_root() -> Path:
    return Path(os.environ.get(DISTRO_CONFIGS_ENV) or DISTRO_CONFIGS_DEFAULT)


def distro_config_path(arch: str, release: str, root: Path | None = None) -> Path:
    debian = _DEBIAN_ARCH[arch]
    root = root or distro_configs_root()
    return root / f"linux-config-{release}" / f"config.{debian}_none_{DISTRO_FLAVOUR}-{debian}.xz"


def without_modules(config_text: str) -> str:
    """The configuration with every `=m` turned off: kperf boots no module but its own benchmark module."""
    return re.sub(r"^(CONFIG_\w+)=m$", r"# \1 is not set", config_text, flags=re.MULTILINE)


def distro_base(arch: str, src: Path, out: Path, root: Path | None = None) -> Path:
    """Write the distribution's configuration for the tree's release, modules off, to `out`."""
    release = tree_release(src)
    path = distro_config_path(arch, release, root)
    if not path.is_file():
        available = sorted(p.name.removeprefix("linux-config-") for p in path.parent.parent.glob("linux-config-*"))
        raise ProfileMismatch(
            f"profile distro: no Debian configuration for Linux {release} on {arch} on this build machine "
            f"(looked for {path}; found releases: {', '.join(available) or 'none'}). Debian packages it as "
            f"linux-config-{release} where it ships that release; otherwise choose the mm profile"
        )
    text = lzma.decompress(path.read_bytes()).decode("utf-8", errors="replace")
    out.write_text(without_modules(text))
    return out


def base_config(profile: str, arch: str, src: Path, scratch: Path) -> str:
    """What tuxmake's --kconfig gets for this profile: a make target, or the path of a file it copies."""
    check_profile(profile)
    if profile != "distro":
        return BASE_CONFIG
    return str(distro_base(arch, src, scratch / "distro-base.config"))
