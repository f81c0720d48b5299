"""Build one kernel: a commit of a git repository, for one arch, with kperf's
config fragments, out of tree, through ccache, and collect its artifacts.

The build runs tuxmake with its null runtime (the host's own toolchain, no
containers, no network): tuxmake already knows each arch's make variables,
image names, how to merge fragments onto tinyconfig and how to package
modules, and its reproducer line and metadata.json make a failed build easy
to replay by hand.

Layout under ``work_root`` (one directory per build, removed afterwards so
disk use does not grow with the number of builds)::

    work_root/<key>.lock   held while <key> builds (two workers, one key)
    work_root/<key>/src    a detached git worktree of the commit
    work_root/<key>/obj    tuxmake's build directory (make O=...)

``CCACHE_BASEDIR=work_root`` makes ccache hash ``../src/mm/foo.c`` instead of
``/work_root/<key>/src/mm/foo.c``; since every build's obj and src sit at the
same depth, every build of every commit hashes alike and unchanged files hit.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SUPPORTED_ARCHES = ("x86_64", "arm64")

# The base every fragment is merged onto. Part of the config digest, so
# changing it gives every build a new key.
BASE_CONFIG = "tinyconfig"

CONFIGS_DIR = Path(__file__).resolve().parent / "configs"

# Out-of-tree modules built against every kernel (kernel-builds/modules/<name>/,
# each with a Kbuild file): the benchmarks that run inside the kernel. Their
# sources are part of the config digest, so editing one rebuilds the kernels.
MODULES_DIR = Path(__file__).resolve().parent.parent / "modules"

# Image names as QEMU's -kernel and kexec want them. tuxmake's arm64 default
# is Image.gz; the uncompressed Image boots everywhere without a decompressor
# stub and kexec_file_load takes it directly.
KERNEL_IMAGES = {"x86_64": "bzImage", "arm64": "Image"}

# tuxmake picks x86_64-linux-gnu- for x86_64 (Debian's native gcc answers to
# that name too); arm64 is cross-built with Debian's gcc-aarch64-linux-gnu.
CROSS_COMPILE = {"x86_64": "x86_64-linux-gnu-", "arm64": "aarch64-linux-gnu-"}

LOG_TAIL_LINES = 40

# Free space a build needs under work_root: a 6.1 checkout is 1.5 GB and a
# tinyconfig-sized obj dir a few hundred MB; larger configs need more.
MIN_FREE_BYTES = 3 * 1024**3

# Commands the build needs and the Debian package that provides each, so the
# error tells an operator exactly what to install.
_HOST_TOOLS = {
    "git": "git",
    "make": "make",
    "gcc": "gcc",
    "ccache": "ccache",
    "flex": "flex",
    "bison": "bison",
    "bc": "bc",
    "perl": "perl",
    "tar": "tar",
    "xz": "xz-utils",
}
_CROSS_PACKAGES = {"x86_64": "gcc-x86-64-linux-gnu", "arm64": "gcc-aarch64-linux-gnu"}

# Variables a caller's environment may carry that would silently change the
# kernel build: make's jobserver plumbing when the caller itself runs under
# make (pytest from `make test`), and kbuild's own knobs.
_SCRUBBED_ENV = (
    "MAKEFLAGS",
    "MFLAGS",
    "MAKELEVEL",
    "MAKEOVERRIDES",
    "ARCH",
    "SRCARCH",
    "CROSS_COMPILE",
    "KBUILD_OUTPUT",
    "KCONFIG_CONFIG",
    "KCFLAGS",
    "KCPPFLAGS",
    "KAFLAGS",
    "LOCALVERSION",
    "CCACHE_BASEDIR",
    "CCACHE_DIR",
    "CCACHE_STATSLOG",
)

# kbuild's quiet-mode lines ("  CC      mm/slub.o"): one per produced file.
_KBUILD_STEP = re.compile(r"^\s{2}([A-Z][A-Z0-9_]*(?: \[M\])?)\s+(\S+)")
_COMPILE_STEPS = frozenset({"CC", "AS", "HOSTCC", "HOSTCXX", "CPP", "CC [M]"})
# tuxmake echoes each command it runs before running it.
_MAKE_ECHO = re.compile(r"^make\s.*\sO=\S+")
_TUXMAKE_STATUS = re.compile(r"^I: (\S+): (PASS|FAIL|SKIP|WARNING) in ")
_FIRST_ERROR = re.compile(r"(: (fatal )?error: |^make(\[\d+\])?: \*\*\* |Error \d+$|: undefined reference to |^E: )")
_NO_SPACE = "No space left on device"
# What gcc's driver prints when the kernel's OOM killer takes cc1: the
# machine is short of memory, the commit is not at fault.
_COMPILER_KILLED = "Killed signal terminated program"


class BuildInfraError(Exception):
    """The build could not run for a reason that is not the kernel's fault
    (missing tool, unknown commit, no disk space...). The message says what
    went wrong and what to do about it."""


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


ProgressFn = Callable[[str, str], None]


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
        part(b"module:" + path.relative_to(MODULES_DIR).as_posix().encode())
        part(path.read_bytes())
    return h.hexdigest()


def module_names() -> list[str]:
    """The out-of-tree modules built with every kernel, e.g. ["pagealloc"]."""
    if not MODULES_DIR.is_dir():
        return []
    return sorted(d.name for d in MODULES_DIR.iterdir() if (d / "Kbuild").is_file())


def module_sources() -> list[Path]:
    """Every file of every module in module_names(), in a fixed order."""
    return [
        path
        for name in module_names()
        for path in sorted((MODULES_DIR / name).rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    ]


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
    fragments = (arch_fragment(req.arch), *(Path(f).resolve() for f in req.fragments))
    for frag in fragments:
        if not frag.is_file():
            raise BuildInfraError(f"config fragment {frag} does not exist")
    digest = config_digest(req.arch, req.fragments)
    _check_tools(req.arch)
    repo = Path(req.repo).resolve()
    _check_commit(repo, req.sha)

    work_root = Path(req.work_root).resolve()
    work_root.mkdir(parents=True, exist_ok=True)
    _check_free_space(work_root)
    output_dir = Path(req.output_dir).resolve()
    output_dir.mkdir(parents=True, exist_ok=True)
    ccache_dir = Path(req.ccache_dir).resolve() if req.ccache_dir else _default_ccache_dir()
    ccache_dir.mkdir(parents=True, exist_ok=True)

    key = f"{req.arch}-{req.sha[:12]}-{digest[:12]}"
    build_root = work_root / key
    with file_lock(work_root / f"{key}.lock"):
        _remove_build_root(repo, build_root)
        build_root.mkdir()
        try:
            report("checkout", f"checking out {req.sha[:12]}")
            src = build_root / "src"
            _git(
                repo,
                "-c",
                "checkout.workers=0",  # parallel checkout: one worker per core
                "worktree",
                "add",
                "--detach",
                str(src),
                req.sha,
                what=f"check out {req.sha} from {repo}",
            )
            _clear_outputs(output_dir)
            result = _run_tuxmake(
                req,
                src=src,
                obj=build_root / "obj",
                output_dir=output_dir,
                fragments=fragments,
                ccache_dir=ccache_dir,
                work_root=work_root,
                stats_log=build_root / "ccache-stats.log",
                digest=digest,
                report=report,
            )
        finally:
            _remove_build_root(repo, build_root)
    result.duration_s = time.monotonic() - started
    report("done", "ok" if result.ok else f"failed: {result.error}"[:200])
    return result


def _run_tuxmake(
    req: BuildRequest,
    *,
    src: Path,
    obj: Path,
    output_dir: Path,
    fragments: Sequence[Path],
    ccache_dir: Path,
    work_root: Path,
    stats_log: Path,
    digest: str,
    report: ProgressFn,
) -> BuildResult:
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
        "--directory",
        str(src),
        f"CROSS_COMPILE={CROSS_COMPILE[req.arch]}",
        "config",
        "kernel",
        "modules",
    ]
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
    env.update(
        CCACHE_DIR=str(ccache_dir),
        CCACHE_BASEDIR=str(work_root),
        CCACHE_STATSLOG=str(stats_log),
        # English, untranslated compiler messages: error lines are parsed.
        LC_ALL="C",
        LANG="C",
    )

    report("config", f"{BASE_CONFIG} + {', '.join(f.name for f in fragments)}")
    scanner = _LogScanner(report, obj, src)
    try:
        proc = subprocess.Popen(
            argv,
            cwd=src,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            # Own process group, so an interrupted build can be stopped whole
            # (tuxmake -> make -> gcc) instead of leaving orphans compiling.
            start_new_session=True,
        )
    except OSError as exc:
        raise BuildInfraError(f"cannot start tuxmake ({exc}); reinstall kperf-kbuild") from exc
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if scanner.feed(line):
                _check_config(obj / ".config", fragments, report)
        returncode = proc.wait()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
        raise

    ccache_stats = _read_stats_log(stats_log)
    if any(_NO_SPACE in line for line in scanner.tail):
        raise BuildInfraError(
            f"the build ran out of disk space under {work_root} or {output_dir}: "
            f"free space there and rebuild\n{scanner.log_tail()}"
        )
    if any(_COMPILER_KILLED in line for line in scanner.tail):
        raise BuildInfraError(
            f"a compiler process was killed during the build (out of memory?): lower "
            f"jobs or add memory, then rebuild\n{scanner.log_tail()}"
        )
    if "config" not in scanner.status:
        # tuxmake stopped before running any target: its own setup failed
        # (bad arguments, unwritable output dir), not the kernel.
        raise BuildInfraError(
            f"tuxmake failed before building (exit {returncode}); see its output:\n{scanner.log_tail()}"
        )

    report("collect", f"copying artifacts to {output_dir}")
    build_log = output_dir / "build.log"
    if not build_log.exists():
        build_log.write_text("\n".join(scanner.tail) + "\n")
    artifacts = {"build-log": build_log}
    config = output_dir / "config"
    if config.exists():
        artifacts["config"] = config
    kernel = output_dir / KERNEL_IMAGES[req.arch]
    kernel_ok = scanner.status.get("kernel") == "PASS" and kernel.exists()
    if kernel_ok:
        artifacts["kernel"] = kernel
        system_map = obj / "System.map"
        if system_map.exists():
            # Symbols for the runner's perf reports and oops decoding.
            artifacts["system-map"] = Path(shutil.copy2(system_map, output_dir / "System.map"))
    modules = next(iter(sorted(output_dir.glob("modules.tar*"))), None)
    if modules is not None:
        if _has_modules(modules):
            artifacts["modules"] = modules
        else:
            # Only modules.order & co.: shipping it would suggest modules exist.
            modules.unlink()

    ok = returncode == 0 and kernel_ok and scanner.status.get("modules") in ("PASS", "SKIP")
    warnings: list[str] = []
    if ok:
        report("modules", f"building {', '.join(module_names()) or 'no'} benchmark module(s)")
        built, warnings = _build_benchmark_modules(req, src, obj, output_dir, env, obj.parent / "ext")
        artifacts.update(built)
        for warning in warnings:
            report("modules", warning[:200])
    error = ""
    if not ok:
        error = scanner.first_error or f"build failed (tuxmake exit {returncode})"
    return BuildResult(
        ok=ok,
        artifacts=artifacts,
        config_digest=digest,
        log_tail=scanner.log_tail(),
        duration_s=0.0,
        error=error,
        ccache_stats=ccache_stats,
        warnings=warnings,
    )


def _build_benchmark_modules(
    req: BuildRequest, src: Path, obj: Path, output_dir: Path, env: dict[str, str], scratch: Path
) -> tuple[dict[str, Path], list[str]]:
    """Build each module of MODULES_DIR against the finished kernel in obj
    (kbuild's external-module build, M=), while its object tree and .config
    still exist; the artifact is ``<name>.ko`` in output_dir.

    A module that cannot be built is a warning, not a failed build: the
    kernel is fine and every other benchmark can run on it. The job of the
    benchmark that needs the module fails with the warning instead.
    """
    names = module_names()
    artifacts: dict[str, Path] = {}
    warnings: list[str] = []
    if not names:
        return artifacts, warnings
    config = obj / ".config"
    options = parse_fragment(config.read_text()) if config.is_file() else {}
    if options.get("CONFIG_MODULES") != "y":
        reason = "the kernel's .config has no CONFIG_MODULES=y (a fragment turned it off?)"
        return artifacts, [f"{name}.ko not built: {reason}" for name in names]
    for name in names:
        moddir = scratch / name
        shutil.rmtree(moddir, ignore_errors=True)
        # kbuild writes objects next to the sources of an external module:
        # build a copy, never the package's own directory.
        shutil.copytree(MODULES_DIR / name, moddir)
        argv = [
            "make",
            "-C",
            str(obj),
            f"ARCH={req.arch}",
            f"CROSS_COMPILE={CROSS_COMPILE[req.arch]}",
            f"M={moddir}",
            "KCFLAGS=",
            "modules",
        ]
        proc = subprocess.run(
            argv, cwd=src, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
        )
        log_path = output_dir / f"{name}-module.log"
        log_path.write_text(f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}")
        built = moddir / f"{name}.ko"
        if proc.returncode != 0 or not built.is_file():
            lines = (proc.stdout + proc.stderr).splitlines()
            first = next((line for line in lines if _FIRST_ERROR.search(line)), lines[-1] if lines else "")
            first = first.replace(f"{moddir}/", "").strip()
            warnings.append(f"{name}.ko not built: {first[:300] or f'make exited with {proc.returncode}'}")
            continue
        artifacts[f"{name}.ko"] = Path(shutil.copy2(built, output_dir / f"{name}.ko"))
    return artifacts, warnings


class _LogScanner:
    """Follows tuxmake's output: phases, a count of compiled files (for
    progress), the first error line and the log's tail."""

    # Progress callbacks usually write to a database; one per second is plenty.
    MIN_INTERVAL_S = 1.0

    def __init__(self, report: ProgressFn, obj: Path | None = None, src: Path | None = None) -> None:
        self.report = report
        # Host tools (objtool) are built with absolute paths into the obj
        # dir; shown relative, like every other kbuild line.
        self._obj_prefix = f"{obj}/" if obj else ""
        # Compiler messages name files by absolute path in this build's
        # checkout, which means nothing to the user reading the error.
        self._src_prefix = f"{src}/" if src else ""
        self.phase = "config"
        self.compiled = 0
        self.first_error = ""
        self.status: dict[str, str] = {}
        # Plenty for the tail, and for a build.log if tuxmake never wrote one.
        self.tail: collections.deque[str] = collections.deque(maxlen=2000)
        self._last_report = 0.0

    def feed(self, line: str) -> bool:
        """Take one output line; True when the configuration just became
        final (the first make command after the config target)."""
        self.tail.append(line)
        status = _TUXMAKE_STATUS.match(line)
        if status:
            self.status[status.group(1)] = status.group(2)
            return False
        if not self.first_error and _FIRST_ERROR.search(line):
            error = line.strip()
            if self._src_prefix:
                error = error.replace(self._src_prefix, "")
            self.first_error = error[:300]
        if _MAKE_ECHO.match(line):
            last = line.split()[-1]
            if self.phase == "config" and not last.endswith("config"):
                self.phase = "build"
                self.report("build", "compiling")
                return True
            return False
        step = _KBUILD_STEP.match(line)
        if step and self.phase == "build":
            if step.group(1) in _COMPILE_STEPS:
                self.compiled += 1
            now = time.monotonic()
            if now - self._last_report >= self.MIN_INTERVAL_S:
                self._last_report = now
                target = step.group(2)
                if self._obj_prefix and target.startswith(self._obj_prefix):
                    target = target[len(self._obj_prefix) :]
                self.report("build", f"{self.compiled} files compiled; {step.group(1)} {target}")
        return False

    def log_tail(self) -> str:
        lines = list(self.tail)[-LOG_TAIL_LINES:]
        # With -j, the compiler's message can scroll above the last lines
        # under make's "Error 1" cascade; the user needs that line most.
        if self.first_error and not any(self.first_error in line.replace(self._src_prefix, "") for line in lines):
            lines = [f"first error: {self.first_error}", "...", *lines]
        return "\n".join(lines)


def _check_config(config: Path, fragments: Sequence[Path], report: ProgressFn) -> None:
    if not config.exists():
        return
    wanted: dict[str, str] = {}
    for frag in fragments:
        wanted.update(parse_fragment(frag.read_text()))
    unmet = unmet_options(config.read_text(), wanted)
    if unmet:
        # Not fatal: an option can legitimately be unavailable (another arch,
        # a symbol renamed in this tree). The build log and progress say so.
        listing = ", ".join(f"{k} (wanted {wanted[k]}, got {v})" for k, v in sorted(unmet.items()))
        report("config", f"options not applied: {listing}"[:200])
        with contextlib.suppress(OSError), config.with_name("kperf-unmet-options").open("w") as f:
            f.write(listing + "\n")


def _read_stats_log(stats_log: Path) -> dict[str, int]:
    """Count the counters in a ccache stats log: one ``# <file>`` line per
    compilation followed by the ids of the counters it bumped."""
    counts: collections.Counter[str] = collections.Counter()
    with contextlib.suppress(FileNotFoundError):
        for line in stats_log.read_text(errors="replace").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                counts[line] += 1
    return dict(counts)


def _has_modules(tarball: Path) -> bool:
    # modules_install with zero modules still writes modules.order & co.;
    # only a tarball holding at least one .ko is worth shipping.
    try:
        with tarfile.open(tarball) as tf:
            return any(".ko" in Path(name).suffixes for name in tf.getnames())
    except (tarfile.TarError, OSError):
        return False


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


def _remove_build_root(repo: Path, build_root: Path) -> None:
    if not build_root.exists():
        return
    # Deleting the files and then pruning is `git worktree remove --force`
    # without its per-file checks: 2-3 s instead of ~9 s for 78k files here.
    shutil.rmtree(build_root, ignore_errors=True)
    # Forget worktrees whose directory is gone (this one, or one left by a
    # killed build), or git would refuse to check out at the same path again.
    subprocess.run(
        ["git", "-C", str(repo), "worktree", "prune"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `path` (created if missing): one process at a time."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _git(repo: Path, *args: str, what: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise BuildInfraError(f"could not {what}: git says: {proc.stderr.strip()}")
    return proc.stdout


def _check_arch(arch: str) -> None:
    if arch not in SUPPORTED_ARCHES:
        raise ValueError(f"unsupported arch {arch!r}; kperf builds {', '.join(SUPPORTED_ARCHES)}")


def _check_tools(arch: str) -> None:
    missing = {pkg for tool, pkg in _HOST_TOOLS.items() if shutil.which(tool) is None}
    if shutil.which(f"{CROSS_COMPILE[arch]}gcc") is None:
        missing.add(_CROSS_PACKAGES[arch])
    if missing:
        raise BuildInfraError(
            f"build tools missing for {arch}: install them with `apt-get install {' '.join(sorted(missing))}`"
        )


def _check_commit(repo: Path, sha: str) -> None:
    if not repo.exists():
        raise BuildInfraError(f"repository {repo} does not exist: mirror the tree first")
    probe = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--git-dir"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        raise BuildInfraError(f"{repo} is not a usable git repository: {probe.stderr.strip()}")
    found = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "-e", f"{sha}^{{commit}}"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    if found.returncode != 0:
        raise BuildInfraError(
            f"commit {sha} is not in {repo}: fetch the branch that contains it "
            f"into the mirror (git -C {repo} fetch <remote> <ref>) and retry"
        )


def _check_free_space(path: Path) -> None:
    free = shutil.disk_usage(path).free
    if free < MIN_FREE_BYTES:
        raise BuildInfraError(
            f"only {free / 1024**3:.1f} GiB free under {path}; a build needs at least "
            f"{MIN_FREE_BYTES / 1024**3:.0f} GiB: free space (old build outputs, ccache -C) "
            f"or point work_root elsewhere"
        )


def _default_ccache_dir() -> Path:
    # tuxmake's ccache wrapper would default to ~/.ccache; ask ccache for its
    # own default (~/.cache/ccache on ccache 4) so "None" means what ccache means.
    proc = subprocess.run(
        ["ccache", "--get-config", "cache_dir"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    value = proc.stdout.strip()
    if proc.returncode != 0 or not value:
        raise BuildInfraError(f"ccache does not report its cache_dir: {proc.stderr.strip()}")
    return Path(value)
