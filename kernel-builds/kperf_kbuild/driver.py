"""Build one kernel: a commit of a git repository, for one arch, with kperf's
config fragments, out of tree, through ccache, and collect its artifacts.

The build runs tuxmake with its null runtime (the host's own toolchain, no
containers, no network): tuxmake already knows each arch's make variables,
image names, how to merge fragments onto tinyconfig and how to package
modules, and its reproducer line and metadata.json make a failed build easy
to replay by hand.

Builds run in warm trees under ``work_root/trees`` (kperf_kbuild.trees): a
checkout and its object tree kept from one build to the next, so a build of
a nearby commit recompiles only what the commits changed. Two guards keep an
incremental build honest:

- it makes the same image as a clean build of the commit: the build is
  reproducible (fixed KBUILD_BUILD_* values, .config made afresh every time),
  which kernel-builds/tests checks byte for byte;
- a kernel that fails to build incrementally is built again in a new, empty
  tree before it is reported as broken, so a stale object tree can never
  pass for a kernel that does not build.

``CCACHE_BASEDIR=work_root`` makes ccache hash ``../src/mm/foo.c`` instead of
``/work_root/trees/<tree>/src/mm/foo.c``; since every tree's obj and src sit
at the same depth, every build of every commit hashes alike and unchanged
files hit even in a new tree.

The tree's own build system (Makefiles, Kconfig, scripts) is a stranger's
program: tuxmake and everything it starts run in the sandbox of
``kperf_kbuild.sandbox``, which sees the checkout read-only and may write
only its object tree, its outputs, a scratch directory and its scope's
ccache.

Scopes: a warm object tree or a ccache written by one build is read by the
next, so a hostile build could plant an object (or a cache entry) that ends
up in another kernel. Warm trees and ccache therefore belong to a scope and
are only ever shared within it: ``lab`` for what the lab's operators vouch
for (their tracked branches, staff submissions, calibration), and one scope
per submitter otherwise. A submitter can only spoil their own kernels,
which their own patches could do anyway. docs/security.md says more.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from kperf_kbuild import modules as benchmark_modules
from kperf_kbuild import nofollow, trees
from kperf_kbuild.host import CROSS_COMPILE, MIN_FREE_BYTES, check_commit, check_free_space, check_tools, free_bytes
from kperf_kbuild.host import BuildInfraError as BuildInfraError
from kperf_kbuild.host import default_ccache_dir as _default_ccache_dir
from kperf_kbuild.host import file_lock as file_lock
from kperf_kbuild.logscan import COMPILER_KILLED, NO_SPACE, LogScanner, ProgressFn, read_stats_log, read_target_status
from kperf_kbuild.modules import build_benchmark_modules, has_modules, module_names, module_sources
from kperf_kbuild.sandbox import Sandbox, build_env
from kperf_kbuild.trees import DEFAULT_BUDGET_BYTES, WarmTree

SUPPORTED_ARCHES = ("x86_64", "arm64")

# The base every fragment is merged onto. Part of the config digest, so
# changing it gives every build a new key.
BASE_CONFIG = "tinyconfig"

CONFIGS_DIR = Path(__file__).resolve().parent / "configs"

# Image names as QEMU's -kernel and kexec want them. tuxmake's arm64 default
# is Image.gz; the uncompressed Image boots everywhere without a decompressor
# stub and kexec_file_load takes it directly.
KERNEL_IMAGES = {"x86_64": "bzImage", "arm64": "Image"}


@dataclass(frozen=True)
class BuildRequest:
    repo: Path
    sha: str
    arch: str
    work_root: Path
    output_dir: Path
    fragments: tuple[Path, ...] = ()
    ccache_dir: Path | None = None
    jobs: int = 0
    # What the warm trees under work_root may take on disk; past it the
    # least recently used unlocked trees are deleted after the build. 0 keeps
    # no tree (every build starts from an empty object tree).
    trees_budget_bytes: int = DEFAULT_BUDGET_BYTES
    # Whose builds may share this build's warm trees and ccache: "lab" for
    # what the lab's operators vouch for, else one scope per submitter
    # ("user-42"). See "Scopes" in the module docstring.
    scope: str = "lab"
    # How the tree's own build system is confined (None: from KPERF_BUILD_*
    # in the environment, which means the bwrap sandbox unless turned off).
    sandbox: Sandbox | None = None


@dataclass
class BuildResult:
    ok: bool
    artifacts: dict[str, Path]
    config_digest: str
    log_tail: str
    duration_s: float
    error: str
    # This build's own ccache counters (from CCACHE_STATSLOG, so concurrent
    # builds sharing one cache do not blur them), e.g. {"direct_cache_hit": 812,
    # "cache_miss": 3}. Empty when the build never reached the compiler.
    ccache_stats: dict[str, int] = field(default_factory=dict)
    # Things that did not stop the kernel from building but leave an
    # artifact out, e.g. "pagealloc.ko not built: CONFIG_MODULES is not set".
    warnings: list[str] = field(default_factory=list)
    # The commit whose object tree this build started from ("" = an empty
    # object tree: a clean build), and the warm tree it ran in.
    reused_sha: str = ""
    tree: str = ""
    # Files kbuild compiled (CC, AS, HOSTCC... lines): what the build redid.
    compiled: int = 0
    # When the incremental build failed and the clean build that replaced
    # it is the result: the incremental attempt's first error.
    incremental_error: str = ""


# A scope names directories: nothing that could climb out of them.
SCOPE_RE = re.compile(r"[a-z][a-z0-9-]{0,62}")


def scoped_ccache_dir(ccache_dir: Path, scope: str) -> Path:
    """The lab's builds use ``ccache_dir`` itself; every other scope a
    cache of its own beside it, which only that scope's builds write."""
    return ccache_dir if scope == "lab" else ccache_dir.with_name(f"{ccache_dir.name}-scopes") / scope


def arch_fragment(arch: str) -> Path:
    """The default fragment for ``arch``, always applied first."""
    _check_arch(arch)
    return CONFIGS_DIR / f"{arch}.config"


def config_digest(arch: str, fragments: Sequence[Path] = ()) -> str:
    """sha256 (hex) identifying the kernel configuration a build asks for.

    Hashes the base config name and the text of the arch fragment and of the
    extra fragments, in order (order matters: later fragments win). Each part
    is length-prefixed so that moving text from one fragment to the next
    cannot produce the same digest.
    """
    h = hashlib.sha256()

    def part(data: bytes) -> None:
        h.update(b"%d:" % len(data))
        h.update(data)

    part(b"kperf-config-v1")
    part(BASE_CONFIG.encode())
    for path in (arch_fragment(arch), *fragments):
        part(Path(path).read_bytes())
    # The benchmark modules are built with the kernel: a new module source
    # is a new build, as a new fragment is.
    for path in module_sources():
        part(b"module:" + path.relative_to(benchmark_modules.MODULES_DIR).as_posix().encode())
        part(path.read_bytes())
    return h.hexdigest()


def parse_fragment(text: str) -> dict[str, str]:
    """Kconfig fragment text -> {"CONFIG_X": "y" | "n" | value}.

    ``# CONFIG_X is not set`` means "n"; other comments and blanks are
    ignored. Later lines win, as in merge_config.sh.
    """
    options: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        unset = re.fullmatch(r"#\s*(CONFIG_\w+) is not set", line)
        if unset:
            options[unset.group(1)] = "n"
            continue
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"(CONFIG_\w+)=(.*)", line)
        if not match:
            raise ValueError(f"not a Kconfig fragment line: {raw!r}")
        options[match.group(1)] = match.group(2)
    return options


def unmet_options(config_text: str, wanted: dict[str, str]) -> dict[str, str]:
    """Options of ``wanted`` that the final .config does not have as asked:
    {"CONFIG_X": "<value in .config, or n>"}. Kconfig drops a requested option
    silently when its dependencies are missing, so this is how to notice."""
    final = parse_fragment(config_text)
    return {name: final.get(name, "n") for name, value in wanted.items() if final.get(name, "n") != value}


def build_kernel(req: BuildRequest, progress: ProgressFn | None = None) -> BuildResult:
    """Build ``req.sha`` for ``req.arch`` and copy its artifacts to
    ``req.output_dir``.

    A kernel that does not build gives ``ok=False`` with ``error`` and
    ``log_tail``; problems of the build machine raise BuildInfraError.
    """
    started = time.monotonic()
    report: ProgressFn = progress or (lambda phase, message: None)
    _check_arch(req.arch)
    if not re.fullmatch(r"[0-9a-f]{40}", req.sha):
        raise ValueError(f"sha must be a full 40-hex commit id, got {req.sha!r}")
    if not SCOPE_RE.fullmatch(req.scope):
        raise ValueError(f"scope must match {SCOPE_RE.pattern}, got {req.scope!r}")
    fragments = (arch_fragment(req.arch), *(Path(f).resolve() for f in req.fragments))
    for frag in fragments:
        if not frag.is_file():
            raise BuildInfraError(f"config fragment {frag} does not exist")
    digest = config_digest(req.arch, req.fragments)
    check_tools(req.arch)
    sandbox = req.sandbox or Sandbox.from_environ()
    sandbox.check()
    req = replace(req, sandbox=sandbox)
    repo = Path(req.repo).resolve()
    check_commit(repo, req.sha)

    work_root = Path(req.work_root).resolve()
    work_root.mkdir(parents=True, exist_ok=True)
    output_dir = Path(req.output_dir).resolve()
    output_dir.mkdir(parents=True, exist_ok=True)
    ccache_dir = scoped_ccache_dir(
        Path(req.ccache_dir).resolve() if req.ccache_dir else _default_ccache_dir(), req.scope
    )
    ccache_dir.mkdir(parents=True, exist_ok=True)

    def build_in(tree: WarmTree, distance: int | None) -> BuildResult:
        reused = _prepare_tree(tree, repo, req.sha, distance, report)
        _clear_outputs(output_dir)
        result = _run_tuxmake(
            req,
            tree=tree,
            output_dir=output_dir,
            fragments=fragments,
            ccache_dir=ccache_dir,
            work_root=work_root,
            digest=digest,
            report=report,
        )
        result.reused_sha, result.tree = reused, tree.name
        assert tree.state is not None
        tree.state.bytes, tree.state.last_used = tree.measure(), time.time()
        tree.save()
        return result

    tree, distance = trees.claim(work_root, repo, req.sha, req.arch, digest, scope=req.scope)
    try:
        result = build_in(tree, distance)
        if not result.ok and result.reused_sha:
            # The guard: a stale object tree must never pass for a kernel
            # that does not build. Redo it in a new, empty tree, keeping the
            # first one (still locked), whose objects serve the next nearby
            # build, unless the clean build shows it was the tree's fault.
            report("build", f"failed from {result.reused_sha[:12]}'s objects; building again from scratch")
            first = result
            fresh, _ = trees.claim(work_root, repo, req.sha, req.arch, digest, fresh=True, scope=req.scope)
            try:
                result = build_in(fresh, None)
                result.incremental_error = first.error
                # Confirmed broken: the half-built fresh tree is worth
                # nothing. Built after all: the old tree's objects lied.
                trees.remove(fresh if not result.ok else tree)
            finally:
                fresh.unlock()
    finally:
        tree.unlock()
    trees.evict(work_root, budget_bytes=req.trees_budget_bytes, log=lambda m: report("collect", m))
    result.duration_s = time.monotonic() - started
    report("done", "ok" if result.ok else f"failed: {result.error}"[:200])
    return result


def _prepare_tree(tree: WarmTree, repo: Path, sha: str, distance: int | None, report: ProgressFn) -> str:
    """Check `sha` out in the (locked) tree and return the sha whose objects
    its obj holds ("" = obj is empty: a clean build)."""
    state = tree.state
    assert state is not None
    # Room for this build: unused trees go first, least recently used first.
    trees.evict(
        tree.path.parent.parent,
        budget_bytes=2**63,
        need_free=MIN_FREE_BYTES,
        keep=frozenset({tree.name}),
        log=lambda m: report("checkout", m),
    )
    check_free_space(tree.path.parent)
    reused = state.sha if state.clean and (tree.obj / ".config").is_file() else ""
    had_src = bool(state.sha) and tree.src.is_dir()
    state.clean, state.last_used = False, time.time()
    tree.save()
    if had_src:
        how = "distance unknown" if distance is None else f"{distance} file{'' if distance == 1 else 's'} changed"
        report("checkout", f"checking out {sha[:12]} in {tree.name} (last built {state.sha[:12]}; {how})")
        try:
            tree.checkout(sha)
        except BuildInfraError as exc:
            # A worktree whose repository moved or was re-cloned: start it anew.
            report("checkout", f"{tree.name} unusable ({str(exc)[:120]}); checking out afresh")
            had_src, reused = False, ""
    if not had_src:
        report("checkout", f"checking out {sha[:12]} into a new tree {tree.name}")
        trees.create_worktree(tree, repo, sha)
    if not reused:
        tree.wipe_obj()
    else:
        # The configuration is made afresh (tinyconfig + fragments +
        # olddefconfig), exactly as in a clean build: the new commit's
        # Kconfig may differ. Artifacts a failed build might not overwrite
        # go too, so nothing stale can be collected.
        (tree.obj / ".config").unlink(missing_ok=True)
        # init/build-version counts links in obj/.version: #2 after #1 would
        # put a different UTS_VERSION into the image than a clean build's #1.
        (tree.obj / ".version").unlink(missing_ok=True)
        for stale in [*tree.obj.glob("modules.tar*"), *tree.obj.glob("arch/*/boot/*Image")]:
            stale.unlink(missing_ok=True)
    state.sha = sha
    tree.save()
    return reused


def _run_tuxmake(
    req: BuildRequest,
    *,
    tree: WarmTree,
    output_dir: Path,
    fragments: Sequence[Path],
    ccache_dir: Path,
    work_root: Path,
    digest: str,
    report: ProgressFn,
) -> BuildResult:
    src, obj = tree.src, tree.obj
    sandbox = req.sandbox or Sandbox.from_environ()
    # Scratch the build may write besides obj: /tmp and HOME inside the
    # sandbox, the ccache stats log, the benchmark modules' copies.
    scratch = tree.path / "scratch"
    shutil.rmtree(scratch, ignore_errors=True)
    (scratch / "tmp").mkdir(parents=True)
    (scratch / "ext").mkdir()
    stats_log = scratch / "ccache-stats.log"
    jobs = req.jobs or os.cpu_count() or 1
    argv = [
        sys.executable,
        "-m",
        "tuxmake",
        "--runtime",
        "null",
        "--wrapper",
        "ccache",
        "--target-arch",
        req.arch,
        "--toolchain",
        "gcc",
        "--kconfig",
        BASE_CONFIG,
    ]
    for frag in fragments:
        argv += ["--kconfig-add", str(frag)]
    argv += [
        "--kernel-image",
        KERNEL_IMAGES[req.arch],
        "--build-dir",
        str(obj),
        "--output-dir",
        str(output_dir),
        "--jobs",
        str(jobs),
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
            for name, value in _reproducible_env(src, req.sha).items()
            for arg in ("--environment", f"{name}={value}")
        ),
        "--directory",
        str(src),
        f"CROSS_COMPILE={CROSS_COMPILE[req.arch]}",
        "config",
        "kernel",
        "modules",
    ]
    env = build_env(sandbox, scratch / "tmp")
    env.update(
        CCACHE_DIR=str(ccache_dir),
        CCACHE_BASEDIR=str(work_root),
        CCACHE_STATSLOG=str(stats_log),
    )
    writable = [obj, output_dir, scratch, ccache_dir]
    sandbox.own(*writable)
    # kconfig's merge_config.sh makes its temporary file in the current
    # directory, the checkout: its top directory is writable (sticky, so
    # the checkout's own files cannot be removed or renamed); everything
    # below stays root's, and src/.git read-only, so the worker's next git
    # command in this tree reads kperf's repository, not one the build made.
    if sandbox.drops_to_uid:
        src.chmod(0o1777)

    report("config", f"{BASE_CONFIG} + {', '.join(f.name for f in fragments)}")
    scanner = LogScanner(report, obj, src)

    def on_line(line: str) -> None:
        if scanner.feed(line):
            _check_config(obj / ".config", fragments, report)

    ran = sandbox.run(
        argv,
        cwd=src,
        env=env,
        on_line=on_line,
        readonly=[src / ".git", *{f.parent for f in fragments}],
        writable=[src, *writable],
        watch=[obj, output_dir, scratch],
    )
    returncode = ran.returncode
    if ran.stopped:
        # The tree's own build passed a limit (ran too long, wrote or
        # printed too much): the kernel's failure, not the machine's.
        report("done", ran.stopped)
        build_log = output_dir / "build.log"
        with contextlib.suppress(OSError):
            nofollow.write_text(build_log, "\n".join(scanner.tail) + f"\n{ran.stopped}\n")
        return BuildResult(
            ok=False,
            artifacts={"build-log": build_log} if nofollow.is_regular(build_log) else {},
            config_digest=digest,
            log_tail=scanner.log_tail() + f"\n{ran.stopped}",
            duration_s=0.0,
            error=ran.stopped,
            compiled=scanner.compiled,
        )

    ccache_stats = read_stats_log(stats_log)
    # What tuxmake recorded of each target (config, kernel, modules), not what the log's text says.
    recorded = read_target_status(output_dir)
    targets = recorded or {}
    # A tree can print these words itself: believed only when the disk
    # really is short, so a build cannot pass its failure off as kperf's.
    if any(NO_SPACE in line for line in scanner.tail) and free_bytes(work_root) < MIN_FREE_BYTES:
        raise BuildInfraError(
            f"the build ran out of disk space under {work_root} or {output_dir}: "
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
    # make ended by itself, so obj is consistent even if the kernel failed
    # (kbuild deletes the target of a failed recipe): the next build may
    # start from it.
    assert tree.state is not None
    tree.state.clean = True
    tree.save()

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
    kernel = output_dir / KERNEL_IMAGES[req.arch]
    kernel_ok = targets.get("kernel") == "PASS" and nofollow.is_regular(kernel)
    if kernel_ok:
        artifacts["kernel"] = kernel
        system_map = obj / "System.map"
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

    ok = returncode == 0 and kernel_ok and targets.get("modules") in ("PASS", "SKIP")
    warnings: list[str] = []
    if ok:
        report("modules", f"building {', '.join(module_names()) or 'no'} benchmark module(s)")
        built, warnings = build_benchmark_modules(
            req.arch, src, obj, output_dir, scratch / "ext", sandbox.make_runner(src, env, writable), sandbox.own
        )
        artifacts.update(built)
        for warning in warnings:
            report("modules", warning[:200])
    error = ""
    if not ok:
        error = scanner.first_error or f"build failed (tuxmake exit {returncode})"
        if recorded is None:
            # make ran, so the tree's code could have removed or spoilt it.
            error += "; tuxmake left no readable metadata.json after the build ran"
    return BuildResult(
        ok=ok,
        artifacts=artifacts,
        config_digest=digest,
        log_tail=scanner.log_tail(),
        duration_s=0.0,
        error=error,
        ccache_stats=ccache_stats,
        warnings=warnings,
        compiled=scanner.compiled,
    )


def _reproducible_env(src: Path, sha: str) -> dict[str, str]:
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


def _check_config(config: Path, fragments: Sequence[Path], report: ProgressFn) -> None:
    if not nofollow.is_regular(config):
        return
    wanted: dict[str, str] = {}
    for frag in fragments:
        wanted.update(parse_fragment(frag.read_text()))
    try:
        unmet = unmet_options(nofollow.read_text(config), wanted)
    except (OSError, ValueError):
        # Not a .config kbuild wrote (the tree's own scripts made it): the
        # build's own result will say what went wrong.
        return
    if unmet:
        # Not fatal: an option can legitimately be unavailable (another arch,
        # a symbol renamed in this tree). The build log and progress say so.
        listing = ", ".join(f"{k} (wanted {wanted[k]}, got {v})" for k, v in sorted(unmet.items()))
        report("config", f"options not applied: {listing}"[:200])
        with contextlib.suppress(OSError):
            nofollow.write_text(config.with_name("kperf-unmet-options"), listing + "\n")


def _clear_outputs(output_dir: Path) -> None:
    # A failed build must not leave the previous build's image looking fresh.
    names = [*KERNEL_IMAGES.values(), "config", "build.log", "build-debug.log", "System.map"]
    names += ["metadata.json", "reproducer.sh"]
    for name in names:
        (output_dir / name).unlink(missing_ok=True)
    for old in output_dir.glob("modules.tar*"):
        old.unlink()
    for name in module_names():
        (output_dir / f"{name}.ko").unlink(missing_ok=True)
        (output_dir / f"{name}-module.log").unlink(missing_ok=True)


def _check_arch(arch: str) -> None:
    if arch not in SUPPORTED_ARCHES:
        raise ValueError(f"unsupported arch {arch!r}; kperf builds {', '.join(SUPPORTED_ARCHES)}")
