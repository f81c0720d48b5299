#!/usr/bin/env python3
"""How right is the verdict's ETA? Replay recorded durations through kperf's estimator.

    .venv/bin/python bench/eta.py                                  # synthetic lab, recorded and replayed
    .venv/bin/python bench/eta.py --record history.json            # keep the synthetic record
    .venv/bin/python bench/eta.py --database-url postgres://... --record history.json   # a real kperf's
    .venv/bin/python bench/eta.py --replay history.json [--step 2]
    .venv/bin/python bench/eta.py --shown turnaround.json --warmup 1   # what a real run's API showed

`--shown` reads no model: bench/turnaround.py --json records the ETA the
service's API showed at every poll of a real run (every 2 s) and when each
verdict came; the table holds those against each other. Everything else
below is the replay, which rebuilds what the service knew from a record's
rows and asks kperf's estimator again.

A record holds every finished submission, build and job of a lab with
their times (created, started, finished), the runners per machine class
and, per submission, the jobs its first look queues and the most its looks
may queue. The replay goes through each submission's life: at its
creation and at every start and end of one of its builds and jobs, it
rebuilds what the service would have known at that moment (the durations
finished before it, the builds and jobs queued and running, in claim
order) and asks kperf.core.lab.eta_model for the ETA, as kperf.core.lab.eta does
from the database. The error is the predicted finish minus the real one.

Reported: median and 90th percentile of the absolute error (seconds) and of
the error relative to the time that was left, per phase (building,
testing) and overall; the share of real finishes inside the [low, high]
range; and the median signed error (> 0: too pessimistic). Results with the
machine and date go in docs/eta.md.

The synthetic lab (`--synthetic`, the default without a record) simulates
kperf's scheduling (one build worker first come first served, runners
claiming in kperf.core.lab.claim_order's order, more boots after an
inconclusive first look) with durations drawn around those
bench/turnaround.py measured on the real stack (docs/performance.md).
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import platform
import random
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "service"))

from kperf.core.lab.claim_order import claim_key
from kperf.core.lab.eta_model import Estimate, History, Prior, Situation, Work, estimate

# --- the synthetic lab --------------------------------------------------------

# Medians measured by bench/turnaround.py (docs/performance.md, 2026-11-23):
# a clean fixture-tree build 117 s, an incremental one 34 s, a spawn quick
# boot about 30 s on the local TCG runner. pft's and arm64's factors are
# assumptions (no arm64 runner was measured), stated in docs/eta.md.
CLASSES = {"qemu-x86_64": ("x86_64", 2, 1.0), "qemu-arm64": ("arm64", 1, 1.6)}
BENCHES = {"spawn": 30.0, "pft": 45.0}
CLEAN_BUILD_S, INCREMENTAL_BUILD_S = 117.0, 34.0
BOOTS_PER_SIDE = 2  # spawn quick on the instruction clock (KPERF_INSTRUCTION_CLOCK_BOOTS)
BUDGET_FACTOR = 2  # KPERF_BOOT_BUDGET_FACTOR's default
GRID = "quick"


def _draw(rng: random.Random, median: float, sigma: float, slow: float = 0.0) -> float:
    # Lognormal around the median; now and then a run that is much slower (a retried boot, a cold cache).
    value = median * math.exp(rng.gauss(0, sigma))
    return value * rng.uniform(2.0, 3.0) if rng.random() < slow else value


@dataclass
class _Sub:
    id: int
    created: float
    arches: list[str]
    benches: list[str]
    rerun: bool
    builds: list[int] = field(default_factory=list)
    jobs: list[int] = field(default_factory=list)
    reran: bool = False
    finished: float | None = None


def synthetic(n: int, seed: int, mean_gap_s: float) -> dict[str, Any]:
    """Simulate a lab taking `n` submissions; the record of what happened."""
    rng = random.Random(seed)
    subs: dict[int, _Sub] = {}
    builds: dict[int, dict[str, Any]] = {}
    jobs: dict[int, dict[str, Any]] = {}
    events: list[tuple[float, int, str, int]] = []
    order = 0

    def push(t: float, kind: str, ident: int) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (t, order, kind, ident))

    t = 0.0
    for i in range(1, n + 1):
        t += rng.expovariate(1 / mean_gap_s)
        push(t, "arrive", i)
    build_queue: list[int] = []
    build_busy: int | None = None
    runners: dict[str, list[int | None]] = {c: [None] * spec[1] for c, spec in CLASSES.items()}
    queued: dict[str, list[int]] = {c: [] for c in CLASSES}

    def queue_jobs(sub: _Sub, now: float, per_side: int) -> None:
        for c, (arch, _, _) in sorted(CLASSES.items()):
            if arch not in sub.arches:
                continue
            for bench in sub.benches:
                seq0 = sum(1 for j in sub.jobs if jobs[j]["machine_class"] == c and jobs[j]["benchmark"] == bench)
                for k in range(2 * per_side):
                    jid = len(jobs) + 1
                    jobs[jid] = {
                        "id": jid,
                        "submission": sub.id,
                        "machine_class": c,
                        "benchmark": bench,
                        "grid": GRID,
                        "seq": seq0 + k,
                        "created": now,
                        "started": None,
                        "finished": None,
                    }
                    sub.jobs.append(jid)
                    queued[c].append(jid)

    def dispatch(now: float) -> None:
        nonlocal build_busy
        if build_busy is None and build_queue:
            build_busy = build_queue.pop(0)
            builds[build_busy]["started"] = now
            push(now + builds[build_busy]["_duration"], "built", build_busy)
        for c, slots in runners.items():
            for slot in range(len(slots)):
                if slots[slot] is not None or not queued[c]:
                    continue
                queued[c].sort(key=lambda j: claim_key(None, jobs[j]["submission"], None, jobs[j]["seq"], j))
                jid = queued[c].pop(0)
                slots[slot] = jid
                jobs[jid]["started"] = now
                median = BENCHES[jobs[jid]["benchmark"]] * CLASSES[c][2]
                push(now + _draw(rng, median, 0.15, slow=0.03), "ran", jid)

    while events:
        now, _, kind, ident = heapq.heappop(events)
        if kind == "arrive":
            sub = _Sub(
                ident,
                now,
                ["x86_64", "arm64"] if rng.random() < 0.3 else ["x86_64"],
                ["spawn", "pft"] if rng.random() < 0.3 else ["spawn"],
                rerun=rng.random() < 0.25,
            )
            subs[ident] = sub
            for _ in sub.arches:
                # Half of the bases are built already (another submission's); a head
                # builds incrementally from its base's object tree.
                sides = ["head"] if rng.random() < 0.5 else ["base", "head"]
                for side in sides:
                    bid = len(builds) + 1
                    median = INCREMENTAL_BUILD_S if side == "head" else CLEAN_BUILD_S
                    kind = "incremental" if side == "head" else "clean"
                    builds[bid] = {
                        "id": bid,
                        "submissions": [sub.id],
                        "created": now,
                        "started": None,
                        "finished": None,
                        # What it was, and what kperf.core.lab.eta._kind would have expected.
                        "kind": kind,
                        "expected_kind": kind,
                        "_duration": _draw(rng, median, 0.25, slow=0.02),
                    }
                    sub.builds.append(bid)
                    build_queue.append(bid)
        elif kind == "built":
            builds[ident]["finished"] = now
            build_busy = None
            sub = subs[builds[ident]["submissions"][0]]
            if all(builds[b]["finished"] is not None for b in sub.builds):
                queue_jobs(sub, now, BOOTS_PER_SIDE)
        elif kind == "ran":
            job = jobs[ident]
            job["finished"] = now
            slots = runners[job["machine_class"]]
            slots[slots.index(ident)] = None
            sub = subs[job["submission"]]
            if all(jobs[j]["finished"] is not None for j in sub.jobs):
                if sub.rerun and not sub.reran:
                    sub.reran = True
                    queue_jobs(sub, now, BOOTS_PER_SIDE)
                else:
                    sub.finished = now
        dispatch(now)
    return {
        "source": f"synthetic lab: {n} submissions, seed {seed}, a submission every {mean_gap_s:.0f} s on average",
        "runners": {c: spec[1] for c, spec in CLASSES.items()},
        "builds": [{k: v for k, v in b.items() if not k.startswith("_")} for b in builds.values()],
        "jobs": list(jobs.values()),
        "submissions": [
            {
                "id": s.id,
                "created": s.created,
                "finished": s.finished,
                "planned": [
                    {"machine_class": c, "benchmark": b, "grid": GRID, "jobs": 2 * BOOTS_PER_SIDE}
                    for c, (arch, _, _) in sorted(CLASSES.items())
                    if arch in s.arches
                    for b in s.benches
                ],
                "budget_factor": BUDGET_FACTOR,
            }
            for s in subs.values()
        ],
    }


# --- a real kperf's database --------------------------------------------------


def from_database(url: str) -> dict[str, Any]:
    """The record of a kperf database's finished submissions (read-only queries)."""
    import psycopg

    def ts(v: Any) -> float | None:
        return v.timestamp() if v is not None else None

    with psycopg.connect(url) as conn:
        cur = conn.cursor()
        cur.execute(
            "SELECT c.name, count(*) FROM core_runner r JOIN core_machineclass c ON c.id = r.machine_class_id "
            "WHERE r.health = 'good' GROUP BY c.name"
        )
        runners: dict[str, int] = dict(cur.fetchall())
        # When a row last started to run and when it was done, from its status
        # history where it has one: what kperf.core.lab.eta reads (a job holds
        # its runner from the lease, before the boot starts: kernel download,
        # QEMU's start), not the row's own started/finished.
        ran = (
            "COALESCE((SELECT max(s.at) FROM core_statuschange s WHERE s.kind = '{kind}' "
            "AND s.object_id = {row}.id AND s.target = '{running}'), {row}.started), "
            "COALESCE((SELECT max(s.at) FROM core_statuschange s WHERE s.kind = '{kind}' "
            "AND s.object_id = {row}.id AND s.target = 'done'), {row}.finished)"
        )
        cur.execute(
            "SELECT j.id, j.submission_id, c.name, j.benchmark, j.grid, j.seq, j.created, "
            + ran.format(kind="Job", row="j", running="leased")
            + " FROM core_job j JOIN core_machineclass c ON c.id = j.machine_class_id "
            "WHERE j.status = 'done' AND j.pinned_runner_id IS NULL "
            "AND j.started IS NOT NULL AND j.finished IS NOT NULL"
        )
        keys = ("id", "submission", "machine_class", "benchmark", "grid", "seq", "created", "started", "finished")
        jobs: list[dict[str, Any]] = [
            {k: (ts(v) if k in ("created", "started", "finished") else v) for k, v in zip(keys, row, strict=True)}
            for row in cur.fetchall()
        ]
        cur.execute(
            "SELECT b.id, b.created, "
            + ran.format(kind="KernelBuild", row="b", running="building")
            + ", array_remove(array_agg(sb.submission_id), NULL), "
            "CASE WHEN b.reused_sha <> '' THEN 'incremental' ELSE 'clean' END, "
            # kperf.core.lab.eta._kind's guess when the build was queued: the lab had built the tree for the arch.
            "CASE WHEN EXISTS (SELECT 1 FROM core_kernelbuild o WHERE o.tree_id = b.tree_id AND o.arch = b.arch "
            "AND o.status = 'done' AND o.finished < b.created AND o.scope IN (b.scope, 'lab')) "
            "THEN 'incremental' ELSE 'clean' END "
            "FROM core_kernelbuild b LEFT JOIN core_submissionbuild sb ON sb.build_id = b.id "
            "WHERE b.status = 'done' AND b.started IS NOT NULL AND b.finished IS NOT NULL GROUP BY b.id"
        )
        builds = [
            {
                "id": i,
                "created": ts(c),
                "started": ts(s),
                "finished": ts(f),
                "submissions": subs,
                "kind": kind,
                "expected_kind": expected,
            }
            for i, c, s, f, subs, kind, expected in cur.fetchall()
        ]
        cur.execute("SELECT id, created, finished FROM core_submission WHERE status = 'done'")
        rows = cur.fetchall()
        # Base boots a submission used from another's first look: its plan
        # counted them while it was building, as kperf.core.lab.eta._planned
        # counts both sides of every benchmark.
        cur.execute(
            "SELECT s.submission_id, c.name, j.benchmark, j.grid, count(*) FROM core_sharedjob s "
            "JOIN core_job j ON j.id = s.job_id JOIN core_machineclass c ON c.id = j.machine_class_id "
            "WHERE j.pinned_runner_id IS NULL GROUP BY 1, 2, 3, 4"
        )
        shared = cur.fetchall()
    first_look: dict[int, dict[tuple[str, str, str], int]] = defaultdict(lambda: defaultdict(int))
    by_sub: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for j in jobs:
        if j["submission"] is not None:
            by_sub[j["submission"]].append(j)
    for sid, own in by_sub.items():
        # The first look's jobs are those queued with the first (one transaction, within a second).
        start = min(j["created"] for j in own)
        for j in own:
            if j["created"] - start < 1.0:
                first_look[sid][(j["machine_class"], j["benchmark"], j["grid"])] += 1
    for sid, mclass, bench, grid, n in shared:
        if sid in by_sub:
            first_look[sid][(mclass, bench, grid)] += n
    return {
        "source": f"kperf database, {len(rows)} finished submissions",
        "runners": runners,
        "builds": builds,
        "jobs": jobs,
        "submissions": [
            {
                "id": sid,
                "created": ts(created),
                "finished": ts(finished),
                "planned": [
                    {"machine_class": c, "benchmark": b, "grid": g, "jobs": n}
                    for (c, b, g), n in first_look[sid].items()
                ],
                # The service's default; a lab that changed it records another.
                "budget_factor": BUDGET_FACTOR,
            }
            for sid, created, finished in rows
            if finished is not None and sid in by_sub
        ],
    }


# --- the replay ---------------------------------------------------------------


def _running(x: dict[str, Any], t: float) -> bool:
    return x["started"] is not None and x["started"] <= t < (x["finished"] or math.inf)


def _queued(x: dict[str, Any], t: float) -> bool:
    return x["created"] <= t and (x["started"] is None or t < x["started"])


def _building(rec: dict[str, Any], sub: dict[str, Any], t: float) -> bool:
    """Created, with builds unfinished and no job queued yet, at `t`."""
    return sub["created"] <= t and any(
        sub["id"] in b["submissions"] and b["created"] <= t < b["finished"] for b in rec["builds"]
    )


def situation_at(
    rec: dict[str, Any], sub: dict[str, Any], t: float, prior: Prior | None = None, measured: bool = True
) -> tuple[Situation, History, str]:
    """What kperf.core.lab.eta would have read at `t` about `sub`, and the phase it was in.

    `prior`: the host's speed for what was not measured (bench/eta_cold.py);
    `measured=False`: as if the lab had measured nothing before `t`.
    """
    hist = History(prior=prior)
    for j in sorted((j for j in rec["jobs"] if measured and j["finished"] < t), key=lambda j: j["finished"]):
        hist.add_job(j["machine_class"], j["benchmark"], j["grid"], j["finished"] - j["started"])
    for b in sorted((b for b in rec["builds"] if measured and b["finished"] < t), key=lambda b: b["finished"]):
        hist.add_build(b["finished"] - b["started"], b.get("kind", ""))
    sid = sub["id"]
    own_builds = [b for b in rec["builds"] if sid in b["submissions"] and b["created"] <= t and b["finished"] > t]
    if not own_builds and not any(j["submission"] == sid and j["created"] <= t for j in rec["jobs"]):
        # Made, refs not resolved yet (its builds are made a moment later):
        # the service plans them (kperf.core.lab.eta._builds, status queued).
        own_builds = [b for b in rec["builds"] if sid in b["submissions"] and b["finished"] > t]
    own_jobs = [j for j in rec["jobs"] if j["submission"] == sid and j["created"] <= t]
    planned = not own_jobs and bool(own_builds)
    mine: list[float | None] = [t - b["started"] if _running(b, t) else None for b in own_builds]
    # Older records (before build kinds) say nothing: any build then. A later build starts
    # from the tree the first leaves warm (kperf.core.lab.eta._own_kinds; one arch here).
    later = {b["id"] for b in own_builds if "expected_kind" in b and any(o["id"] < b["id"] for o in own_builds)}
    mine_kinds = ["incremental" if b["id"] in later else b.get("expected_kind", "") for b in own_builds]
    ahead: list[float | None] = []
    ahead_kinds: list[str] = []
    # As kperf.core.lab.eta._builds: the builds before the submission's own, or all once they are done.
    oldest = min((b["created"] for b in own_builds), default=t)
    for b in rec["builds"]:
        if b in own_builds:
            continue
        if _running(b, t):
            ahead.append(t - b["started"])
        elif _queued(b, t) and b["created"] < oldest:
            ahead.append(None)
        else:
            continue
        ahead_kinds.append(b.get("expected_kind", ""))
    busy = sum(1 for b in rec["builds"] if _running(b, t))
    classes = set(rec["runners"]) | {p["machine_class"] for p in sub["planned"]}
    running: list[Work] = []
    queued: list[tuple[Any, Work]] = []
    for j in rec["jobs"]:
        if j["machine_class"] not in classes:
            continue
        own = j["submission"] == sid
        if _running(j, t):
            running.append(Work(j["machine_class"], j["benchmark"], j["grid"], own=own, elapsed_s=t - j["started"]))
        elif _queued(j, t) and (own or (j["submission"] or math.inf) <= sid):
            key = claim_key(None, j["submission"], None, j["seq"], j["id"])
            queued.append((key, Work(j["machine_class"], j["benchmark"], j["grid"], own=own)))
    # Older submissions still building (and this one, if it is) queue their first look when built.
    for other in rec["submissions"]:
        if other["id"] > sid or (other["id"] == sid and not planned) or not _building(rec, other, t):
            continue
        works = [
            Work(p["machine_class"], p["benchmark"], p["grid"], own=other["id"] == sid, after_builds=True)
            for p in other["planned"]
            for _ in range(p["jobs"])
        ]
        queued += [(claim_key(None, other["id"], None, i, 0), w) for i, w in enumerate(works)]
    ordered = [w for _, w in sorted(queued, key=lambda kw: kw[0])]
    jobs = list(running)
    for c in sorted(classes):
        line = [w for w in ordered if w.machine_class == c]
        last = max((i for i, w in enumerate(line) if w.own), default=-1)
        jobs += line[: last + 1]
    more: list[Work] = []
    for p in sub["planned"]:
        have = sum(
            1
            for j in own_jobs
            if (j["machine_class"], j["benchmark"], j["grid"]) == (p["machine_class"], p["benchmark"], p["grid"])
        )
        extra = max(p["jobs"] * sub["budget_factor"] - max(have, p["jobs"]), 0)
        more += [Work(p["machine_class"], p["benchmark"], p["grid"], own=True)] * extra
    s = Situation(
        runners=rec["runners"],
        builds=mine,
        builds_ahead=ahead,
        build_workers=max(1, busy),
        build_kinds=mine_kinds,
        ahead_kinds=ahead_kinds,
        jobs=jobs,
        more=more,
    )
    return s, hist, "building" if own_builds else "testing"


@dataclass(frozen=True)
class Sample:
    phase: str
    # Whether a look was inconclusive and kperf added boots to this submission.
    more_added: bool
    left_s: float
    error_s: float
    inside: bool


def moments(rec: dict[str, Any], sub: dict[str, Any], step: float) -> list[float]:
    """When the replay asks for the ETA: every `step` seconds from the
    submission's creation to its verdict, as a person reloading the page
    would see it, so each moment of its life counts alike; with step 0, at
    its creation and at each start and end of its own builds and jobs.

    At an event's own instant the record holds the state between two rows
    (a build just done, the jobs it leads to not yet queued), which lasts a
    fraction of a second in the service: sampled only there, a real lab's
    replay counted those moments as often as all the others."""
    if step > 0:
        n = int((sub["finished"] - sub["created"]) // step) + 1
        return [sub["created"] + i * step for i in range(n)]
    times = {sub["created"]}
    for x in [*rec["jobs"], *rec["builds"]]:
        if x.get("submission") == sub["id"] or sub["id"] in x.get("submissions", ()):
            times.update(v for v in (x["started"], x["finished"]) if v is not None)
    # A shared base build or boot can predate the submission: nobody asked then.
    return sorted(t for t in times if t >= sub["created"])


def replay(rec: dict[str, Any], warmup: int, step: float = 0.0) -> list[Sample]:
    """The ETA's error at the `moments` of every finished submission after the first `warmup`."""
    out: list[Sample] = []
    subs = sorted((s for s in rec["submissions"] if s["finished"] is not None), key=lambda s: s["created"])
    for sub in subs[warmup:]:
        first_look = sum(p["jobs"] for p in sub["planned"])
        more_added = sum(1 for j in rec["jobs"] if j["submission"] == sub["id"]) > first_look
        for t in moments(rec, sub, step):
            if t >= sub["finished"]:
                continue
            s, hist, phase = situation_at(rec, sub, t)
            est = estimate(s, hist)
            if not isinstance(est, Estimate):
                continue
            left = sub["finished"] - t
            inside = est.low - 1e-6 <= left <= est.high + 1e-6
            out.append(Sample(phase, more_added, left, est.seconds - left, inside))
    return out


# A submission's statuses before its jobs are queued (kperf.core.models.Submission.Status).
_BEFORE_JOBS = {"queued", "building"}


def shown(rec: dict[str, Any], warmup: int) -> list[Sample]:
    """What the service itself showed, poll by poll, in a real run recorded by
    bench/turnaround.py (its `polls`), held against when each verdict came:
    no reconstruction, every poll from the submission's first on."""
    out: list[Sample] = []
    subs = sorted(rec["polls"].values(), key=lambda s: s["created"])
    for sub in subs[warmup:]:
        for t, status, seconds, low, high in sub["polls"]:
            left = sub["finished"] - t
            if left <= 0 or seconds is None:
                continue
            phase = "building" if status in _BEFORE_JOBS else "testing"
            # The API rounds to whole seconds.
            inside = low - 1 <= left <= high + 1
            out.append(Sample(phase, sub["more_added"], left, seconds - left, inside))
    return out


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def report(samples: list[Sample]) -> list[str]:
    lines = [
        "| samples | n | abs error median / p90 (s) | relative error median / p90 "
        "| signed median (s) | inside [low, high] |",
        "|---|---|---|---|---|---|",
    ]
    groups = {
        "building": [s for s in samples if s.phase == "building"],
        "testing": [s for s in samples if s.phase == "testing"],
        "first look decided": [s for s in samples if not s.more_added],
        "boots added at a look": [s for s in samples if s.more_added],
        "all": samples,
    }
    for name, group in groups.items():
        if not group:
            continue
        abs_err = [abs(s.error_s) for s in group]
        rel = [abs(s.error_s) / s.left_s for s in group if s.left_s > 0]
        lines.append(
            f"| {name} | {len(group)} | {_pct(abs_err, 0.5):.0f} / {_pct(abs_err, 0.9):.0f} "
            f"| {_pct(rel, 0.5):.0%} / {_pct(rel, 0.9):.0%} | {statistics.median(s.error_s for s in group):+.0f} "
            f"| {sum(s.inside for s in group) / len(group):.0%} |"
        )
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replay", type=Path, help="a record written by --record")
    p.add_argument("--shown", type=Path, help="bench/turnaround.py's --json: the ETAs the service showed in a real run")
    p.add_argument("--database-url", help="record a kperf database's finished submissions instead")
    p.add_argument("--record", type=Path, help="write the record (synthetic or from the database) here")
    p.add_argument("--submissions", type=int, default=80, help="synthetic: how many")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--gap", type=float, default=150.0, help="synthetic: mean seconds between submissions")
    p.add_argument("--warmup", type=int, default=5, help="submissions left out while the history fills")
    p.add_argument(
        "--step", type=float, default=0.0, help="ask every STEP seconds of a submission's life (0: at its events)"
    )
    args = p.parse_args()
    if args.shown:
        polled = json.loads(args.shown.read_text())
        if not isinstance(polled, dict) or "polls" not in polled:
            p.error(f"{args.shown} holds no `polls`: write one with bench/turnaround.py --json (since 2026-11-29)")
        samples = shown(polled, args.warmup)
        print(f"{len(samples)} polls of {len(polled['polls']) - args.warmup} submissions, {args.shown.name}")
        print(f"recorded: {polled.get('date', '?')}, {polled.get('machine', '?')}")
        print("\n".join(report(samples)))
        return 0
    if args.replay:
        rec = json.loads(args.replay.read_text())
    elif args.database_url:
        rec = from_database(args.database_url)
    else:
        rec = synthetic(args.submissions, args.seed, args.gap)
    if args.record:
        args.record.write_text(json.dumps(rec))
    samples = replay(rec, args.warmup, args.step)
    if not samples:
        print(f"{rec['source']}: nothing to replay (no finished submission after the warm-up)")
        return 1
    print(f"{rec['source']}; replayed {len(samples)} moments of {len(rec['submissions']) - args.warmup} submissions")
    print(f"machine: {platform.machine()}, {platform.python_implementation()} {platform.python_version()}")
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print("\n".join(report(samples)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
