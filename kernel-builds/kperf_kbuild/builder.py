"""`kperf-builder`: a build machine that pulls kernel builds from the service over HTTP.

The machine that runs strangers' Makefiles holds one secret, its own token
(KPERF_BUILDER_TOKEN), and reaches one address, the service's: no database,
broker or object store, and no tree host either. It claims a build
(docs/builders.md), fetches the commit from the service's mirror with git
over HTTP into a mirror of its own, builds it in the sandbox like every
build (kperf_kbuild.sandbox), and hands the files back in chunks; the
service checks and stores them. While the compiler runs, a thread extends
the lease; if the service says the build is no longer ours (taken over
after a network outage, say), the result is dropped.

A problem of this machine (git cannot fetch, the sandbox cannot start, the
driver's BuildInfraError) is reported as `fail`: the service tries the
build again with backoff and, after its last attempt, calls it an
infrastructure failure, never the kernel's.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kperf_kbuild.driver import DEFAULT_PROFILE, PROFILES, BuildRequest, BuildResult, build_kernel, config_digest
from kperf_kbuild.host import BuildInfraError
from kperf_kbuild.sandbox import Sandbox
from kperf_kbuild.trees import DEFAULT_BUDGET_BYTES
from kperf_runner.client import Client, NotHeld, ProtocolError, ServerUnavailable, sha256_of

log = logging.getLogger(__name__)

API = "/api/v1/builder/"
VERSION = "1"


@dataclass
class Config:
    server: str
    token: str
    name: str
    work_dir: Path
    arches: list[str] = field(default_factory=list)
    jobs: int = 0
    ccache_dir: Path | None = None
    trees_budget_bytes: int = DEFAULT_BUDGET_BYTES

    @property
    def mirrors(self) -> Path:
        return self.work_dir / "mirrors"


class _Lease(threading.Thread):
    """Extends the build's lease every quarter of it, carrying the latest phase; notices a lost lease."""

    def __init__(self, client: Client, build_id: int, attempt: int, lease_seconds: float) -> None:
        super().__init__(name=f"build-{build_id}-lease", daemon=True)
        self.client, self.build_id, self.attempt = client, build_id, attempt
        self.every = max(1.0, lease_seconds / 4)
        self.phase, self.message = "checkout", "fetching the commit"
        self.stopped = threading.Event()
        self.lost = False

    def report(self, phase: str, message: str) -> None:
        # Called on every line the build prints: only remembered here, sent by the thread.
        self.phase, self.message = phase, message

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            try:
                self.client.post_json(
                    f"builds/{self.build_id}/progress",
                    {"attempt": self.attempt, "phase": self.phase[:32], "message": self.message[:200]},
                )
            except NotHeld:
                self.lost = True
                log.warning("build %s: the service gave the build to another machine; its result will be dropped",
                            self.build_id)  # fmt: skip
                return
            except (ServerUnavailable, ProtocolError) as e:
                # The lease outlasts a few missed beats; the next one may get through.
                log.warning("build %s: could not extend the lease: %s", self.build_id, e)


def git(args: list[str], env: dict[str, str] | None = None, timeout: float = 3600) -> str:
    proc = subprocess.run(
        ["git", *args], capture_output=True, text=True, timeout=timeout, check=False,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent", "LC_ALL": "C",
             "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, **(env or {})},
    )  # fmt: skip
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise BuildInfraError(f"git {args[0]} failed: {' '.join(lines[-3:]) or f'exit {proc.returncode}'}")
    return proc.stdout


def fetch_commit(config: Config, claim: dict[str, Any]) -> Path:
    """The claim's commit in this machine's mirror of its tree, fetched from the service when missing."""
    mirror = config.mirrors / f"tree-{int(claim['tree'])}.git"
    sha = str(claim["sha"])
    if not (mirror / "HEAD").exists():
        mirror.parent.mkdir(parents=True, exist_ok=True)
        git(["init", "--quiet", "--bare", str(mirror)])
    try:
        git(["-C", str(mirror), "cat-file", "-e", f"{sha}^{{commit}}"])
        return mirror
    except BuildInfraError:
        pass
    url = config.server.rstrip("/") + str(claim["git_path"])
    # The token goes to git through its environment, never its command line
    # (which every user of the machine can read in ps).
    auth = {
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": "http.extraHeader",
        "GIT_CONFIG_VALUE_0": f"Authorization: Bearer {config.token}",
        "GIT_CONFIG_KEY_1": "protocol.version",
        "GIT_CONFIG_VALUE_1": "2",
    }
    try:
        git(["-C", str(mirror), "fetch", "--quiet", "--no-tags", url, f"+{sha}:refs/kperf/builds/{sha}"], env=auth)
    except BuildInfraError as e:
        raise BuildInfraError(f"commit {sha} could not be fetched from the service ({url}): {e}") from None
    return mirror


def upload(client: Client, claim: dict[str, Any], name: str, path: Path) -> dict[str, Any]:
    """Send one file in chunks (each retried by the client); its declared size and sha256."""
    build_id, attempt, chunk = int(claim["id"]), int(claim["attempt"]), int(claim["chunk_bytes"])
    offset = 0
    with open(path, "rb") as fh:
        while True:
            data = fh.read(chunk)
            if not data and offset:
                break
            client.put_bytes(f"builds/{build_id}/artifacts/{name}?attempt={attempt}&offset={offset}", data)
            offset += len(data)
            if not data:
                break
    return {"size": offset, "sha256": sha256_of(path)}


def _finish_payload(result: BuildResult, attempt: int, files: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "attempt": attempt,
        "ok": result.ok,
        "error": result.error,
        "log_tail": result.log_tail,
        "artifacts": files,
        "reused_sha": result.reused_sha,
        "compiled": result.compiled,
        "incremental_error": result.incremental_error,
        "warnings": result.warnings,
    }


def run_claim(config: Config, client: Client, claim: dict[str, Any]) -> str:
    """Build what was claimed and report it; what happened, in a word, for the log and the tests."""
    build_id, attempt = int(claim["id"]), int(claim["attempt"])
    lease = _Lease(client, build_id, attempt, float(claim["lease_seconds"]))
    lease.start()
    out_dir = config.work_dir / "outputs" / str(build_id)
    try:
        # A service from before profiles sends none: its builds are the default profile's.
        profile = str(claim.get("profile") or DEFAULT_PROFILE)
        if profile not in PROFILES:
            raise BuildInfraError(
                f"the service asked for configuration profile {profile!r}, which this build machine's "
                f"kperf-kbuild does not have ({', '.join(PROFILES)}): install the service's kperf version here"
            )
        expected = config_digest(str(claim["arch"]), profile=profile)
        if expected != claim["config_digest"]:
            raise BuildInfraError(
                f"this build machine's kperf-kbuild makes configuration {expected[:12]} for {claim['arch']} "
                f"({profile} profile), "
                f"the service asked for {str(claim['config_digest'])[:12]}: install the service's kperf version here"
            )
        mirror = fetch_commit(config, claim)
        shutil.rmtree(out_dir, ignore_errors=True)
        sandbox = Sandbox.from_environ()
        sandbox = sandbox.with_limits(wall_seconds=min(sandbox.limits.wall_seconds, float(claim["wall_seconds"])))
        request = BuildRequest(
            repo=mirror, sha=str(claim["sha"]), arch=str(claim["arch"]), work_root=config.work_dir,
            output_dir=out_dir, ccache_dir=config.ccache_dir or config.work_dir / "ccache", jobs=config.jobs,
            trees_budget_bytes=config.trees_budget_bytes, scope=str(claim["scope"]), sandbox=sandbox,
            profile=profile,
        )  # fmt: skip
        log.info("build %s: %s for %s (attempt %s)", build_id, request.sha[:12], request.arch, attempt)
        result = build_kernel(request, lease.report)
        if lease.lost:
            return "lost"
        lease.report("upload", f"sending {len(result.artifacts)} file(s) to the service")
        files = {name: upload(client, claim, name, path) for name, path in result.artifacts.items() if path.is_file()}
        client.post_json(f"builds/{build_id}/finish", _finish_payload(result, attempt, files))
        log.info("build %s: %s", build_id, "done" if result.ok else f"FAILED: {result.error}")
        return "done" if result.ok else "failed"
    except NotHeld:
        log.warning("build %s: no longer ours; dropped", build_id)
        return "lost"
    except BuildInfraError as e:
        log.error("build %s: this machine could not build it: %s", build_id, e)
        return _report_fail(client, build_id, attempt, str(e))
    except ServerUnavailable as e:
        # The lease runs out and the service gives the build to the next machine.
        log.error("build %s: the service is unreachable (%s); the build will be tried again", build_id, e)
        return "unreachable"
    except Exception as e:  # a bug or a fault of this machine: never the kernel's result
        log.exception("build %s: the build machine failed", build_id)
        return _report_fail(client, build_id, attempt, f"{type(e).__name__}: {e}")
    finally:
        lease.stopped.set()
        shutil.rmtree(out_dir, ignore_errors=True)


def _report_fail(client: Client, build_id: int, attempt: int, reason: str) -> str:
    try:
        client.post_json(f"builds/{build_id}/fail", {"attempt": attempt, "reason": reason[:20000]})
    except (ProtocolError, ServerUnavailable) as e:
        log.warning("build %s: could not report the failure (%s); its lease will run out", build_id, e)
    return "infra"


def run(config: Config, once: bool = False, client: Client | None = None) -> int:
    """Claim and build until stopped (or, with `once`, until one claim found nothing or one build ended)."""
    client = client or Client(config.server, config.token, api=API, retries=8, timeout=120)
    identity = {"arches": config.arches, "hostname": socket.gethostname(), "version": VERSION}
    while True:
        answer = client.post_json("claim", identity)
        claim = answer.get("build")
        if claim is None:
            if once:
                return 0
            time.sleep(float(answer.get("poll_seconds", 5)))
            continue
        run_claim(config, client, claim)
        if once:
            return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kperf-builder", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="claim and build kernels until stopped")
    p.add_argument("--server", required=True, help="the service's URL, e.g. http://kperf.lab:8000")
    p.add_argument("--name", default=socket.gethostname(), help="for the log (the token names the machine)")
    p.add_argument("--work-dir", type=Path, default=Path("/var/lib/kperf-builder"),
                   help="mirrors, warm build trees, ccache and outputs")  # fmt: skip
    p.add_argument("--arch", action="append", default=[], help="an arch to build (repeat; default: every arch)")
    p.add_argument("--jobs", type=int, default=0, help="make -j (0: every core)")
    p.add_argument("--ccache-dir", type=Path, default=None, help="default: WORK_DIR/ccache")
    p.add_argument("--trees-budget-bytes", type=int, default=DEFAULT_BUDGET_BYTES)
    p.add_argument("--token-file", type=Path, help="read the token here instead of KPERF_BUILDER_TOKEN")
    p.add_argument("--once", action="store_true", help="one claim, then exit")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    token = args.token_file.read_text().strip() if args.token_file else os.environ.get("KPERF_BUILDER_TOKEN", "")
    # Nothing this process starts inherits the token (the sandbox scrubs
    # the environment anyway; git gets it only for the fetch).
    os.environ.pop("KPERF_BUILDER_TOKEN", None)
    if not token:
        print("kperf-builder: no token: set KPERF_BUILDER_TOKEN (kperf-manage add_builder NAME prints one)",
              file=sys.stderr)  # fmt: skip
        return 2
    config = Config(
        server=args.server, token=token, name=args.name, work_dir=args.work_dir, arches=args.arch, jobs=args.jobs,
        ccache_dir=args.ccache_dir, trees_budget_bytes=args.trees_budget_bytes,
    )  # fmt: skip
    config.work_dir.mkdir(parents=True, exist_ok=True)
    try:
        return run(config, once=args.once)
    except (ProtocolError, ServerUnavailable) as e:
        # A bad token, a host name the service does not answer to, a service
        # that stays away: nothing a retry here would mend.
        print(f"kperf-builder: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
