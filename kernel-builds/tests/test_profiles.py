"""Unit tests of the configuration profiles (kperf_kbuild.profiles): their
fragments, digests, and the distro profile's base. No compiler."""

from __future__ import annotations

import lzma
from pathlib import Path

import pytest

from kperf_kbuild import profiles
from kperf_kbuild.driver import SUPPORTED_ARCHES, config_digest, parse_fragment
from kperf_kbuild.profiles import PROFILES, ProfileMismatch, base_config, profile_fragments

MAKEFILE = "# SPDX-License-Identifier: GPL-2.0\nVERSION = 6\nPATCHLEVEL = 1\nSUBLEVEL = 176\nEXTRAVERSION =\n"


def test_the_default_profile_keeps_the_digest_builds_had_before_profiles() -> None:
    for arch in SUPPORTED_ARCHES:
        assert config_digest(arch) == config_digest(arch, profile="tiny")
        assert profile_fragments("tiny", arch) == ()


@pytest.mark.parametrize("arch", SUPPORTED_ARCHES)
def test_every_profile_has_its_own_digest(arch: str) -> None:
    digests = {p: config_digest(arch, profile=p) for p in PROFILES}
    assert len(set(digests.values())) == len(PROFILES)


def test_the_mm_profile_brings_what_real_machines_have() -> None:
    wanted = {
        "CONFIG_MEMCG": "y",
        "CONFIG_BLOCK": "y",
        "CONFIG_SWAP": "y",
        "CONFIG_ZRAM": "y",
        "CONFIG_NUMA": "y",
        "CONFIG_LRU_GEN": "y",
        "CONFIG_PREEMPT_VOLUNTARY": "y",
    }
    for arch in SUPPORTED_ARCHES:
        merged: dict[str, str] = {}
        for frag in profile_fragments("mm", arch):
            merged.update(parse_fragment(frag.read_text()))
        assert {k: merged.get(k) for k in wanted} == wanted
    # x86 finds its NUMA nodes in ACPI's SRAT: the x86 part of the profile.
    x86 = [f.name for f in profile_fragments("mm", "x86_64")]
    assert x86 == ["mm.config", "mm-x86_64.config"]


def test_an_unknown_profile_names_the_choices() -> None:
    with pytest.raises(ValueError, match="tiny, mm, distro"):
        config_digest("x86_64", profile="huge")


def test_tiny_and_mm_start_from_tinyconfig(tmp_path: Path) -> None:
    assert base_config("tiny", "x86_64", tmp_path, tmp_path) == "tinyconfig"
    assert base_config("mm", "arm64", tmp_path, tmp_path) == "tinyconfig"


def test_the_distro_base_is_the_release_s_debian_config_without_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "Makefile").write_text(MAKEFILE)
    configs = tmp_path / "configs"
    (configs / "linux-config-6.1").mkdir(parents=True)
    debian = "CONFIG_MEMCG=y\nCONFIG_ZRAM=m\n# CONFIG_KASAN is not set\nCONFIG_NR_CPUS=8192\n"
    (configs / "linux-config-6.1" / "config.amd64_none_cloud-amd64.xz").write_bytes(lzma.compress(debian.encode()))
    monkeypatch.setenv(profiles.DISTRO_CONFIGS_ENV, str(configs))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    base = Path(base_config("distro", "x86_64", src, scratch))
    assert parse_fragment(base.read_text()) == {
        "CONFIG_MEMCG": "y",
        "CONFIG_ZRAM": "n",
        "CONFIG_KASAN": "n",
        "CONFIG_NR_CPUS": "8192",
    }
    # arm64 has no configuration there: the profile does not fit, and the message says what would.
    with pytest.raises(ProfileMismatch) as err:
        base_config("distro", "arm64", src, scratch)
    message = str(err.value)
    assert "no Debian configuration for Linux 6.1 on arm64" in message
    assert "config.arm64_none_cloud-arm64.xz" in message and "found releases: 6.1" in message
    assert "choose the mm profile" in message


def test_a_tree_without_a_release_in_its_makefile_does_not_fit_the_distro_profile(tmp_path: Path) -> None:
    (tmp_path / "Makefile").write_text("all:\n\techo not a kernel\n")
    with pytest.raises(ProfileMismatch, match="names no VERSION and PATCHLEVEL"):
        profiles.tree_release(tmp_path)
    (tmp_path / "Makefile").unlink()
    (tmp_path / "Makefile").symlink_to("/etc/passwd")
    with pytest.raises(ProfileMismatch, match="cannot read the tree's Makefile"):
        profiles.tree_release(tmp_path)


def test_debian_s_own_configurations_are_found_where_the_packages_put_them() -> None:
    found = [
        r
        for r in ("6.1", "6.12")
        if profiles.distro_config_path("x86_64", r, profiles.DISTRO_CONFIGS_DEFAULT).is_file()
    ]
    if not found:
        pytest.skip("no linux-config-* package installed here (.ci/run installs linux-config-6.1 and 6.12)")
    text = lzma.decompress(profiles.distro_config_path("x86_64", found[0]).read_bytes()).decode()
    options = parse_fragment(profiles.without_modules(text))
    assert options.get("CONFIG_MEMCG") == "y" and "m" not in options.values()
