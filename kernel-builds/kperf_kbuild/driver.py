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
  reproducible (fixed KBUILD_BUILD_* values, .config made afresh wherever
  the commits differ in a file it is made from, else the last one kept),
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
``kperf_kbuild.sandbox``, which sees the checkout read-only (but for new
entries in its top directory, removed after the build) and may write only
its object tree, its outputs, a scratch directory and its scope's ccache,
under a uid no other running build has (kperf_kbuild.build_uids).

Scopes: a warm object tree or a ccache written by one build is read by the
next, so a hostile build could plant an object (or a cache entry) that ends
up in another kernel. Warm trees and ccache therefore belong to a scope and
are only ever shared within it: ``lab`` for what the lab's operators vouch
for (their tracked branches, staff submissions, calibration), and one scope
per submitter otherwise. A submitter can only spoil their own kernels,
which their own patches could do anyway; a submitter's ccache is bounded
after every build (kperf_kbuild.ccache_scope). docs/security.md says more.

The configuration asked for is kperf_kbuild.kconfig's, the request and its
answer kperf_kbuild.request's, and one tuxmake run kperf_kbuild.invoke's;
this module picks the tree, builds, and builds again from scratch when an
incremental build fails.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import replace
from pathlib import Path

from kperf_kbuild import build_uids, ccache_scope, trees
from kperf_kbuild.host import MIN_FREE_BYTES, check_commit, check_free_space, check_tools
from kperf_kbuild.host import BuildInfraError as BuildInfraError
from kperf_kbuild.host import default_ccache_dir as _default_ccache_dir
from kperf_kbuild.host import file_lock as file_lock
from kperf_kbuild.invoke import run_tuxmake
from kperf_kbuild.kconfig import KERNEL_IMAGES, affects_config, check_arch
from kperf_kbuild.kconfig import SUPPORTED_ARCHES as SUPPORTED_ARCHES
from kperf_kbuild.kconfig import arch_fragment as arch_fragment
from kperf_kbuild.kconfig import config_digest as config_digest
from kperf_kbuild.kconfig import parse_fragment as parse_fragment
from kperf_kbuild.kconfig import unmet_options as unmet_options
from kperf_kbuild.logscan import ProgressFn
from kperf_kbuild.modules import module_names
from kperf_kbuild.profiles import DEFAULT_PROFILE as DEFAULT_PROFILE
from kperf_kbuild.profiles import PROFILES as PROFILES
from kperf_kbuild.profiles import check_profile, profile_fragments
from kperf_kbuild.request import BuildRequest as BuildRequest
from kperf_kbuild.request import BuildResult as BuildResult
from kperf_kbuild.sandbox import Sandbox
from kperf_kbuild.trees import WarmTree

# A scope names directories: nothing that could climb out of them.
SCOPE_RE = re.compile(r"[a-z][a-z0-9-]{0,62}")


def scoped_ccache_dir(ccache_dir: Path, scope: str) -> Path:
    """The lab's builds use ``ccache_dir`` itself; every other scope a
    cache of its own beside it, which only that scope's builds write."""
    return ccache_dir if scope == "lab" else ccache_dir.with_name(f"{ccache_dir.name}-scopes") / scope


def build_kernel(req: BuildRequest, progress: ProgressFn | None = None) -> BuildResult:
    """Build ``req.sha`` for ``req.arch`` and copy its artifacts to
    ``req.output_dir``.

    A kernel that does not build gives ``ok=False`` with ``error`` and
    ``log_tail``; problems of the build machine raise BuildInfraError.
    """
    started = time.monotonic()
    report: ProgressFn = progress or (lambda phase, message: None)
    check_arch(req.arch)
    if not re.fullmatch(r"[0-9a-f]{40}", req.sha):
        raise ValueError(f"sha must be a full 40-hex commit id, got {req.sha!r}")
    if not SCOPE_RE.fullmatch(req.scope):
        raise ValueError(f"scope must match {SCOPE_RE.pattern}, got {req.scope!r}")
    fragments = _fragments(req)
    digest = config_digest(req.arch, req.fragments, req.profile)
    check_tools(req.arch)
    sandbox = req.sandbox or Sandbox.from_environ()
    sandbox.check()
    # A uid of its own for as long as it builds: its process limit is its own.
    with build_uids.lease(sandbox) as leased:
        result = _build_leased(replace(req, sandbox=leased), fragments, digest, report)
    result.duration_s = time.monotonic() - started
    report("done", "ok" if result.ok else f"failed: {result.error}"[:200])
    return result


def _build_leased(req: BuildRequest, fragments: tuple[Path, ...], digest: str, report: ProgressFn) -> BuildResult:
    """build_kernel's work once the build has its uid (``req.sandbox``)."""
    sandbox = req.sandbox
    assert sandbox is not None
    repo = Path(req.repo).resolve()
    check_commit(repo, req.sha)

    work_root = Path(req.work_root).resolve()
    work_root.mkdir(parents=True, exist_ok=True)
    output_dir = Path(req.output_dir).resolve()
    output_dir.mkdir(parents=True, exist_ok=True)
    ccache_dir = scoped_ccache_dir(
        Path(req.ccache_dir).resolve() if req.ccache_dir else _default_ccache_dir(), req.scope
    )
    ccache_scope.prepare(ccache_dir, sandbox)

    def build_in(tree: WarmTree, distance: int | None) -> BuildResult:
        reused = _prepare_tree(tree, repo, req.sha, distance, report)
        config_from = reused if (tree.path / REUSED_CONFIG).is_file() else ""
        _clear_outputs(output_dir)
        result = run_tuxmake(
            req,
            tree=tree,
            output_dir=output_dir,
            fragments=fragments,
            ccache_dir=ccache_dir,
            work_root=work_root,
            digest=digest,
            report=report,
            reuse_config=tree.path / REUSED_CONFIG if config_from else None,
        )
        result.reused_sha, result.tree, result.config_from = reused, tree.name, config_from
        if result.ok and reused and not reused_objects(tree.obj, result.compiled):
            # Built in another commit's tree but compiled every object anew
            # (6.1's objects under a 6.12 build): a clean build, and called so.
            # A failed build keeps the sha: the guard below rebuilds it from scratch.
            report("build", f"compiled all {result.compiled} files: nothing of {reused[:12]}'s objects was reused")
            result.reused_sha = ""
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
        if req.scope != "lab":
            # What the build left in its scope's cache stays for the next
            # builds of the scope: bounded after every build, whatever it did.
            try:
                ccache_scope.trim(ccache_dir, sandbox, log=lambda m: report("collect", m))
            except (OSError, BuildInfraError) as exc:
                report("collect", f"could not bound the ccache scope {ccache_dir}: {exc}"[:300])
    trees.evict(work_root, budget_bytes=req.trees_budget_bytes, log=lambda m: report("collect", m))
    return result


def reused_objects(obj: Path, compiled: int) -> bool:
    """Whether a build in a warm object tree kept any object it found there.

    kbuild prints one line per file it compiles (kperf_kbuild.logscan), and
    every object file it made is in the tree after the build: when it
    compiled at least as many files as the tree holds objects, none of the
    old ones was kept, and calling the build incremental would be wrong.
    The walk never follows a link: the tree is written by the build.
    """
    objects = 0
    for _, _, names in os.walk(obj):
        objects += sum(1 for name in names if name.endswith(".o"))
    return objects > compiled


# Where _prepare_tree keeps the last build's .config for the next run, beside
# (not in) the object tree.
REUSED_CONFIG = "reuse.config"


def _fragments(req: BuildRequest) -> tuple[Path, ...]:
    """The fragments merged onto the base, in order: the arch's, the profile's, the request's."""
    check_profile(req.profile)
    fragments = (
        arch_fragment(req.arch),
        *profile_fragments(req.profile, req.arch),
        *(Path(f).resolve() for f in req.fragments),
    )
    for frag in fragments:
        if not frag.is_file():
            raise BuildInfraError(f"config fragment {frag} does not exist")
    return fragments


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
    (tree.path / REUSED_CONFIG).unlink(missing_ok=True)
    if not reused:
        tree.wipe_obj()
    else:
        # The configuration is made afresh (tinyconfig + fragments +
        # olddefconfig), exactly as in a clean build, where the new commit
        # changes anything it is made from; otherwise the last build's
        # complete .config is handed to tuxmake as the base, which makes the
        # same file (a third of an incremental build's time on a slow 2-core
        # machine went into making it afresh: docs/operations.md).
        # Artifacts a failed build might not overwrite go too, so nothing
        # stale can be collected.
        paths = trees.changed_paths(repo, reused, sha)
        if paths is not None and not any(affects_config(p) for p in paths):
            (tree.obj / ".config").replace(tree.path / REUSED_CONFIG)
            report("config", f"keeping {reused[:12]}'s configuration: no file it is made from changed")
        (tree.obj / ".config").unlink(missing_ok=True)
        # init/build-version counts links in obj/.version: #2 after #1 would
        # put a different UTS_VERSION into the image than a clean build's #1.
        (tree.obj / ".version").unlink(missing_ok=True)
        for stale in [*tree.obj.glob("modules.tar*"), *tree.obj.glob("arch/*/boot/*Image")]:
            stale.unlink(missing_ok=True)
    state.sha = sha
    tree.save()
    return reused


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
