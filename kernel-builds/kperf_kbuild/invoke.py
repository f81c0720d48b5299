"""One run of tuxmake in a warm tree, inside the sandbox, and what came of it.

tuxmake is the kernel's own build system driven the way its maintainers
drive it; kperf runs it with its null runtime (the host's toolchain), in
the sandbox of kperf_kbuild.sandbox, and reads the outcome from tuxmake's
own record (metadata.json), the files it left and the build's log.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from kperf_kbuild import ccache_scope, nofollow
from kperf_kbuild.host import CROSS_COMPILE, MIN_FREE_BYTES, BuildInfraError, free_bytes
from kperf_kbuild.kconfig import KERNEL_IMAGES, check_config
from kperf_kbuild.logscan import (
    COMPILER_KILLED,
    NO_SPACE,
    LogScanner,
    ProgressFn,
    read_stats_log,
    read_target_status,
)
from kperf_kbuild.modules import build_benchmark_modules, has_modules, module_names
from kperf_kbuild.profiles import ProfileMismatch, base_config
from kperf_kbuild.request import BuildRequest, BuildResult
from kperf_kbuild.sandbox import Ran, Sandbox, Watched, build_env
from kperf_kbuild.trees import WarmTree
from kperf_kbuild.written import Growth, NewEntries


@dataclass(frozen=True)
class Run:
    """Where one run happens: the warm tree's checkout and object tree, and what it may write."""

    req: BuildRequest
    tree: WarmTree
    output_dir: Path
    fragments: Sequence[Path]
    ccache_dir: Path
    work_root: Path
    digest: str
    sandbox: Sandbox
    # Scratch the build may write besides obj: /tmp and HOME inside the
    # sandbox, the ccache stats log, the benchmark modules' copies.
    scratch: Path
    # tuxmake's --kconfig: tinyconfig, or the distro profile's base file in
    # scratch, or the last build's complete .config (then no fragments are
    # merged: it has them).
    base: str
    merge_fragments: bool = True
    # What the disk limit counts (kperf_kbuild.written).
    watch: Sequence[Watched] = ()

    @property
    def writable(self) -> list[Path]:
        return [self.tree.obj, self.output_dir, self.scratch, self.ccache_dir]


def run_tuxmake(
    req: BuildRequest,
    *,
    tree: WarmTree,
    output_dir: Path,
    fragments: Sequence[Path],
    ccache_dir: Path,
    work_root: Path,
    digest: str,
    report: ProgressFn,
    reuse_config: Path | None = None,
) -> BuildResult:
    """Build the tree's checkout with tuxmake; a kernel that does not build is
    a result, a fault of the build machine raises BuildInfraError.

    Everything the build can write counts against its disk limit: its object
    tree, outputs and scratch, whatever it adds to the checkout's top
    directory (removed when it ends), and what its scope's ccache grows by
    (bounded after the build: kperf_kbuild.ccache_scope)."""
    with _writes_counted(tree, output_dir, ccache_dir, report) as watch:
        scratch = tree.path / "scratch"
        shutil.rmtree(scratch, ignore_errors=True)
        (scratch / "tmp").mkdir(parents=True)
        (scratch / "ext").mkdir()
        try:
            base = _config_base(req, scratch, tree, fragments, reuse_config, report)
        except ProfileMismatch as e:
            # The profile does not fit this tree's release: the kernel's result.
            return _stopped(digest, output_dir, None, str(e), report)
        run = Run(
            req, tree, output_dir, fragments, ccache_dir, work_root, digest,
            req.sandbox or Sandbox.from_environ(), scratch, base, merge_fragments=reuse_config is None, watch=watch,
        )  # fmt: skip
        env = _environment(run)
        # check_config writes what this build's .config lacks; a warm tree's is the last build's.
        unmet = tree.obj / "kperf-unmet-options"
        unmet.unlink(missing_ok=True)
        scanner = LogScanner(report, tree.obj, tree.src)

        def on_line(line: str) -> None:
            if scanner.feed(line):
                check_config(tree.obj / ".config", fragments, report)

        ran = run.sandbox.run(
            tuxmake_argv(run),
            cwd=tree.src,
            env=env,
            on_line=on_line,
            readonly=[tree.src / ".git", *{f.parent for f in fragments}],
            writable=run.writable,
            writable_top=[tree.src],
            watch=watch,
        )
        return _outcome(run, ran, scanner, env, unmet, report)


def _outcome(
    run: Run, ran: Ran, scanner: LogScanner, env: dict[str, str], unmet: Path, report: ProgressFn
) -> BuildResult:
    """What one finished tuxmake run came to: the kernel's result, or BuildInfraError for the machine's fault."""
    tree = run.tree
    if ran.stopped:
        # The tree's own build passed a limit (ran too long, wrote or
        # printed too much): the kernel's failure, not the machine's.
        return _stopped(run.digest, run.output_dir, scanner, ran.stopped, report)
    ccache_stats = read_stats_log(run.scratch / "ccache-stats.log")
    # What tuxmake recorded of each target (config, kernel, modules), not what the log's text says.
    recorded = read_target_status(run.output_dir)
    targets = recorded or {}
    _raise_machine_faults(run, scanner, targets, ran.returncode)
    # make ended by itself, so obj is consistent even if the kernel failed
    # (kbuild deletes the target of a failed recipe): the next build may
    # start from it.
    assert tree.state is not None
    tree.state.clean = True
    tree.save()

    artifacts, kernel_ok = _collect(run, scanner, targets, report)
    ok = ran.returncode == 0 and kernel_ok and targets.get("modules") in ("PASS", "SKIP")
    warnings = _unmet_warnings(unmet)
    if ok:
        built, module_warnings = _modules(run, env, report)
        artifacts.update(built)
        warnings += module_warnings
    error = ""
    if not ok:
        error = scanner.first_error or f"build failed (tuxmake exit {ran.returncode})"
        if recorded is None:
            # make ran, so the tree's code could have removed or spoilt it.
            error += "; tuxmake left no readable metadata.json after the build ran"
    return BuildResult(
        ok=ok, artifacts=artifacts, config_digest=run.digest, log_tail=scanner.log_tail(), duration_s=0.0,
        error=error, ccache_stats=ccache_stats, warnings=warnings, compiled=scanner.compiled,
    )  # fmt: skip


@contextlib.contextmanager
def _writes_counted(tree: WarmTree, output_dir: Path, ccache_dir: Path, report: ProgressFn) -> Iterator[list[Watched]]:
    """What the build's disk limit watches; what it added to the checkout is removed when it ends."""
    added = NewEntries(tree.src)
    try:
        yield [tree.obj, output_dir, tree.path / "scratch", added.usage, Growth(ccache_dir).usage]
    finally:
        # The checkout is the next build's too: it keeps nothing of this one.
        left = added.remove()
        if left:
            report("collect", f"removed what the build added to the checkout: {', '.join(left)}"[:300])


def _config_base(
    req: BuildRequest,
    scratch: Path,
    tree: WarmTree,
    fragments: Sequence[Path],
    reuse_config: Path | None,
    report: ProgressFn,
) -> str:
    """tuxmake's --kconfig for this run, said in the build's progress
    (ProfileMismatch when the profile does not fit the tree)."""
    base = base_config(req.profile, req.arch, tree.src, scratch)
    if reuse_config is None:
        report("config", f"{Path(base).name} + {', '.join(f.name for f in fragments)} ({req.profile} profile)")
        return base
    # The warm tree's last .config (kperf_kbuild.driver._prepare_tree):
    # tuxmake copies it in, and kbuild's syncconfig brings it up to date as
    # the build starts, as it does for any .config newer than its own.
    report("config", f"the last build's .config ({req.profile} profile)")
    return str(reuse_config.replace(scratch / "reuse.config"))


def _unmet_warnings(unmet: Path) -> list[str]:
    """Options of kperf's fragments this release does not have (or whose dependencies it lacks): built without."""
    if not nofollow.is_regular(unmet):
        return []
    try:
        return [f"configuration: options not applied: {nofollow.read_text(unmet).strip()[:800]}"]
    except (OSError, UnicodeDecodeError):
        return []


def _modules(run: Run, env: dict[str, str], report: ProgressFn) -> tuple[dict[str, Path], list[str]]:
    """kperf's benchmark modules built against the kernel: (artifacts, why one was not built)."""
    tree = run.tree
    report("modules", f"building {', '.join(module_names()) or 'no'} benchmark module(s)")
    built, warnings = build_benchmark_modules(
        run.req.arch, tree.src, tree.obj, run.output_dir, run.scratch / "ext",
        run.sandbox.make_runner(tree.src, env, run.writable, run.watch), run.sandbox.own,
    )  # fmt: skip
    for warning in warnings:
        report("modules", warning[:200])
    return built, warnings


def tuxmake_argv(run: Run) -> list[str]:
    req, tree = run.req, run.tree
    # -u: tuxmake writes its log lines to a pipe, which Python would buffer
    # 8 KB at a time; the build's progress (logscan) lagged minutes behind.
    argv = [
        sys.executable, "-u", "-m", "tuxmake", "--runtime", "null", "--wrapper", "ccache",
        "--target-arch", req.arch, "--toolchain", "gcc", "--kconfig", run.base,
    ]  # fmt: skip
    for frag in run.fragments if run.merge_fragments else ():
        argv += ["--kconfig-add", str(frag)]
    argv += [
        "--kernel-image",
        KERNEL_IMAGES[req.arch],
        "--build-dir",
        str(tree.obj),
        "--output-dir",
        str(run.output_dir),
        "--jobs",
        str(req.jobs or os.cpu_count() or 1),
        # Stop at the first error: a broken commit should fail in seconds,
        # not after make --keep-going has compiled everything else.
        "--fail-fast",
        # Without --verbose tuxmake runs make --silent, which hides kbuild's
        # "  CC  mm/slub.o" lines, the only progress signal make gives.
        "--verbose",
        # tuxmake defaults KCFLAGS to -ffile-prefix-map=<build dir>/=, a
        # per-build path on every compiler command line, so ccache could never
        # hit across builds. The kernel strips source paths itself
        # (-fmacro-prefix-map) and these configs carry no debug info.
        "--environment",
        "KCFLAGS=",
        *(
            arg
            for name, value in reproducible_env(tree.src, req.sha).items()
            for arg in ("--environment", f"{name}={value}")
        ),
        "--directory",
        str(tree.src),
        f"CROSS_COMPILE={CROSS_COMPILE[req.arch]}",
        "config",
        "kernel",
        "modules",
    ]
    return argv


def _environment(run: Run) -> dict[str, str]:
    """The build's scrubbed environment, and its writable places handed to the build's uid."""
    env = build_env(run.sandbox, run.scratch / "tmp")
    env.update(
        CCACHE_DIR=str(run.ccache_dir),
        CCACHE_BASEDIR=str(run.work_root),
        CCACHE_STATSLOG=str(run.scratch / "ccache-stats.log"),
        **ccache_scope.ccache_env(run.req.scope, run.sandbox),
    )
    # This build's alone (its tree is locked): handed to its uid whole. The
    # scope's ccache is shared with the scope's other builds, running or
    # not, through its group instead (kperf_kbuild.ccache_scope).
    run.sandbox.own(run.tree.obj, run.output_dir, run.scratch)
    # kconfig's merge_config.sh makes its temporary file in the current
    # directory, the checkout: its top directory is writable (sticky, so
    # the checkout's own files cannot be removed or renamed, which their
    # read-only mounts ensure too: Sandbox.command); everything below stays
    # root's, and src/.git read-only, so the worker's next git command in
    # this tree reads kperf's repository, not one the build made.
    if run.sandbox.drops_to_uid:
        run.tree.src.chmod(0o1777)
    return env


def _stopped(digest: str, output_dir: Path, scanner: LogScanner | None, why: str, report: ProgressFn) -> BuildResult:
    """A build ended for the kernel's reason before make finished: a limit, or a profile that does not fit."""
    report("done", why)
    build_log = output_dir / "build.log"
    tail = list(scanner.tail) if scanner else []
    with contextlib.suppress(OSError):
        nofollow.write_text(build_log, "\n".join(tail) + f"\n{why}\n")
    return BuildResult(
        ok=False,
        artifacts={"build-log": build_log} if nofollow.is_regular(build_log) else {},
        config_digest=digest,
        log_tail=(scanner.log_tail() + "\n" if scanner else "") + why,
        duration_s=0.0,
        error=why,
        compiled=scanner.compiled if scanner else 0,
    )


def _raise_machine_faults(run: Run, scanner: LogScanner, targets: dict[str, str], returncode: int) -> None:
    """BuildInfraError for what is the build machine's fault, not the kernel's."""
    # A tree can print these words itself: believed only when the disk
    # really is short, so a build cannot pass its failure off as kperf's.
    if any(NO_SPACE in line for line in scanner.tail) and free_bytes(run.work_root) < MIN_FREE_BYTES:
        raise BuildInfraError(
            f"the build ran out of disk space under {run.work_root} or {run.output_dir}: "
            f"free space there and rebuild\n{scanner.log_tail()}"
        )
    if any(COMPILER_KILLED in line for line in scanner.tail):
        raise BuildInfraError(
            f"a compiler process was killed during the build (out of memory?): lower "
            f"jobs or add memory, then rebuild\n{scanner.log_tail()}"
        )
    if "config" not in targets and not scanner.ran_make:
        # tuxmake stopped before running any target: its own setup failed
        # (bad arguments, unwritable output dir), not the kernel. (Once make
        # ran, the tree's code could have broken tuxmake on purpose: a
        # failure of the kernel's, below.)
        raise BuildInfraError(
            f"tuxmake failed before building (exit {returncode}); see its output:\n{scanner.log_tail()}"
        )


def _collect(
    run: Run, scanner: LogScanner, targets: dict[str, str], report: ProgressFn
) -> tuple[dict[str, Path], bool]:
    """The build's files worth keeping, never through a link the build planted; and whether a kernel was built."""
    output_dir = run.output_dir
    report("collect", f"copying artifacts to {output_dir}")
    for name in nofollow.drop_irregular(output_dir):
        report("collect", f"{name}: not a regular file, left out")
    build_log = output_dir / "build.log"
    if not nofollow.is_regular(build_log):
        nofollow.write_text(build_log, "\n".join(scanner.tail) + "\n")
    artifacts = {"build-log": build_log}
    config = output_dir / "config"
    if nofollow.is_regular(config):
        artifacts["config"] = config
    kernel = output_dir / KERNEL_IMAGES[run.req.arch]
    kernel_ok = targets.get("kernel") == "PASS" and nofollow.is_regular(kernel)
    if kernel_ok:
        artifacts["kernel"] = kernel
        system_map = run.tree.obj / "System.map"
        if nofollow.is_regular(system_map):
            # Symbols for the runner's perf reports and oops decoding.
            artifacts["system-map"] = nofollow.copy(system_map, output_dir / "System.map")
    modules = next(iter(sorted(output_dir.glob("modules.tar*"))), None)
    if modules is not None:
        if has_modules(modules):
            artifacts["modules"] = modules
        else:
            # Only modules.order & co.: shipping it would suggest modules exist.
            modules.unlink()
    return artifacts, kernel_ok


def reproducible_env(src: Path, sha: str) -> dict[str, str]:
    """What kbuild would otherwise take from the build's time, user and
    host, fixed so a build's image depends on its source and config alone.
    These are the values tuxmake itself sets (the commit's date, "tuxmake"),
    so images stay byte-identical to those built before they were fixed
    here. The fourth, the link count in UTS_VERSION, comes from obj/.version,
    which _prepare_tree deletes (KBUILD_BUILD_VERSION would also change the
    temporary banner of init/version.o, "#" in every clean build)."""
    committed = subprocess.run(
        ["git", "-C", str(src), "show", "-s", "--format=%ct", sha],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    if not committed.isdigit():
        raise BuildInfraError(f"cannot read the commit date of {sha} in {src}")
    return {
        "KBUILD_BUILD_TIMESTAMP": f"@{committed}",
        "KBUILD_BUILD_USER": "tuxmake",
        "KBUILD_BUILD_HOST": "tuxmake",
    }
