"""What a build is asked to do, and what it answers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kperf_kbuild.profiles import DEFAULT_PROFILE
from kperf_kbuild.sandbox import Sandbox
from kperf_kbuild.trees import DEFAULT_BUDGET_BYTES


@dataclass(frozen=True)
class BuildRequest:
    repo: Path
    sha: str
    arch: str
    work_root: Path
    output_dir: Path
    fragments: tuple[Path, ...] = ()
    # The configuration profile (kperf_kbuild.profiles): its fragments come
    # after the arch fragment and before `fragments`.
    profile: str = DEFAULT_PROFILE
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
    # The commit whose complete .config this build started from instead of
    # making it afresh (kperf_kbuild.kconfig.affects_config): "" = made afresh.
    config_from: str = ""
