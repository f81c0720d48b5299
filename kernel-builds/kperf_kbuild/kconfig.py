"""The kernel configuration kperf asks for: the base, the arch fragments,
their digest, and whether a .config has what was asked."""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

from kperf_kbuild import modules as benchmark_modules
from kperf_kbuild import nofollow
from kperf_kbuild.logscan import ProgressFn
from kperf_kbuild.modules import module_sources
from kperf_kbuild.profiles import BASE_CONFIG, DEFAULT_PROFILE, profile_fragments

SUPPORTED_ARCHES = ("x86_64", "arm64")

CONFIGS_DIR = Path(__file__).resolve().parent / "configs"

# Image names as QEMU's -kernel and kexec want them. tuxmake's arm64 default
# is Image.gz; the uncompressed Image boots everywhere without a decompressor
# stub and kexec_file_load takes it directly.
KERNEL_IMAGES = {"x86_64": "bzImage", "arm64": "Image"}


def affects_config(path: str) -> bool:
    """Whether a change to the tree's file `path` can change what tinyconfig,
    the fragments and olddefconfig make of the tree.

    The configuration is a function of the Kconfig files, the in-tree
    fragments tinyconfig merges (kernel/configs/, arch/*/configs/), the
    scripts Kconfig runs to probe the toolchain (scripts/, by
    scripts/Kconfig.include) and the Makefiles that drive it, besides kperf's
    own fragments (the warm tree's config digest) and the compiler (whose
    symbols have no prompt, so olddefconfig computes them again). A change
    touching none of these leaves the configuration as it was; anything in
    doubt counts as a change.
    """
    parts = path.split("/")
    name = parts[-1]
    return (
        name.startswith("Kconfig")
        or (name in ("Makefile", "Kbuild") and len(parts) <= 3)
        or parts[0] == "scripts"
        or "configs" in parts[:-1]
    )


def check_arch(arch: str) -> None:
    if arch not in SUPPORTED_ARCHES:
        raise ValueError(f"unsupported arch {arch!r}; kperf builds {', '.join(SUPPORTED_ARCHES)}")


def arch_fragment(arch: str) -> Path:
    """The default fragment for ``arch``, always applied first."""
    check_arch(arch)
    return CONFIGS_DIR / f"{arch}.config"


def config_digest(arch: str, fragments: Sequence[Path] = (), profile: str = DEFAULT_PROFILE) -> str:
    """sha256 (hex) identifying the kernel configuration a build asks for.

    Hashes the base config name and the text of the arch fragment, of the
    profile's fragments and of the extra fragments, in order (order matters:
    later fragments win). Each part is length-prefixed so that moving text
    from one fragment to the next cannot produce the same digest. The
    default profile adds no part, so its digest is the one builds had
    before profiles existed. (The distro profile's base is the release's
    Debian configuration, which the service cannot read: its digest names the
    profile, and the build's recorded .config says the rest.)
    """
    h = hashlib.sha256()

    def part(data: bytes) -> None:
        h.update(b"%d:" % len(data))
        h.update(data)

    part(b"kperf-config-v1")
    part(BASE_CONFIG.encode())
    if profile != DEFAULT_PROFILE:
        part(b"profile:" + profile.encode())
    for path in (arch_fragment(arch), *profile_fragments(profile, arch), *fragments):
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


def release_neutral(options: dict[str, str]) -> dict[str, str]:
    """A .config's options with one choice that releases spell differently
    written one way, so that a fragment's pin is met on every release and two
    releases making the same choice do not read as a difference.

    - The size of core data structures: up to 6.8 a bool BASE_FULL (off:
      small) and an int BASE_SMALL derived from it (1: small); from 6.9 only
      a bool BASE_SMALL. Read as both bools, whichever the tree has.
    - Split page-table locks: up to 6.8 an int SPLIT_PTLOCK_CPUS, the locks
      split when NR_CPUS reaches it (and the PMD's too where the arch allows);
      later the bools SPLIT_PTE_PTLOCKS and SPLIT_PMD_PTLOCKS. Read as the bools.
    - Kernel memory accounting: up to 6.9 MEMCG_KMEM, from 6.10 part of
      MEMCG. Read as MEMCG_KMEM, on with MEMCG where the tree has no such option.
    """
    out = dict(options)
    small = out.get("CONFIG_BASE_SMALL", "n")
    if small in ("0", "1"):
        small = out["CONFIG_BASE_SMALL"] = "y" if small == "1" else "n"
    if "CONFIG_BASE_FULL" not in out:
        out["CONFIG_BASE_FULL"] = "n" if small == "y" else "y"
    threshold = out.pop("CONFIG_SPLIT_PTLOCK_CPUS", None)
    if threshold is not None and "CONFIG_SPLIT_PTE_PTLOCKS" not in out:
        try:
            pte = out.get("CONFIG_MMU", "n") == "y" and int(out.get("CONFIG_NR_CPUS", "1")) >= int(threshold)
        except ValueError:
            pte = False
        out["CONFIG_SPLIT_PTE_PTLOCKS"] = "y" if pte else "n"
        pmd = pte and out.get("CONFIG_ARCH_ENABLE_SPLIT_PMD_PTLOCK", "n") == "y"
        out["CONFIG_SPLIT_PMD_PTLOCKS"] = "y" if pmd else "n"
    if out.get("CONFIG_MEMCG", "n") == "y" and "CONFIG_MEMCG_KMEM" not in out:
        out["CONFIG_MEMCG_KMEM"] = "y"
    return out


def unmet_options(config_text: str, wanted: dict[str, str]) -> dict[str, str]:
    """Options of ``wanted`` that the final .config does not have as asked:
    {"CONFIG_X": "<value in .config, or n>"}. Kconfig drops a requested option
    silently when its dependencies are missing, so this is how to notice."""
    final = release_neutral(parse_fragment(config_text))
    return {name: final.get(name, "n") for name, value in wanted.items() if final.get(name, "n") != value}


def check_config(config: Path, fragments: Sequence[Path], report: ProgressFn) -> None:
    """Say (progress, and a kperf-unmet-options file beside it) which asked-for options the .config lacks."""
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
