"""Apply a submission's patch series on its base with `git am`.

git am needs a work tree, and the mirror is bare and shared by every
worker: the series is applied in a scratch repository that borrows the
mirror's objects (alternates), and only the resulting commits are fetched
back, under refs/kperf/users/<owner id>/series/<submission id>: the
mirror is shared by every submitter of the tree, and a series is its
submitter's alone, so it lives in a namespace of theirs that no one else's
submission resolves (gitops.Reader, `reader`). Branches and tags of the
mirror are never touched, and a fetch from the tree leaves those refs alone
(kperf.core.builds.gitops.KPERF_REFS).

The committer and the dates are fixed (a patch without a Date: header gets
the series' date, kperf.core.builds.patch_series), so the same mbox on the same base
gives the same sha anywhere: a build machine whose mirror lacks the commits
makes them again from the stored mbox (`restore`) and gets the sha the
submission names. For the same reason a series ref is never moved once it
exists: a build or a submission may name its sha. Series applied before
the namespaces were under refs/kperf/series/<submission id>; their own
re-apply still finds them there (`legacy_series_ref`), and only their
owner may give their sha.

The scratch work tree holds only the files the series touches (a sparse
checkout of the paths its diffs name): a kernel checkout is a gigabyte and
minutes, those files are seconds. git am commits from the index, which has
every file, so the commit is the one a full checkout makes. When the paths
cannot be read for sure (quoted or glob-like names) the checkout is full,
and a series that does not apply in the sparse tree is tried again in a full
one before it is called not applying.

A worker that is killed leaves its scratch repository behind:
`sweep_scratch` removes those older than the longest a preparation may run,
from the sweeper and before each apply.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from django.conf import settings

from kperf.core.builds import artifacts, gitops, patch_series
from kperf.core.models import KernelBuild, PatchSeries, Submission

log = logging.getLogger(__name__)

# Who commits an applied series. Fixed (not the operator's settings) so
# every machine makes the same commits, and free of any user's git
# configuration for the same reason.
_AM_ENV = {
    "GIT_COMMITTER_NAME": "kperf",
    "GIT_COMMITTER_EMAIL": "kperf@kperf.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


class SeriesApplyError(Exception):
    """A patch of the series does not apply on the base; the message names it and has git's error."""

    def __init__(self, number: int, total: int, subject: str, base: str, error: str) -> None:
        self.number = number
        super().__init__(
            f"patch {number}/{total} {subject!r} does not apply on {base}: {error}; "
            "rebase the series on that base, or submit it against the base it was written for "
            "(b4 am prints it as base-commit)"
        )


def series_namespace(owner_id: int) -> str:
    """The refs of one user's applied series, in every mirror (only they may name or reach them)."""
    return f"{gitops.KPERF_REFS}users/{owner_id}/series/"


def series_ref(owner_id: int, sub_id: int) -> str:
    return f"{series_namespace(owner_id)}{sub_id}"


def legacy_series_ref(sub_id: int) -> str:
    """Where a series applied before the per-user namespaces is: read for its own re-apply, named by no one.

    Not refs/kperf/series/<owner>/…: that would clash with these refs
    (refs/kperf/series/7 cannot also be a directory of refs)."""
    return f"{gitops.KPERF_REFS}series/{sub_id}"


def reader(owner_id: int, tree_id: int) -> gitops.Reader:
    """What the user may read in the tree's mirror besides its branches and tags: their own series."""
    legacy = Submission.objects.filter(owner_id=owner_id, tree_id=tree_id, kind=Submission.Kind.SERIES)
    return gitops.Reader(
        namespace=series_namespace(owner_id),
        reaching=tuple(legacy_series_ref(pk) for pk in legacy.order_by("pk").values_list("pk", flat=True)),
    )


def scratch_root() -> Path:
    return Path(settings.KPERF_BUILD_ROOT) / "series"


def scratch_max_age() -> float:
    """Seconds after which no worker can still be using a scratch repository: the task's hard limit, or an hour."""
    return max(3600.0, prepare_time_limit() + 60.0)


def prepare_time_limit() -> int:
    """The soft time limit of preparing a submission: fetch, checkout, git am and fetch back each may take
    KPERF_GIT_TIMEOUT (kperf.core.tasks gives prepare_submission this)."""
    return 4 * settings.KPERF_GIT_TIMEOUT + 120


def sweep_scratch(max_age: float | None = None) -> int:
    """Remove scratch repositories (am-*) older than `max_age` seconds that killed workers left; how many."""
    limit = scratch_max_age() if max_age is None else max_age
    removed = 0
    try:
        entries = list(scratch_root().glob("am-*"))
    except OSError:
        return 0
    for path in entries:
        try:
            if time.time() - path.stat().st_mtime < limit:
                continue
        except OSError:
            continue  # removed meanwhile
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed += 1
            log.warning("removed %s, the scratch repository of a series apply that did not finish", path)
    return removed


def _ref_sha(mirror: Path, ref: str) -> str:
    # That ref exactly: git's guesses would also read the tree's branch refs/heads/<ref>.
    return gitops.exact_ref(mirror, ref)


def am(mirror: Path, base_sha: str, base_name: str, parsed: patch_series.Series, ref: str) -> str:
    """Apply `parsed` on `base_sha`, store the result in the mirror under `ref`, return its sha.

    `ref` is created, never moved: GitError when it already names another commit.
    """
    sweep_scratch()
    scratch_root().mkdir(parents=True, exist_ok=True)
    # git am takes the dates from the mails (patch_series.Series.patches_mbox gives
    # each patch one); these keep anything else git does here off the clock.
    env = _AM_ENV | {"GIT_AUTHOR_DATE": parsed.date, "GIT_COMMITTER_DATE": parsed.date}
    paths = touched_paths(parsed)
    with tempfile.TemporaryDirectory(dir=scratch_root(), prefix="am-") as tmp:
        work, failure = _am_in(Path(tmp), mirror, base_sha, parsed, env, paths)
        if failure is not None and paths is not None:
            # Not applying in the sparse tree may be a path it lacks: only a full checkout may say so.
            log.info("series on %s: git am failed in a sparse checkout, trying a full one", base_name)
            shutil.rmtree(work, ignore_errors=True)
            work, failure = _am_in(Path(tmp), mirror, base_sha, parsed, env, None)
        if failure is not None:
            raise _which_patch(work, parsed, base_name, failure)
        sha = gitops.run_git(["-C", str(work), "rev-parse", "HEAD"], timeout=60).strip()
        existing = _ref_sha(mirror, ref)
        if existing and existing != sha:
            raise gitops.GitError(
                f"{ref} in {mirror} already names {existing[:12]}, and applying the series again gives {sha[:12]}: "
                "kperf does not move it (a build may name it); build the series where it was applied"
            )
        if not existing:
            # Only the new commits' objects travel: the mirror has everything
            # else. Without '+': a ref another worker made meanwhile is not moved.
            gitops.run_git(
                ["-C", str(mirror), "fetch", "--quiet", str(work), f"{sha}:{ref}"],
                timeout=settings.KPERF_GIT_TIMEOUT,
            )
    return sha


def _am_in(
    tmp: Path, mirror: Path, base_sha: str, parsed: patch_series.Series, env: dict[str, str], paths: list[str] | None
) -> tuple[Path, str | None]:
    """git am in a fresh scratch repository under `tmp` (only `paths` checked out, or every file when None);
    (its work tree, git's error output or None when every patch applied)."""
    work = tmp / "tree"
    gitops.run_git(["init", "--quiet", str(work)], timeout=60, extra_env=env)
    (work / ".git" / "objects" / "info" / "alternates").write_text(f"{mirror.resolve() / 'objects'}\n")
    if paths is not None:
        # Non-cone patterns, each anchored at the top: exactly these files.
        (work / ".git" / "info").mkdir(exist_ok=True)
        (work / ".git" / "info" / "sparse-checkout").write_text("".join(f"/{p}\n" for p in paths))
        gitops.run_git(["-C", str(work), "config", "core.sparseCheckout", "true"], timeout=60, extra_env=env)
    gitops.run_git(
        ["-C", str(work), "checkout", "--quiet", "--detach", base_sha],
        timeout=settings.KPERF_GIT_TIMEOUT,
        extra_env=env,
    )
    mbox = tmp / "patch_series.mbox"
    mbox.write_bytes(parsed.patches_mbox())
    try:
        proc = subprocess.run(
            ["git", "-C", str(work), "am", "--quiet", "--committer-date-is-author-date", "--no-3way", str(mbox)],
            env=gitops.git_env() | env,
            capture_output=True,
            text=True,
            timeout=settings.KPERF_GIT_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise gitops.GitError(f"git am did not finish within {settings.KPERF_GIT_TIMEOUT} s") from None
    return work, (proc.stderr or proc.stdout or "git am failed") if proc.returncode != 0 else None


# A path git writes plainly in a diff header and a sparse-checkout pattern
# matches only itself: no quoting, no glob or pattern syntax, no spaces.
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./+@,=:%-]+")
_PATH_LINES = ("--- a/", "+++ b/", "rename from ", "rename to ", "copy from ", "copy to ")


def touched_paths(parsed: patch_series.Series) -> list[str] | None:
    """Every path the series' diffs name (old and new names), as git mailinfo decodes the mails;
    None when one cannot be read for sure (a full checkout is then needed)."""
    paths: set[str] = set()
    for patch in parsed.patches:
        try:
            proc = subprocess.run(
                ["git", "mailinfo", os.devnull, "/dev/stdout"],
                input=patch.raw,
                capture_output=True,
                env=gitops.git_env() | _AM_ENV,
                timeout=60,
                check=True,
            )
        except (subprocess.SubprocessError, OSError):
            return None
        for block in proc.stdout.decode("utf-8", "replace").split("\ndiff --git ")[1:]:
            found = _paths_of(block)
            if not found:
                return None
            paths |= found
    if not paths or not all(_PLAIN_PATH.fullmatch(p) and ".." not in p.split("/") for p in paths):
        return None
    return sorted(paths)


def _paths_of(block: str) -> set[str]:
    """The paths one file's diff names: its ---/+++ and rename/copy lines, else its `a/X b/X` header."""
    lines = block.split("\n")
    found = set()
    for line in lines[1:]:
        if line.startswith("@@"):
            break
        for prefix in _PATH_LINES:
            if line.startswith(prefix):
                found.add(line[len(prefix) :].split("\t")[0])
    if not found:
        # A mode change or a binary file: only the header names it.
        half = lines[0][2:].partition(" b/")
        if lines[0].startswith("a/") and half[0] == half[2]:
            found.add(half[0])
    return found


def _which_patch(work: Path, parsed: patch_series.Series, base_name: str, error: str) -> SeriesApplyError:
    # git am keeps its place in rebase-apply/next: the 1-based number of the
    # patch it stopped at, among the messages it was given (the patches only).
    try:
        number = int((work / ".git" / "rebase-apply" / "next").read_text().strip())
    except (OSError, ValueError):
        number = 1
    number = min(max(number, 1), len(parsed.patches))
    # git's own words on what did not fit (its "error:" lines), without the
    # advice on `git am --continue`, which is for someone at a terminal.
    lines = [line.strip() for line in error.splitlines() if line.startswith(("error:", "fatal:"))]
    detail = "; ".join(lines)[:1500] or " ".join(error.split())[:1500] or "git am failed"
    patch = parsed.patches[number - 1]
    return SeriesApplyError(number, len(parsed.patches), patch.subject, base_name, detail)


def _parse_stored(ps: PatchSeries) -> patch_series.Series:
    data = artifacts.read_checked(ps.mbox, f"the mbox of submission {ps.submission_id}")
    # It passed the limit when it was submitted; a lower limit since must not lose it.
    return patch_series.parse(data, max_bytes=len(data))


def apply(sub: Submission) -> str:
    """Apply the series of `sub` on its base_sha; the head sha (SeriesApplyError, gitops.GitError)."""
    ps = PatchSeries.objects.get(submission=sub)
    parsed = _parse_stored(ps)
    base_name = f"{sub.base_ref} ({sub.base_sha[:12]})"
    mirror, ref = sub.tree.mirror_path, series_ref(sub.owner_id, sub.pk)
    # A series applied before the per-user namespaces only has the old name.
    for name in (ref, legacy_series_ref(sub.pk)):
        existing = _ref_sha(mirror, name)
        if existing and _is_applied(mirror, sub.base_sha, existing, len(parsed.patches)):
            # An earlier attempt applied it and stopped before the submission
            # moved on: its commits are the series' (the apply is deterministic).
            log.info("submission %s: series already applied on %s: %s", sub.pk, base_name, existing[:12])
            return existing
        if existing:
            break  # the current name names something else: am() refuses to move it
    sha = am(mirror, sub.base_sha, base_name, parsed, ref)
    log.info("submission %s: %d patches applied on %s: %s", sub.pk, len(parsed.patches), base_name, sha[:12])
    return sha


def _is_applied(mirror: Path, base_sha: str, sha: str, patches: int) -> bool:
    """True when `sha` is `patches` commits on top of `base_sha`, one after the other."""
    if not gitops.is_ancestor(mirror, base_sha, sha):
        return False
    try:
        count = gitops.run_git(["-C", str(mirror), "rev-list", "--count", f"{base_sha}..{sha}"], timeout=120)
    except gitops.GitError:
        return False
    return int(count.strip() or 0) == patches


def restore(build: KernelBuild) -> bool:
    """Make the commit of an applied series again in this machine's mirror; False if `build` is no series'."""
    sub = (
        Submission.objects.filter(kind=Submission.Kind.SERIES, head_sha=build.sha, series__isnull=False)
        .select_related("tree", "series")
        .order_by("pk")
        .first()
    )
    if sub is None:
        return False
    mirror = build.tree.mirror_path
    gitops.ensure_commit(build.tree.url, mirror, sub.base_sha, timeout=settings.KPERF_GIT_TIMEOUT)
    try:
        parsed = _parse_stored(sub.series)
        sha = am(mirror, sub.base_sha, sub.base_ref, parsed, series_ref(sub.owner_id, sub.pk))
    except (SeriesApplyError, patch_series.SeriesError, artifacts.ArtifactUnavailable) as e:
        raise gitops.GitError(f"the series of submission {sub.pk} could not be applied again: {e}") from e
    if sha != build.sha:
        raise gitops.GitError(
            f"the series of submission {sub.pk} applied again gives {sha[:12]}, not {build.sha[:12]}: "
            "this build machine's git applies it differently; build it where it was applied"
        )
    log.info("build %s: series of submission %s applied again in this machine's mirror", build.pk, sub.pk)
    return True
