"""kperf's own kernel modules (kernel-builds/kperf_kbuild/benchmark_modules/<name>/): the benchmarks
that run inside the kernel, built against every kernel kperf builds."""

from __future__ import annotations

import re
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

from kperf_kbuild import nofollow
from kperf_kbuild.host import CROSS_COMPILE
from kperf_kbuild.logscan import FIRST_ERROR

# Out-of-tree modules built against every kernel (kernel-builds/kperf_kbuild/benchmark_modules/<name>/,
# each with a Kbuild file): the benchmarks that run inside the kernel. Their
# sources are part of the config digest, so editing one rebuilds the kernels.
MODULES_DIR = Path(__file__).resolve().parent / "benchmark_modules"

# Runs one make command line where the kernel's build runs (the sandbox):
# (argv) -> (exit code, output).
ModuleRunner = Callable[[list[str]], tuple[int, str]]


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


def build_benchmark_modules(
    arch: str,
    src: Path,
    obj: Path,
    output_dir: Path,
    scratch: Path,
    run: ModuleRunner,
    own: Callable[[Path], None] = lambda path: None,
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
    text = nofollow.read_text(config) if nofollow.is_regular(config) else ""
    if not re.search(r"^CONFIG_MODULES=y$", text, re.MULTILINE):
        reason = "the kernel's .config has no CONFIG_MODULES=y (a fragment turned it off?)"
        return artifacts, [f"{name}.ko not built: {reason}" for name in names]
    for name in names:
        moddir = scratch / name
        shutil.rmtree(moddir, ignore_errors=True)
        # kbuild writes objects next to the sources of an external module:
        # build a copy, never the package's own directory.
        shutil.copytree(MODULES_DIR / name, moddir)
        own(moddir)
        argv = [
            "make",
            "-C",
            str(obj),
            f"ARCH={arch}",
            f"CROSS_COMPILE={CROSS_COMPILE[arch]}",
            f"M={moddir}",
            "KCFLAGS=",
            "modules",
        ]
        returncode, output = run(argv)
        log_path = output_dir / f"{name}-module.log"
        nofollow.write_text(log_path, f"$ {' '.join(argv)}\n{output}")
        built = moddir / f"{name}.ko"
        if returncode != 0 or not nofollow.is_regular(built):
            lines = output.splitlines()
            first = next((line for line in lines if FIRST_ERROR.search(line)), lines[-1] if lines else "")
            first = first.replace(f"{moddir}/", "").strip()
            warnings.append(f"{name}.ko not built: {first[:300] or f'make exited with {returncode}'}")
            continue
        artifacts[f"{name}.ko"] = nofollow.copy(built, output_dir / f"{name}.ko")
    return artifacts, warnings


def has_modules(tarball: Path) -> bool:
    # modules_install with zero modules still writes modules.order & co.;
    # only a tarball holding at least one .ko is worth shipping.
    try:
        with tarfile.open(tarball) as tf:
            return any(".ko" in Path(name).suffixes for name in tf.getnames())
    except (tarfile.TarError, OSError):
        return False
