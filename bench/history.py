"""History at scale: a deployment-shaped database and the latency of what reads history.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/kperf_history_bench KPERF_DEBUG=1 \\
        .venv/bin/python bench/history.py --samples 1000000 --commits 250 --branches 6 [--reuse]
    (10M: a database kperf_history_bench_10m, --samples 10000000 --commits 1000 --branches 20)

Builds (unless --reuse) its own database: machine classes, long tracked
branches of `--commits` commits (one class each) and short ones, every benchmark's metrics,
K boots x N iterations per commit; samples are generated inside PostgreSQL
(INSERT ... SELECT generate_series) so 10M take minutes. Then summarises
them (kperf-manage rebuild_history) and reports p50/p95/p99 of the series
endpoint (one metric, newest 1000 commits), the noise report, a kernel
comparison, the branch page, and the change-point update after one new
commit. Never point it at a deployment's database: it drops the tables.

Each figure is printed with the machine's 1-minute load average before and
after it was measured (the goals hold "with the machine loaded as it is
during a test run"); --record FILE writes them all as JSON with the
machine and date (bench/records/).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kperf.settings")
django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402

from kperf.core.models import (  # noqa: E402
    BootRecord,
    BranchCommit,
    Job,
    KernelBuild,
    MachineClass,
    MetricDef,
    SeriesState,
    TrackedBranch,
    Tree,
)
from kperf.core.results import noise_pools, noise_report, summaries  # noqa: E402
from kperf.core.submissions import analysis  # noqa: E402
from kperf.core.tracking import branches  # noqa: E402
from kperf.core.web.api import history as history_api  # noqa: E402
from kperf.stats.noise import RunStats  # noqa: E402
from kperf_kbuild.sandbox import lower_autogroup  # noqa: E402

# Benchmarks and how many metrics each prints (pagealloc's micro has 105).
BENCHES = {"pagealloc": 105, "pft": 12, "spawn": 8}
BOOTS, ITERATIONS = 3, 5
# A metric's level at a commit position (SQL): flat, with a 5% step at position 500 in
# the metrics whose name hashes to 0 mod 7 (hashtext is signed: about one in thirteen).
LEVEL = "1000.0 * (CASE WHEN hashtext(d.name) %% 7 = 0 AND {position} >= 500 THEN 1.05 ELSE 1.0 END)"


def build(samples: int, classes: int, branches: int, commits: int) -> None:
    call_command("flush", interactive=False, verbosity=0)
    owner = User.objects.create_user("lab-admin", is_staff=True)
    tree = Tree.objects.create(url="https://git.example.org/linux.git")
    mclasses = [MachineClass.objects.create(name=f"class-{i}", arch="x86_64", clock="wall") for i in range(classes)]
    MetricDef.objects.bulk_create(
        [
            MetricDef(benchmark=b, name=f"{b}-{i}", unit="ops/sec", higher_is_better=True)
            for b, n in BENCHES.items()
            for i in range(n)
        ]
    )
    per_commit = sum(BENCHES.values()) * BOOTS * ITERATIONS  # samples per commit and class
    # Long branches (`commits` each, at least two) are measured on one class
    # each, round robin, as a lab follows a reference branch on its reference
    # machine; the short ones, with what is left of `samples`, on every class.
    long = max(2, min(branches, samples // (commits * per_commit)))
    rest = max(0, samples - long * commits * per_commit)
    short = max(0, rest // max(1, (branches - long) * classes * per_commit))
    sizes = [commits] * long + [short] * (branches - long)
    seq = 0
    for b, size in enumerate(sizes):
        branch = TrackedBranch.objects.create(
            owner=owner, tree=tree, branch=f"branch-{b}", benchmarks=list(BENCHES), arches=["x86_64"]
        )
        builds = KernelBuild.objects.bulk_create(
            [
                KernelBuild(tree=tree, sha=f"{b:04x}{p:036x}", arch="x86_64", config_digest="d", status="done")
                for p in range(size)
            ]
        )
        cs = BranchCommit.objects.bulk_create(
            [
                BranchCommit(branch=branch, sha=k.sha, position=p, subject=f"commit {p}", status="done")
                for p, k in enumerate(builds)
            ]
        )
        jobs = []
        on = [mclasses[b % classes]] if b < long else mclasses
        for c, k in zip(cs, builds, strict=True):
            for m in on:
                for bench in BENCHES:
                    for _ in range(BOOTS):
                        seq += 1
                        jobs.append(
                            Job(
                                build=k,
                                machine_class=m,
                                benchmark=bench,
                                grid="quick",
                                clock="wall",
                                seq=seq,
                                status="done",
                                branch_commit=c,
                            )
                        )
        jobs = Job.objects.bulk_create(jobs, batch_size=5000)
        BootRecord.objects.bulk_create([BootRecord(job=j, attempt=1, boot=0) for j in jobs], batch_size=5000)
        print(f"branch {b}: {size} commits", flush=True)
    with connection.cursor() as cur:
        # Every boot's iterations of every metric of its benchmark: a flat level,
        # a 5% step at position 500 in a few metrics, noise.
        cur.execute(
            """
            INSERT INTO core_sample (boot_record_id, metric, iteration, value)
            SELECT r.id, d.name, it, """
            + LEVEL.format(position="c.position")
            + """ * (1 + 0.01 * (random() - 0.5)) * (1 + 0.002 * (random() - 0.5))
            FROM core_bootrecord r
            JOIN core_job j ON j.id = r.job_id
            JOIN core_branchcommit c ON c.id = j.branch_commit_id
            JOIN core_metricdef d ON d.benchmark = j.benchmark
            CROSS JOIN generate_series(0, %s) AS it
            """,
            [ITERATIONS - 1],
        )
        cur.execute("ANALYZE")
        cur.execute("SELECT count(*), pg_database_size(current_database()) FROM core_sample")
        n, size = cur.fetchone()
    print(f"{n} samples, database {size / 1e6:.0f} MB", flush=True)


RESULTS: dict[str, dict[str, float]] = {}


def busy(n: int, nice: int) -> list[subprocess.Popen[bytes]]:
    """N processes that keep a core busy each: the CPU the service competes
    with (a compiler or QEMU uses a core the same way). Each in a session of
    its own at the given nice value, process and scheduler autogroup, as kperf
    starts a build or an instruction-clock boot (docs/operations.md, "CPU priority")."""
    loop = "while True: pass"
    hogs = []
    for _ in range(n):
        hog = subprocess.Popen(["nice", "-n", str(nice), sys.executable, "-c", loop], start_new_session=True)
        if not lower_autogroup(hog.pid, nice):
            print("(no scheduler autogroups here: the process nice value alone)", flush=True)
        hogs.append(hog)
    return hogs


def _load() -> float:
    return os.getloadavg()[0]


def report(name: str, times: list[float], load_before: float) -> dict[str, float]:
    """p50/p95/p99 of `times` (ms) with the load average around them, printed and kept for --record."""
    times = sorted(times)
    q = statistics.quantiles(times, n=100, method="inclusive") if len(times) > 1 else times * 99
    row = {"p50": q[49], "p95": q[94], "p99": q[98], "load_before": load_before, "load_after": _load()}
    RESULTS[name] = row
    print(
        f"{name:<44} p50 {row['p50']:8.1f} ms  p95 {row['p95']:8.1f} ms  p99 {row['p99']:8.1f} ms"
        f"  load {row['load_before']:.1f}-{row['load_after']:.1f}",
        flush=True,
    )
    return row


def timed(name: str, fn: Callable[[], object], runs: int) -> dict[str, float]:
    fn()  # warm caches, catch up anything not summarised
    load = _load()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return report(name, times, load)


def new_commit(branch: TrackedBranch, mclass: MachineClass, n: int, spent: dict[str, list[float]]) -> None:
    """Append one measured commit to a branch (pagealloc only), store its samples,
    summarise them (the noise model's update) and re-analyse the series (the change points')."""
    last = branch.commits.order_by("-position").first()
    assert last is not None
    sha = f"ffff{n:036x}"
    build = KernelBuild.objects.create(tree=branch.tree, sha=sha, arch="x86_64", config_digest="d", status="done")
    commit = BranchCommit.objects.create(
        branch=branch, sha=sha, position=last.position + 1, subject="new", status="analysing"
    )
    stored = 0.0
    for boot in range(BOOTS):
        job = Job.objects.create(
            build=build,
            machine_class=mclass,
            benchmark="pagealloc",
            grid="quick",
            clock="wall",
            seq=10**8 + n * 10 + boot,
            status="done",
            branch_commit=commit,
        )
        rec = BootRecord.objects.create(job=job, attempt=1, boot=0)
        with connection.cursor() as cur:
            cur.execute(
                "INSERT INTO core_sample (boot_record_id, metric, iteration, value) "
                # The branch's level continued (as build() draws it): no change point in the new commit.
                "SELECT %s, d.name, it, "
                + LEVEL.format(position="%s")
                + " * (1 + 0.01 * (random() - 0.5)) * (1 + 0.002 * (random() - 0.5)) FROM core_metricdef d "
                "CROSS JOIN generate_series(0, %s) AS it WHERE d.benchmark = 'pagealloc'",
                [rec.pk, commit.position, ITERATIONS - 1],
            )
        t = time.perf_counter()
        summaries.job_stored(job.pk)
        stored += time.perf_counter() - t
    t = time.perf_counter()
    branches.analyse_series(branch, mclass.pk, "pagealloc", "wall")
    spent["analyse"].append((time.perf_counter() - t) * 1000)
    spent["stored"].append(stored / BOOTS * 1000)
    BranchCommit.objects.filter(pk=commit.pk).update(status="done")


def quantiles(name: str, times: list[float], load_before: float) -> None:
    report(name, times, load_before)


def learned_prior(mclass: MachineClass, own: list[str]) -> None:
    """What analyse_submission learns for pagealloc: every other kernel's runs from the
    pools, the submission's own kernels (here: two of the branch's) from their samples."""
    jobs = Job.objects.filter(status="done", machine_class=mclass, benchmark="pagealloc", grid="quick", clock="wall")
    extra: dict[str, list[RunStats]] = {}
    for sha in own:
        for metric, run in summaries.runs_of(jobs.filter(build__sha=sha)).items():
            extra.setdefault(metric, []).append(run)
    noise_pools.noise_models(mclass.pk, "wall", "pagealloc", "quick", exclude_shas=own, extra=extra)


def measure(runs: int) -> None:
    owner = User.objects.get(username="lab-admin")
    branch = TrackedBranch.objects.order_by("pk").first()
    mclass = MachineClass.objects.order_by("pk").first()
    assert branch is not None and mclass is not None
    shas = list(branch.commits.order_by("-position").values_list("sha", flat=True)[:2])
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM core_sample")
        print(f"{cur.fetchone()[0]} samples; branch {branch.branch}: {branch.commits.count()} commits", flush=True)
    client = Client()
    client.force_login(owner)
    spent: dict[str, list[float]] = {"stored": [], "analyse": []}
    # New commits' shas go on from those of an earlier run (--reuse).
    counter = iter(range(KernelBuild.objects.filter(sha__startswith="ffff").count(), 10**6))
    # The first analysis after a rebuild replays each detector: time it, then the steady state.
    load = _load()
    new_commit(branch, mclass, next(counter), spent)
    quantiles("first analysis after a rebuild (replay)", spent["analyse"], load)
    SeriesState.objects.filter(branch=branch, benchmark="pagealloc").update(detector=b"")
    load = _load()
    new_commit(branch, mclass, next(counter), spent)
    quantiles("analysis replaying 105 metrics' detectors", spent["analyse"][1:], load)
    timed(
        "series (1 metric, newest 1000 commits)",
        lambda: history_api.metric_series(branch, mclass.name, "pagealloc", "wall", "pagealloc-7", None, None, 1000),
        runs,
    )
    timed(
        "GET /api/v1/branches/ID/series?metric=",
        lambda: client.get(
            f"/api/v1/branches/{branch.pk}/series",
            {"machine_class": mclass.name, "benchmark": "pagealloc", "metric": "pagealloc-7"},
        ),
        runs,
    )
    timed(
        "GET /api/v1/branches/ID/series (raw page)",
        lambda: client.get(
            f"/api/v1/branches/{branch.pk}/series", {"machine_class": mclass.name, "benchmark": "pagealloc"}
        ),
        runs,
    )
    timed("noise report (all metrics of a class)", lambda: noise_report.noise_report(mclass.name, 5, 5, "wall"), runs)
    timed("GET /api/v1/noise", lambda: client.get("/api/v1/noise", {"machine_class": mclass.name}), runs)
    timed("learned prior of a submission (pagealloc)", lambda: learned_prior(mclass, shas), runs)
    timed(
        "compare two kernels (pagealloc)",
        lambda: analysis.compare_kernels(mclass.name, "pagealloc", shas[1], shas[0]),
        runs,
    )
    timed("branch page /branches/ID", lambda: client.get(f"/branches/{branch.pk}"), runs)
    spent = {"stored": [], "analyse": []}
    load = _load()
    for _ in range(max(5, runs // 2)):
        new_commit(branch, mclass, next(counter), spent)
    quantiles("noise model update: one job's results stored", spent["stored"], load)
    quantiles("change points after one new commit", spent["analyse"], load)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--classes", type=int, default=3)
    ap.add_argument("--branches", type=int, default=20)
    ap.add_argument("--commits", type=int, default=1000, help="commits of each long branch")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--reuse", action="store_true", help="measure the database as it is")
    ap.add_argument("--record", help="write the figures, machine and date to this JSON file")
    ap.add_argument(
        "--load",
        type=int,
        default=0,
        metavar="N",
        help="keep N busy processes running while measuring (a lab's builds and boots beside the service)",
    )
    ap.add_argument(
        "--load-nice",
        type=int,
        default=10,
        metavar="K",
        help="their nice value: 10 is what kperf gives its own builds and instruction-clock boots "
        "(KPERF_BUILD_NICE, KPERF_RUNNER_NICE); 0 is load kperf does not control",
    )
    ap.add_argument("--settle", type=float, default=60.0, help="seconds the load runs before measuring")
    args = ap.parse_args()
    assert "history_bench" in connection.settings_dict["NAME"], "use a database of its own (kperf_history_bench)"
    if not args.reuse:
        t = time.perf_counter()
        build(args.samples, args.classes, args.branches, args.commits)
        print(f"generated in {time.perf_counter() - t:.0f} s", flush=True)
        t = time.perf_counter()
        call_command("rebuild_history")
        print(f"summaries rebuilt in {time.perf_counter() - t:.0f} s", flush=True)
    hogs = busy(args.load, args.load_nice)
    try:
        if hogs:
            # The 1-minute load average takes about three minutes to show them
            # (an exponential average); the CPU is contended from the start.
            time.sleep(args.settle)
        measure(args.runs)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    if args.record:
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM core_sample")
            samples = cur.fetchone()[0]
            cur.execute("SELECT count(*) FROM core_job")
            jobs = cur.fetchone()[0]
        record = {
            "bench": "history",
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": {
                "cpus": os.cpu_count(),
                "cpu": next(
                    (
                        ln.split(":", 1)[1].strip()
                        for ln in Path("/proc/cpuinfo").read_text().splitlines()
                        if ln.startswith("model name")
                    ),
                    "",
                ),
                "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30),
                "arch": platform.machine(),
                "python": platform.python_version(),
            },
            "samples": samples,
            "jobs": jobs,
            "args": vars(args),
            "results_ms": RESULTS,
        }
        with open(args.record, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
