"""Real kernels: the fixture builds, a QEMU boot, a broken build, ccache
reuse, incremental builds against clean ones.

The base kernel comes from the session fixture `x86_64_kernel` (built once,
cached in KPERF_CACHE); the other builds here reuse its ccache, and the
fixture branches build incrementally in the cache's warm trees.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from kperf_kbuild import trees
from kperf_kbuild.driver import (
    BuildRequest,
    BuildResult,
    arch_fragment,
    build_kernel,
    parse_fragment,
    unmet_options,
)
from kperf_testing.kbuild import build_fixture_kernel

pytestmark = pytest.mark.kernel

BOOT_MARKER = "KPERF-BOOT-OK"
PANIC_MARKER = "KPERF-INIT-EXITING"

# The guest's /init: report, then power off (or, in panic mode, exit so the
# kernel panics with "Attempted to kill init").
INIT_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <termios.h>
#include <unistd.h>

int main(void)
{
	char panic[32] = "?";
	FILE *f;
	const char *mode = getenv("kperfmode"); /* unknown cmdline words reach init's env */

	mount("proc", "/proc", "proc", 0, NULL);
	f = fopen("/proc/sys/kernel/panic", "r");
	if (f) {
		if (!fgets(panic, sizeof(panic), f))
			strcpy(panic, "?");
		panic[strcspn(panic, "\n")] = 0;
		fclose(f);
	}
	if (mode && strcmp(mode, "panic") == 0) {
		printf("%s panic=%s\n", "KPERF-INIT-EXITING", panic);
		fflush(stdout);
		/* The panic after exit stops all: drain the line out of the tty first. */
		tcdrain(STDOUT_FILENO);
		return 3;
	}
	printf("%s panic=%s\n", "KPERF-BOOT-OK", panic);
	fflush(stdout);
	sync();
	reboot(RB_POWER_OFF);
	return 0;
}
"""


def newc(entries: list[tuple[str, int, bytes, tuple[int, int]]]) -> bytes:
    """A newc cpio archive: (name, mode, data, (rdev major, minor)) entries.
    Written here rather than with cpio(1) so /dev/console can be a device
    node without root privileges."""
    out = bytearray()
    for ino, (name, mode, data, (major, minor)) in enumerate([*entries, ("TRAILER!!!", 0, b"", (0, 0))], 1):
        encoded = name.encode() + b"\0"
        fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, major, minor, len(encoded), 0]
        out += b"070701" + b"".join(b"%08X" % v for v in fields) + encoded
        out += b"\0" * (-len(out) % 4) + data
        out += b"\0" * (-len(out) % 4)
    return bytes(out)


QEMU = {
    "x86_64": (
        "qemu-system-x86_64",
        "qemu-system-x86",
        ("-accel", "tcg", "-m", "512", "-smp", "2"),
        "ttyS0",
    ),
    "arm64": (
        "qemu-system-aarch64",
        "qemu-system-arm",
        ("-accel", "tcg", "-M", "virt", "-cpu", "cortex-a57", "-m", "512", "-smp", "2"),
        "ttyAMA0",
    ),
}
GCC = {"x86_64": ("gcc", "gcc"), "arm64": ("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu")}


def make_initramfs(arch: str, work: Path) -> Path:
    gcc, package = GCC[arch]
    if shutil.which(gcc) is None:
        pytest.fail(f"{gcc} is missing: apt-get install {package}")
    (work / "init.c").write_text(INIT_C)
    subprocess.run(
        [gcc, "-static", "-Os", "-o", str(work / "init"), str(work / "init.c")],
        check=True,
        capture_output=True,
    )
    archive = newc(
        [
            ("dev", 0o040755, b"", (0, 0)),
            ("dev/console", 0o020600, b"", (5, 1)),
            ("proc", 0o040755, b"", (0, 0)),
            ("init", 0o100755, (work / "init").read_bytes(), (0, 0)),
        ]
    )
    path = work / "initramfs.cpio.gz"
    path.write_bytes(gzip.compress(archive, mtime=0))
    return path


@pytest.fixture(scope="module")
def initramfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_initramfs("x86_64", tmp_path_factory.mktemp("initramfs"))


def boot(arch: str, kernel: Path, initrd: Path, append: str, timeout: float = 180) -> str:
    """Boot under QEMU (TCG, -no-reboot) and return the serial console; the
    guest must make QEMU exit by powering off or rebooting."""
    binary, package, machine, console = QEMU[arch]
    qemu = shutil.which(binary)
    if qemu is None:
        pytest.fail(f"{binary} is missing: apt-get install {package}")
    proc = subprocess.run(
        [
            qemu,
            *machine,
            *("-nographic", "-no-reboot", "-kernel", str(kernel), "-initrd", str(initrd)),
            *("-append", f"console={console} {append}"),
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_base_build_has_the_fragment_config(x86_64_kernel: BuildResult) -> None:
    result = x86_64_kernel
    assert result.ok, result.log_tail
    assert result.error == ""
    assert {"kernel", "config", "build-log"} <= set(result.artifacts)
    # The fragment selects no module, so there is nothing to ship.
    assert "modules" not in result.artifacts
    # kperf's own benchmark module is built against it, out of tree.
    assert result.warnings == []
    module = result.artifacts["pagealloc.ko"]
    assert module.read_bytes()[:4] == b"\x7fELF"
    # No "+": the release is made without git (LOCALVERSION is set, empty).
    assert b"vermagic=6.1.192 SMP mod_unload" in module.read_bytes()
    kernel = result.artifacts["kernel"].read_bytes()
    assert kernel[0x202:0x206] == b"HdrS", "not an x86 boot image"
    wanted = parse_fragment(arch_fragment("x86_64").read_text())
    assert unmet_options(result.artifacts["config"].read_text(), wanted) == {}
    assert result.artifacts["build-log"].stat().st_size > 0


def test_base_kernel_boots_under_qemu(x86_64_kernel: BuildResult, initramfs: Path) -> None:
    console = boot("x86_64", x86_64_kernel.artifacts["kernel"], initramfs, "panic=-1")
    assert f"{BOOT_MARKER} panic=-1" in console, console[-3000:]


def test_panic_reboots_so_qemu_exits(x86_64_kernel: BuildResult, initramfs: Path) -> None:
    # panic=1 differs from the config's default (-1): seeing "Rebooting in 1
    # seconds" proves the command line is obeyed, and QEMU exiting (rc 0,
    # -no-reboot) proves a panicking guest does not hang a runner.
    console = boot("x86_64", x86_64_kernel.artifacts["kernel"], initramfs, "panic=1 kperfmode=panic")
    assert f"{PANIC_MARKER} panic=1" in console, console[-3000:]
    assert "Kernel panic - not syncing: Attempted to kill init" in console
    assert "Rebooting in 1 seconds" in console


def test_broken_build_is_reported_not_raised(x86_64_kernel: BuildResult, kernel_tree: Path, kperf_cache: Path) -> None:
    result = build_fixture_kernel(kernel_tree, "broken-build", "x86_64", kperf_cache)
    assert not result.ok
    assert "kernel" not in result.artifacts
    assert "kernel/bounds.c" in result.error and "#error" in result.error
    assert "kperf fixture broken-build" in result.log_tail
    assert result.artifacts["build-log"].exists()


def rev(tree: Path, branch: str) -> str:
    return subprocess.run(
        ["git", "-C", str(tree), "rev-parse", f"refs/heads/{branch}"], check=True, capture_output=True, text=True
    ).stdout.strip()


def image_sha256(result: BuildResult) -> str:
    return hashlib.sha256(result.artifacts["kernel"].read_bytes()).hexdigest()


@dataclass
class Workspace:
    """A work_root of its own, where `neutral` was built clean first: later
    tests build other commits in its warm tree."""

    work_root: Path
    ccache: Path
    tree: Path
    neutral: BuildResult
    phases: list[str]

    def build(self, sha: str, out: str) -> BuildResult:
        return build_kernel(
            BuildRequest(
                repo=self.tree,
                sha=sha,
                arch="x86_64",
                work_root=self.work_root,
                output_dir=self.work_root.parent / out,
                ccache_dir=self.ccache,
            )
        )


@pytest.fixture(scope="module")
def workspace(
    x86_64_kernel: BuildResult, kernel_tree: Path, kperf_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Workspace:
    # The neutral branch (another sha than base) built under a new work_root:
    # an empty object tree, so a clean build, and only CCACHE_BASEDIR makes
    # its paths hash like the base build's. Built here, not through the
    # fixture cache, so the counters are this build's.
    root = tmp_path_factory.mktemp("workspace")
    phases: list[str] = []
    neutral = build_kernel(
        BuildRequest(
            repo=kernel_tree,
            sha=rev(kernel_tree, "neutral"),
            arch="x86_64",
            work_root=root / "work",
            output_dir=root / "out-neutral",
            ccache_dir=kperf_cache / "ccache",
        ),
        progress=lambda phase, message: phases.append(phase),
    )
    return Workspace(root / "work", kperf_cache / "ccache", kernel_tree, neutral, phases)


def test_another_branch_hits_ccache(workspace: Workspace, kernel_tree: Path) -> None:
    result = workspace.neutral
    assert rev(kernel_tree, "neutral") != rev(kernel_tree, "base")
    assert result.ok, result.log_tail
    assert result.reused_sha == ""
    assert "modules" not in result.artifacts
    assert not list((workspace.work_root.parent / "out-neutral").glob("modules.tar*"))
    stats = result.ccache_stats
    hits = stats.get("direct_cache_hit", 0) + stats.get("preprocessed_cache_hit", 0)
    misses = stats.get("cache_miss", 0)
    assert hits > 500, stats
    # Only mm/mmap.c changed (plus a handful of files that embed the version).
    assert misses < hits / 20, stats
    # An empty object tree: kbuild compiled everything (mostly from ccache).
    assert result.compiled > 500, result.compiled
    assert [p for i, p in enumerate(workspace.phases) if p not in workspace.phases[:i]] == [
        "checkout",
        "config",
        "build",
        "collect",
        "modules",
        "done",
    ]
    # The checkout and its object tree stay, warm for the next build.
    [tree] = trees.list_trees(workspace.work_root)
    assert tree.name == result.tree
    assert tree.state is not None
    assert (tree.state.sha, tree.state.clean) == (rev(kernel_tree, "neutral"), True)
    assert (tree.obj / "vmlinux").is_file() and tree.state.bytes > 0


def test_an_incremental_build_makes_the_clean_build_s_image(
    workspace: Workspace, kernel_tree: Path, kperf_cache: Path
) -> None:
    neutral, slow = rev(kernel_tree, "neutral"), rev(kernel_tree, "pagealloc-slow")
    # neutral -> pagealloc-slow -> neutral, as a bisection goes back and
    # forth: git rewrites mm/page_alloc.c each time and make recompiles what
    # depends on it, nothing else.
    there = workspace.build(slow, "out-slow-incremental")
    assert there.ok, there.log_tail
    assert (there.reused_sha, there.tree) == (neutral, workspace.neutral.tree)
    # Only mm/page_alloc.c differs: the last build's .config was kept (run
    # through olddefconfig), not made afresh from tinyconfig and the fragments.
    assert there.config_from == neutral
    assert 0 < there.compiled < 40, there.compiled
    # The change is in: a different image, the same as the fixture cache's
    # build of that commit (made in another tree, at another time).
    assert image_sha256(there) != image_sha256(workspace.neutral)
    cached = build_fixture_kernel(kernel_tree, "pagealloc-slow", "x86_64", kperf_cache)
    assert image_sha256(there) == image_sha256(cached)
    assert there.artifacts["config"].read_bytes() == cached.artifacts["config"].read_bytes()
    back = workspace.build(neutral, "out-neutral-incremental")
    assert back.ok, back.log_tail
    assert (back.reused_sha, back.tree) == (slow, workspace.neutral.tree)
    assert 0 < back.compiled < 40, back.compiled
    # Byte for byte the clean build of the same commit: the reverted file
    # was recompiled and nothing of the incremental past shows.
    assert image_sha256(back) == image_sha256(workspace.neutral)
    for name in ("system-map", "pagealloc.ko"):
        assert back.artifacts[name].read_bytes() == workspace.neutral.artifacts[name].read_bytes(), name


def test_a_stale_object_tree_is_rebuilt_clean_not_reported_as_broken(
    workspace: Workspace, x86_64_kernel: BuildResult, kernel_tree: Path
) -> None:
    # An object newer than its source but not an object any more (a disk
    # fault, a killed tool that left garbage): make keeps it, the link fails.
    [stale] = trees.list_trees(workspace.work_root)
    fork_o = stale.obj / "kernel" / "fork.o"
    assert fork_o.is_file()
    fork_o.write_bytes(b"not an object file\n")
    result = workspace.build(rev(kernel_tree, "base"), "out-base-after-stale")
    assert result.ok, result.log_tail
    assert "fork.o" in result.incremental_error, result.incremental_error
    assert result.reused_sha == "" and result.tree != stale.name
    assert image_sha256(result) == image_sha256(x86_64_kernel)
    # The tree that failed a kernel that builds is gone; the clean one stays.
    assert [t.name for t in trees.list_trees(workspace.work_root)] == [result.tree]


def test_arm64_base_builds_and_boots(kernel_tree: Path, kperf_cache: Path, tmp_path: Path) -> None:
    # The arm64 fragment, cross-built and booted on QEMU's virt machine (built
    # once per cache, like the x86_64 kernel).
    result = build_fixture_kernel(kernel_tree, "base", "arm64", kperf_cache)
    assert result.ok, result.log_tail
    image = result.artifacts["kernel"]
    assert image.name == "Image"
    assert image.read_bytes()[0x38:0x3C] == b"ARM\x64", "not an arm64 Image"
    wanted = parse_fragment(arch_fragment("arm64").read_text())
    assert unmet_options(result.artifacts["config"].read_text(), wanted) == {}
    console = boot("arm64", image, make_initramfs("arm64", tmp_path), "panic=-1")
    assert f"{BOOT_MARKER} panic=-1" in console, console[-3000:]


@pytest.mark.parametrize("branch", ["pagefault-slow", "pagealloc-slow"])
def test_slow_path_fixtures_build_with_the_module(
    x86_64_kernel: BuildResult, kernel_tree: Path, kperf_cache: Path, branch: str
) -> None:
    # Built once per cache like the base kernel (one changed file in mm/:
    # ccache makes it a minute or two). Whether they move the metrics they
    # claim is for the detection tests; here: they compile, with the module.
    result = build_fixture_kernel(kernel_tree, branch, "x86_64", kperf_cache)
    assert result.ok, result.log_tail
    assert result.warnings == []
    assert {"kernel", "pagealloc.ko"} <= set(result.artifacts)
