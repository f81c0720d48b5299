"""Unit tests: config fragments, config digest, fixture headers, log scanning.
No kernel tree, no git, no compiler."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kperf_kbuild import logscan, modules
from kperf_kbuild.driver import (
    SUPPORTED_ARCHES,
    arch_fragment,
    config_digest,
    parse_fragment,
    unmet_options,
)
from kperf_kbuild.kconfig import affects_config, release_neutral
from kperf_testing.kbuild import FIXTURES_DIR, fixtures_digest, list_fixtures, read_fixture

COMMON_OPTIONS = {
    "PRINTK",
    "TTY",
    "BLK_DEV_INITRD",
    "RD_GZIP",
    "BINFMT_ELF",
    "MODULES",
    "MODULE_UNLOAD",
    "PERF_EVENTS",
    "PROC_FS",
    "PROC_SYSCTL",
    "SYSFS",
    "DEVTMPFS",
    "DEVTMPFS_MOUNT",
    "TMPFS",
    "SMP",
    "FUTEX",
    "POSIX_TIMERS",
    "HIGH_RES_TIMERS",
    "TRANSPARENT_HUGEPAGE",
    "DEBUG_FS",
}
ARCH_OPTIONS = {
    "x86_64": {
        "64BIT",
        "SERIAL_8250",
        "SERIAL_8250_CONSOLE",
        "PCI",
        "ACPI",
        "KVM_GUEST",
        "PARAVIRT",
        "HYPERVISOR_GUEST",
    },
    "arm64": {"SERIAL_AMBA_PL011", "SERIAL_AMBA_PL011_CONSOLE"},
}


@pytest.mark.parametrize("arch", SUPPORTED_ARCHES)
def test_fragment_has_the_required_options(arch: str) -> None:
    options = parse_fragment(arch_fragment(arch).read_text())
    for name in COMMON_OPTIONS | ARCH_OPTIONS[arch]:
        assert options.get(f"CONFIG_{name}") == "y", name
    # A panic reboots at once, so QEMU -no-reboot exits instead of hanging.
    assert options["CONFIG_PANIC_TIMEOUT"] == "-1"


@pytest.mark.parametrize("arch", SUPPORTED_ARCHES)
def test_fragment_options_are_commented(arch: str) -> None:
    # Every block of options is preceded by a comment saying why.
    lines = arch_fragment(arch).read_text().splitlines()
    assert lines[0].startswith("# kperf")
    for prev, line in zip(lines, lines[1:], strict=False):
        if line.startswith("CONFIG_") and not prev.strip():
            pytest.fail(f"{arch}: uncommented block starts at {line!r}")


def test_parse_fragment() -> None:
    text = "# comment\n\nCONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C=-1\nCONFIG_A=n\n"
    assert parse_fragment(text) == {"CONFIG_A": "n", "CONFIG_B": "n", "CONFIG_C": "-1"}
    with pytest.raises(ValueError, match="not a Kconfig fragment line"):
        parse_fragment("MODULES=y\n")


def test_unmet_options() -> None:
    config = "CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C=m\n"
    wanted = {"CONFIG_A": "y", "CONFIG_B": "n", "CONFIG_C": "y", "CONFIG_D": "y", "CONFIG_E": "n"}
    assert unmet_options(config, wanted) == {"CONFIG_C": "m", "CONFIG_D": "n"}


def test_the_size_of_core_structures_is_one_choice_however_a_release_spells_it() -> None:
    # 6.1 asked for full size: a bool BASE_FULL and the int BASE_SMALL it derives.
    v61_full = "CONFIG_BASE_FULL=y\nCONFIG_BASE_SMALL=0\n"
    v61_small = "# CONFIG_BASE_FULL is not set\nCONFIG_BASE_SMALL=1\n"
    # 6.12 has only the bool BASE_SMALL.
    v612_full = "# CONFIG_BASE_SMALL is not set\n"
    v612_small = "CONFIG_BASE_SMALL=y\n"
    full = {"CONFIG_BASE_FULL": "y", "CONFIG_BASE_SMALL": "n"}
    for config in (v61_full, v612_full):
        assert unmet_options(config, full) == {}
        assert release_neutral(parse_fragment(config)) == full
    assert unmet_options(v61_small, full) == {"CONFIG_BASE_FULL": "n", "CONFIG_BASE_SMALL": "y"}
    assert unmet_options(v612_small, full) == {"CONFIG_BASE_FULL": "n", "CONFIG_BASE_SMALL": "y"}
    # Every arch fragment asks for full size, as distributions build.
    for arch in ("x86_64", "arm64"):
        wanted = parse_fragment(arch_fragment(arch).read_text())
        assert {k: wanted[k] for k in full} == full


def test_split_page_table_locks_and_kmem_accounting_read_alike_across_releases() -> None:
    common = "CONFIG_MMU=y\nCONFIG_NR_CPUS=64\nCONFIG_ARCH_ENABLE_SPLIT_PMD_PTLOCK=y\nCONFIG_MEMCG=y\n"
    # 6.1: an int threshold against NR_CPUS, and MEMCG_KMEM of its own.
    v61 = release_neutral(parse_fragment(common + "CONFIG_SPLIT_PTLOCK_CPUS=4\nCONFIG_MEMCG_KMEM=y\n"))
    # 6.12: the bools, and kmem accounting part of MEMCG.
    v612 = release_neutral(parse_fragment(common + "CONFIG_SPLIT_PTE_PTLOCKS=y\nCONFIG_SPLIT_PMD_PTLOCKS=y\n"))
    assert v61 == v612
    assert v61["CONFIG_SPLIT_PTE_PTLOCKS"] == v61["CONFIG_SPLIT_PMD_PTLOCKS"] == v61["CONFIG_MEMCG_KMEM"] == "y"
    # Fewer CPUs than the threshold: 6.1 did not split them.
    few = release_neutral(parse_fragment(common.replace("NR_CPUS=64", "NR_CPUS=2") + "CONFIG_SPLIT_PTLOCK_CPUS=4\n"))
    assert few["CONFIG_SPLIT_PTE_PTLOCKS"] == few["CONFIG_SPLIT_PMD_PTLOCKS"] == "n"
    # 6.1 with kmem accounting turned off keeps saying so.
    assert release_neutral(parse_fragment(common + "# CONFIG_MEMCG_KMEM is not set\n"))["CONFIG_MEMCG_KMEM"] == "n"


def test_config_digest_is_stable() -> None:
    first = config_digest("x86_64")
    assert first == config_digest("x86_64", ())
    assert first == config_digest("x86_64", [])
    assert len(first) == 64 and int(first, 16) >= 0
    # Same text at another path: same digest (it hashes content, not names).
    assert config_digest("arm64") != first


def test_config_digest_is_sensitive(tmp_path: Path) -> None:
    a = tmp_path / "a.config"
    b = tmp_path / "b.config"
    a.write_text("CONFIG_KASAN=y\n")
    b.write_text("CONFIG_NUMA=y\n")
    base = config_digest("x86_64")
    with_a = config_digest("x86_64", [a])
    assert with_a != base
    assert config_digest("x86_64", [a, b]) != config_digest("x86_64", [b, a])
    copy = tmp_path / "copy.config"
    shutil.copy(a, copy)
    assert config_digest("x86_64", [copy]) == with_a
    a.write_text("CONFIG_KASAN=n\n")
    assert config_digest("x86_64", [a]) != with_a
    # Text moved between fragments is a different request.
    a.write_text("CONFIG_X=y\nCONFIG_Y=y\n")
    b.write_text("")
    joined = config_digest("x86_64", [a, b])
    a.write_text("CONFIG_X=y\n")
    b.write_text("CONFIG_Y=y\n")
    assert config_digest("x86_64", [a, b]) != joined


def test_config_digest_rejects_unknown_arch() -> None:
    with pytest.raises(ValueError, match="unsupported arch"):
        config_digest("riscv64")


def test_fixture_headers() -> None:
    fixtures = {f.name: f for f in list_fixtures()}
    assert {"fork-slow", "neutral", "broken-build"} <= set(fixtures)
    for fixture in fixtures.values():
        assert fixture.why, fixture.name
        assert fixture.patch.startswith("diff --git ")
        assert "# kperf-fixture" not in fixture.patch
    assert fixtures["fork-slow"].moves == ("spawn-*", "fork_test", "exec_test")
    assert "kernel/fork.c" in fixtures["fork-slow"].patch
    assert "udelay(" in fixtures["fork-slow"].patch
    assert fixtures["neutral"].moves == ()
    assert fixtures["neutral"].must_not_move == ("*",)
    assert "#error" in fixtures["broken-build"].patch


def test_slow_path_fixtures_delay_the_paths_they_name() -> None:
    fixtures = {f.name: f for f in list_fixtures()}
    fault = fixtures["pagefault-slow"]
    assert fault.moves == ("faults/*",)
    assert "spawn-*" in fault.must_not_move
    assert "+++ b/mm/memory.c" in fault.patch and "+\tudelay(20);" in fault.patch
    alloc = fixtures["pagealloc-slow"]
    assert alloc.moves == ("alloc-odr*", "total-odr*", "page_test")
    assert alloc.must_not_move == ()
    assert "+++ b/mm/page_alloc.c" in alloc.patch and "+\tudelay(5);" in alloc.patch


def test_fixture_patterns_name_metrics_that_exist() -> None:
    """Every moves / must-not-move pattern matches some metric of the registry's grids."""
    import fnmatch

    from kperf_runner.benchmarks import BENCHMARKS, resolve_params

    names = {
        metric.name
        for bench in BENCHMARKS.values()
        for grid in bench.grids
        for metric in bench.metrics(resolve_params(bench.name, grid))
    }
    for fixture in list_fixtures():
        for pattern in (*fixture.moves, *fixture.must_not_move):
            assert fnmatch.filter(names, pattern), f"{fixture.name}: {pattern!r} matches no metric"


def test_module_sources_are_part_of_the_config_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "pagealloc" in modules.module_names()
    assert [p.name for p in modules.module_sources()] == ["Kbuild", "pagealloc.c"]
    copy = tmp_path / "modules"
    shutil.copytree(modules.MODULES_DIR, copy)
    monkeypatch.setattr(modules, "MODULES_DIR", copy)
    same = config_digest("x86_64")
    (copy / "pagealloc" / "pagealloc.c").write_text("// changed\n")
    changed = config_digest("x86_64")
    assert changed != same
    # A directory without a Kbuild file is not a module.
    (copy / "notes").mkdir()
    (copy / "notes" / "README").write_text("x")
    assert config_digest("x86_64") == changed
    shutil.rmtree(copy / "pagealloc")
    assert modules.module_names() == []
    assert config_digest("x86_64") not in (same, changed)


def test_pagealloc_module_source_is_gpl_and_reports_its_clock() -> None:
    source = (modules.MODULES_DIR / "pagealloc" / "pagealloc.c").read_text()
    assert source.startswith("// SPDX-License-Identifier: GPL-2.0\n")
    assert (modules.MODULES_DIR / "pagealloc" / "Kbuild").read_text().startswith("# SPDX-License-Identifier: GPL-2.0")
    assert 'MODULE_LICENSE("GPL")' in source
    assert '"tsc"' in source and '"cntvct"' in source
    assert "alloc_pages(GFP_KERNEL | __GFP_NOWARN, order)" in source and "__free_pages(" in source
    assert 'emit("order %2d batch %6lu alloc %llu free %llu\\n"' in source


def test_a_kernel_without_modules_gets_no_module_and_a_reason(tmp_path: Path) -> None:
    obj = tmp_path / "obj"
    obj.mkdir()
    (obj / ".config").write_text("CONFIG_64BIT=y\n# CONFIG_MODULES is not set\n")
    artifacts, warnings = modules.build_benchmark_modules(
        "x86_64", tmp_path, obj, tmp_path / "out", tmp_path / "ext", lambda argv: (1, "must not run")
    )
    assert artifacts == {}
    assert warnings == [
        "pagealloc.ko not built: the kernel's .config has no CONFIG_MODULES=y (a fragment turned it off?)"
    ]


def test_neutral_fixture_only_adds_comments_in_mm() -> None:
    patch = read_fixture(FIXTURES_DIR / "neutral.patch").patch
    files = [line.split()[-1] for line in patch.splitlines() if line.startswith("+++ ")]
    assert files and all(f.startswith("b/mm/") for f in files)
    added = [line[1:].strip() for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert all(not line or line.startswith(("/*", "*", "*/")) for line in added), added
    assert not [line for line in patch.splitlines() if line.startswith("-") and not line.startswith("---")]


def test_fixture_header_is_required(tmp_path: Path) -> None:
    bad = tmp_path / "x.patch"
    bad.write_text("diff --git a/f b/f\n")
    with pytest.raises(ValueError, match="kperf-fixture: x"):
        read_fixture(bad)
    bad.write_text("# kperf-fixture: x\n# why: y\nnot a diff\n")
    with pytest.raises(ValueError, match="git diff"):
        read_fixture(bad)


def test_fixtures_digest_follows_patch_content(tmp_path: Path) -> None:
    for patch in FIXTURES_DIR.glob("*.patch"):
        shutil.copy(patch, tmp_path / patch.name)
    assert fixtures_digest(tmp_path) == fixtures_digest(FIXTURES_DIR)
    neutral = tmp_path / "neutral.patch"
    neutral.write_text(neutral.read_text().replace("changes nothing", "changes nothing at all"))
    assert fixtures_digest(tmp_path) != fixtures_digest(FIXTURES_DIR)


def _scan(lines: list[str]) -> tuple[logscan.LogScanner, list[tuple[str, str]]]:
    events: list[tuple[str, str]] = []
    scanner = logscan.LogScanner(
        lambda phase, message: events.append((phase, message)), obj=Path("/w/obj"), src=Path("/w/src")
    )
    scanner.MIN_INTERVAL_S = 0.0
    for line in lines:
        scanner.feed(line)
    return scanner, events


def test_log_scanner_phases_and_counts() -> None:
    scanner, events = _scan(
        [
            "make --jobs=2 O=/w/obj ARCH=x86_64 tinyconfig",
            "  HOSTCC  scripts/kconfig/conf.o",
            "make --jobs=2 O=/w/obj ARCH=x86_64 olddefconfig",
            "make --fail-fast --jobs=2 O=/w/obj ARCH=x86_64 'HOSTCC=ccache gcc'",
            "  CC      /w/obj/tools/objtool/check.o",
            "  CC      kernel/bounds.s",
            "  CC      mm/slub.o",
            "  AS      arch/x86/entry/entry_64.o",
            "  LD      vmlinux",
            "I: config: PASS in 0:00:05",
            "I: kernel: PASS in 0:03:00",
        ]
    )
    assert scanner.phase == "build"
    assert scanner.compiled == 4
    assert any(message.endswith("CC tools/objtool/check.o") for _, message in events)
    assert scanner.first_error == ""
    assert ("build", "compiling") in events
    assert events[-1][1] == "4 files compiled; LD vmlinux"


def test_log_scanner_keeps_the_first_error_in_the_tail() -> None:
    error = '/w/src/kernel/bounds.c:10:2: error: #error "kperf fixture broken-build"'
    scanner, _ = _scan(["make --jobs=2 O=/w/obj all", error] + [f"make[{i}]: *** Error 2" for i in range(60)])
    # Reported relative to the source tree: the checkout's path means nothing to users.
    assert scanner.first_error == error.replace("/w/src/", "")
    tail = scanner.log_tail()
    assert scanner.first_error in tail
    assert len(tail.splitlines()) <= logscan.LOG_TAIL_LINES + 2


def test_read_stats_log(tmp_path: Path) -> None:
    log = tmp_path / "stats.log"
    log.write_text(
        "# /w/src/mm/mmap.c\ncache_miss\n# /w/src/mm/slub.c\ndirect_cache_hit\n# /w/src/mm/util.c\ndirect_cache_hit\n"
    )
    assert logscan.read_stats_log(log) == {"cache_miss": 1, "direct_cache_hit": 2}
    assert logscan.read_stats_log(tmp_path / "missing.log") == {}


def test_log_scanner_names_the_object_the_linker_could_not_read() -> None:
    scanner, _ = _scan(
        [
            "make --jobs=2 O=/w/obj all",
            "x86_64-linux-gnu-ld: warning: arch/x86/boot/setup.elf has a LOAD segment with RWX permissions",
            "x86_64-linux-gnu-ld: vmlinux.a: member kernel/fork.o in archive is not an object",
            "make[2]: *** [scripts/Makefile.vmlinux_o:61: vmlinux.o] Error 1",
        ]
    )
    assert scanner.first_error == "x86_64-linux-gnu-ld: vmlinux.a: member kernel/fork.o in archive is not an object"


@pytest.mark.parametrize(
    "path",
    [
        "init/Kconfig",
        "mm/Kconfig.debug",
        "arch/x86/Kconfig.cpu",
        "kernel/configs/tiny.config",
        "arch/x86/configs/tiny.config",
        "scripts/Kconfig.include",
        "scripts/kconfig/conf.c",
        "scripts/cc-version.sh",
        "Makefile",
        "arch/x86/Makefile",
        "mm/Makefile",
        "Kbuild",
    ],
)
def test_a_change_to_what_the_configuration_is_made_from_makes_it_afresh(path: str) -> None:
    assert affects_config(path)


@pytest.mark.parametrize(
    "path", ["mm/page_alloc.c", "mm/mmap.c", "include/linux/mm.h", "kernel/fork.c", "arch/x86/mm/fault.c"]
)
def test_a_change_to_code_alone_keeps_the_configuration(path: str) -> None:
    assert not affects_config(path)
