"""Compile the C sources in csrc/ into static binaries for an architecture.

Static, because they run as /init and benchmarks in an initramfs with no
libc, and on bare-metal root filesystems of any vintage. Each binary is
cached in the state directory under a key made of the source, the compiler's
identity, the flags and the arch, so a new compiler or an edited source
rebuilds and nothing else does.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

CSRC = Path(__file__).resolve().parent / "csrc"

COMMON_HEADER = "kperf_bench.h"
CFLAGS = ("-std=gnu11", "-O2", "-Wall", "-Wextra", "-static", "-s")

# Sources built without the C library: true.c is the few-hundred-byte
# program aim9's exec_test executes (its own _start makes exit_group).
EXTRA_CFLAGS: dict[str, tuple[str, ...]] = {
    "true.c": ("-nostdlib", "-nostartfiles", "-ffreestanding", "-Wl,--build-id=none"),
}

# Arch names follow the kernel's (ARCH=x86_64 / arm64), as the service does.
ARCH_ALIASES = {
    "x86_64": "x86_64",
    "amd64": "x86_64",
    "arm64": "arm64",
    "aarch64": "arm64",
}

# (compiler, Debian package with it, Debian package with its static libc)
_CROSS = {
    "arm64": (
        "aarch64-linux-gnu-gcc",
        "gcc-aarch64-linux-gnu",
        "libc6-dev-arm64-cross",
    ),
    "x86_64": ("x86_64-linux-gnu-gcc", "gcc-x86-64-linux-gnu", "libc6-dev-amd64-cross"),
}


class ToolchainError(RuntimeError):
    """No usable compiler or static libc for an arch, or a source that fails to build."""


def normalize_arch(arch: str) -> str:
    try:
        return ARCH_ALIASES[arch]
    except KeyError:
        raise ToolchainError(
            f"unknown arch {arch!r}; kperf knows {', '.join(sorted(set(ARCH_ALIASES.values())))}"
        ) from None


def host_arch() -> str:
    return normalize_arch(platform.machine().lower())


@dataclass(frozen=True)
class Compiler:
    path: str
    arch: str
    version: str  # first line of `--version`: part of the cache key
    package: str
    libc_package: str


_compilers: dict[str, Compiler] = {}


def find_compiler(arch: str) -> Compiler:
    """The C compiler that produces binaries for arch on this host."""
    arch = normalize_arch(arch)
    if arch in _compilers:
        return _compilers[arch]
    if arch == host_arch():
        candidates = [os.environ.get("CC", ""), "cc", "gcc"]
        package, libc_package = "gcc", "libc6-dev"
    else:
        cross, package, libc_package = _CROSS[arch]
        candidates = [cross]
    for name in candidates:
        path = shutil.which(name) if name else None
        if path:
            break
    else:
        raise ToolchainError(
            f"no C compiler for {arch} found (looked for {', '.join(c for c in candidates if c)}); "
            f"install it with: apt-get install {package} {libc_package}"
        )
    try:
        run = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as error:
        raise ToolchainError(f"{path} --version failed: {error}") from error
    version = (run.stdout.splitlines() or ["unknown"])[0]
    compiler = Compiler(path, arch, version, package, libc_package)
    _compilers[arch] = compiler
    return compiler


def source_path(source: str) -> Path:
    path = CSRC / source
    if not path.is_file():
        raise ToolchainError(f"no source {source!r} in {CSRC}")
    return path


def _read_if_exists(path: Path) -> bytes:
    return path.read_bytes() if path.is_file() else b""


def compile_static(source: str, arch: str, state_dir: Path) -> Path:
    """The cached static binary built from csrc/<source> for arch."""
    compiler = find_compiler(arch)
    src = source_path(source)
    text = src.read_bytes()
    key = hashlib.sha256()
    for part in (
        text,
        # Every program may include the headers (kperf_bench.h, init's
        # init_tuning.h): they are part of its source.
        *(_read_if_exists(header) for header in sorted(CSRC.glob("*.h"))),
        compiler.path.encode(),
        compiler.version.encode(),
        compiler.arch.encode(),
    ):
        key.update(part)
        key.update(b"\0")
    flags = (*CFLAGS, *EXTRA_CFLAGS.get(source, ()))
    key.update(" ".join(flags).encode())
    name = src.stem
    target = state_dir / "bin" / compiler.arch / f"{name}-{key.hexdigest()[:16]}" / name
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Compile next to the target and rename: two agents sharing a state dir,
    # or one killed mid-compile, never leave a half-written binary behind.
    fd, tmp = tempfile.mkstemp(prefix=f".{name}-", dir=target.parent)
    os.close(fd)
    command = [compiler.path, *flags, "-I", str(CSRC), "-o", tmp, str(src)]
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
        if run.returncode != 0:
            raise ToolchainError(_explain_failure(compiler, source, run.stderr))
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    except subprocess.TimeoutExpired as error:
        raise ToolchainError(f"compiling {source} for {arch} timed out") from error
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _explain_failure(compiler: Compiler, source: str, stderr: str) -> str:
    tail = "\n".join(stderr.strip().splitlines()[-15:])
    static_libc_missing = any(
        marker in stderr for marker in ("cannot find -lc", "crt1.o", "libc.a", "stdio.h: No such")
    )
    if static_libc_missing:
        return (
            f"{compiler.path} has no static C library for {compiler.arch}; "
            f"install it with: apt-get install {compiler.libc_package}\n{tail}"
        )
    return f"compiling {source} for {compiler.arch} with {compiler.path} failed:\n{tail}"


def compile_all(sources: list[str], arch: str, state_dir: Path) -> dict[str, Path]:
    """{binary name: path} for each source, e.g. {"spawn": .../spawn}."""
    return {source_path(src).stem: compile_static(src, arch, state_dir) for src in sources}
