#!/usr/bin/env python3
"""Submit to verdict on the real stack, against the submission's own build and boot time.

    nice -n 10 .venv/bin/python bench/turnaround.py                       # 15-25 minutes on 2 cores
    .venv/bin/python bench/turnaround.py --benchmark spawn --heads fork-slow,neutral,brk-slower
    # One patch on a measured base, all four benchmarks: the first head measures the base.
    .venv/bin/python bench/turnaround.py --benchmark spawn,pft,aim9,pagealloc --heads neutral,brk-slower

`kperf-up` (kperf_testing.stack: web, workers, beat and the local QEMU
runner, on an embedded PostgreSQL) and the fixture kernel tree
(kperf_testing.kbuild, KPERF_CACHE, ~/.cache/kperf, with its ccache).
Two phases:

- alone: one submission (the first head) on an empty queue;
- batch: the other heads submitted at the same instant, against the same
  base, after the first is done.

Per submission: wall time from submit to verdict; its own work, i.e. the
builds that ran for it after it was submitted plus the boots it used (its
own and the base boots it shared) that ran after it was submitted; their
ratio (goal for `alone`: <= 1.3); the span of its boots (the time at least
one of them ran: the runners measure side by side) and the ratio of its wall
time to its builds plus that span (goal on a measured base: <= 1.1, and
under 10 minutes); base boots measured for it and shared with it; and how right the ETA
the API showed at each poll was (`eta shown`: the error relative to the
time really left, and the share of polls whose [low, high] held the real
finish, from each submission's first estimate on). For the
batch, every boot measured, so that N submissions on one base can be seen
to cost one base measurement. Results with the machine and date go in
docs/performance.md, "Lab speed and submit to verdict".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import eta  # bench/eta.py, beside this script: it judges the ETAs recorded here

from kperf_testing.kbuild import ensure_test_tree
from kperf_testing.stack import RunningStack, running_stack

TIMEOUT_S = 3 * 3600

# Every status change of a submission, its builds and its jobs (shared base
# boots included), oldest first: where the time between its build and its
# boots and the verdict went.
TIMELINE_SQL = """
WITH rows(kind, object_id) AS (
    SELECT 'Submission', %(sub)s::bigint
    UNION SELECT 'KernelBuild', build_id FROM core_submissionbuild WHERE submission_id = %(sub)s
    UNION SELECT 'Job', id FROM core_job WHERE submission_id = %(sub)s
    UNION SELECT 'Job', job_id FROM core_sharedjob WHERE submission_id = %(sub)s
)
SELECT extract(epoch FROM c.at), c.kind, c.object_id, c.source, c.target, c.actor
FROM core_statuschange c JOIN rows USING (kind, object_id)
WHERE c.at >= (SELECT created FROM core_submission WHERE id = %(sub)s)
ORDER BY c.at
"""


def timeline(database_url: str, sub_id: int) -> list[str]:
    """The submission's status changes as lines of seconds since it was made."""
    import psycopg

    with psycopg.connect(database_url) as conn:
        (created,) = conn.execute(
            "SELECT extract(epoch FROM created) FROM core_submission WHERE id = %s", [sub_id]
        ).fetchone() or (None,)
        rows = conn.execute(TIMELINE_SQL, {"sub": sub_id}).fetchall()
    return [
        f"{float(at) - float(created):7.2f} s  {kind} {pk}: {source or '-'} -> {target}  ({actor})"
        for at, kind, pk, source, target, actor in rows
    ]


def _t(iso: str | None) -> float:
    return datetime.fromisoformat(iso).timestamp() if iso else float("nan")


class Watch:
    """Polls submissions until final; remembers which builds ran while each waited."""

    def __init__(self, stack: RunningStack) -> None:
        self.stack = stack
        self.built_for: dict[int, set[int]] = {}
        self.final: dict[int, dict[str, Any]] = {}
        # What the API said at each poll: (epoch seconds, status, `eta` or
        # None) per submission, to hold against when the verdict came.
        self.shown: dict[int, list[tuple[float, str, dict[str, Any] | None]]] = {}

    def submit(self, tree: Path, branch: str, benchmarks: list[str]) -> int:
        resp = self.stack.api(
            "POST", "/submissions", {"tree": str(tree), "branch": branch, "base": "base", "benchmarks": benchmarks}
        )
        resp.raise_for_status()
        sub_id = int(resp.json()["id"])
        self.built_for[sub_id] = set()
        return sub_id

    def wait(self, ids: list[int]) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            for sub_id in ids:
                if sub_id in self.final:
                    continue
                asked = time.time()
                d: dict[str, Any] = self.stack.api("GET", f"/submissions/{sub_id}").json()
                if d["status"] not in ("done", "failed"):
                    self.shown.setdefault(sub_id, []).append((asked, d["status"], d.get("eta")))
                for b in d["builds"]:
                    # A build seen unfinished after the submission arrived ran for it.
                    if b["status"] in ("queued", "building"):
                        self.built_for[sub_id].add(b["id"])
                if d["status"] in ("done", "failed"):
                    self.final[sub_id] = d
                    print(f"submission {sub_id}: {d['status']} {d.get('error', '')}", flush=True)
            if all(i in self.final for i in ids):
                return
            time.sleep(2)
        raise RuntimeError(f"submissions {ids} not final after {TIMEOUT_S} s")

    def report(self, sub_id: int) -> dict[str, Any]:
        d = self.final[sub_id]
        created, finished = _t(d["created"]), _t(d["finished"])
        builds = sum(b["duration_s"] or 0.0 for b in d["builds"] if b["id"] in self.built_for[sub_id])
        ran = [
            (_t(j["started"]), _t(j["finished"]))
            for j in d["jobs"]
            if j["status"] == "done" and j["started"] and _t(j["started"]) >= created
        ]
        boots = [end - start for start, end in ran]
        # The time at least one of its boots ran (runners measure side by side).
        span, reach = 0.0, float("-inf")
        for start, end in sorted(ran):
            span += max(0.0, end - max(start, reach))
            reach = max(reach, end)
        base_own = sum(j["boots"] for j in d["jobs"] if j["side"] == "base" and not j.get("shared"))
        base_shared = sum(j["boots"] for j in d["jobs"] if j["side"] == "base" and j.get("shared"))
        own = builds + sum(boots)
        wall = finished - created
        return {
            "id": sub_id,
            "branch": d["branch"],
            "status": d["status"],
            "wall s": round(wall, 1),
            "build s": round(builds, 1),
            "boot s": round(sum(boots), 1),
            "boot span s": round(span, 1),
            "ratio": round(wall / own, 3) if own else None,
            "ratio to builds + span": round(wall / (builds + span), 3) if builds + span else None,
            "base boots measured": base_own,
            "base boots shared": base_shared,
            "head boots": sum(j["boots"] for j in d["jobs"] if j["side"] == "head"),
            "verdicts": sorted({m["verdict"] for c in d["comparisons"] for m in c["metrics"]}),
        }


def polls(watch: Watch, ids: list[int]) -> dict[str, Any]:
    """Each submission's polls as `bench/eta.py --shown` reads them: [epoch
    seconds, status, eta seconds, low, high] (None where it showed none),
    when it was made and done, and whether a look added boots."""
    out: dict[str, Any] = {}
    for sub_id in ids:
        d = watch.final[sub_id]
        own = [_t(j["queued"]) for j in d["jobs"] if not j.get("shared") and j["queued"]]
        rows = [
            [round(t, 3), status, *((e["seconds"], e["low"], e["high"]) if e else (None, None, None))]
            for t, status, e in watch.shown.get(sub_id, [])
        ]
        out[str(sub_id)] = {
            "created": _t(d["created"]),
            "finished": _t(d["finished"]),
            # Jobs queued after the first look's (within a second of the first) came from a later look.
            "more_added": bool(own) and any(q - min(own) > 1.0 for q in own),
            "polls": rows,
        }
    return out


def eta_accuracy(polled: dict[str, Any]) -> dict[str, Any]:
    """How right the ETA the API showed was, judged by bench/eta.py's `shown`
    over every poll from each submission's first estimate to its verdict, and
    each submission's first estimate against the time really left."""
    samples = eta.shown({"polls": polled}, warmup=0)
    if not samples:
        return {"polls": 0}
    rel = sorted(abs(x.error_s) / x.left_s for x in samples)
    first: dict[str, Any] = {}
    for sub_id, sub in polled.items():
        row = next((r for r in sub["polls"] if r[2] is not None and sub["finished"] > r[0]), None)
        if row is not None:
            left = sub["finished"] - row[0]
            first[sub_id] = {
                "shown s": row[2],
                "range s": [row[3], row[4]],
                "real s": round(left, 1),
                "relative error": round(abs(row[2] - left) / left, 3),
            }
    return {
        "polls with an estimate": len(samples),
        "polls without one": sum(1 for sub in polled.values() for r in sub["polls"] if r[2] is None),
        "relative error median": round(statistics.median(rel), 3),
        "relative error p90": round(rel[min(len(rel) - 1, int(0.9 * len(rel)))], 3),
        "inside [low, high]": round(sum(x.inside for x in samples) / len(samples), 3),
        "first estimates": first,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--benchmark", default="spawn", help="one or more, comma-separated")
    p.add_argument("--database-url", default="", help="the stack's database (default: its own embedded one)")
    p.add_argument("--heads", default="fork-slow,neutral,brk-slower", help="fixture branches; the first runs alone")
    p.add_argument("--cache", type=Path, default=Path(os.environ.get("KPERF_CACHE", Path.home() / ".cache/kperf")))
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    heads = [h.strip() for h in args.heads.split(",") if h.strip()]
    tree = ensure_test_tree(args.cache)
    home = Path(tempfile.mkdtemp(prefix="kperf-turnaround-"))
    # Everything embedded (kperf-up's own PostgreSQL and broker), the ccache shared.
    env = {
        "KPERF_CCACHE_DIR": str(args.cache / "ccache"),
        "DATABASE_URL": args.database_url,
        "CELERY_BROKER_URL": "",
    }
    benchmarks = [b.strip() for b in args.benchmark.split(",") if b.strip()]
    out: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores {platform.machine()}",
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "benchmark": args.benchmark,
    }
    with running_stack(home / "home", env) as stack:
        watch = Watch(stack)
        first = watch.submit(tree, heads[0], benchmarks)
        watch.wait([first])
        out["alone"] = watch.report(first)
        print("alone", json.dumps(out["alone"]), flush=True)
        t0 = time.time()
        batch = [watch.submit(tree, h, benchmarks) for h in heads[1:]]
        watch.wait(batch)
        out["batch"] = [watch.report(i) for i in batch]
        out["batch wall s"] = round(time.time() - t0, 1)
        # Each submission's builds and boots are its own (shared base boots
        # ran before the batch), so their sum is the batch's work.
        work = sum(r["build s"] + r["boot s"] for r in out["batch"])
        out["batch work s"] = round(work, 1)
        out["batch ratio"] = round(out["batch wall s"] / work, 3) if work else None
        for r in out["batch"]:
            print("batch", json.dumps(r), flush=True)
        out["polls"] = polls(watch, [first, *batch])
        out["eta shown"] = {
            "alone": eta_accuracy({str(first): out["polls"][str(first)]}),
            "batch": eta_accuracy({str(i): out["polls"][str(i)] for i in batch}),
        }
        print("eta shown", json.dumps(out["eta shown"]), flush=True)
        if args.database_url:
            for sub_id in [first, *batch]:
                out.setdefault("timelines", {})[str(sub_id)] = lines = timeline(args.database_url, sub_id)
                print(f"submission {sub_id}, status changes since it was made:", *lines, sep="\n  ", flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
