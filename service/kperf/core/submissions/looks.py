"""Interim looks: one comparison's sequential look as soon as its own boots are in.

A submission's analysis (kperf.core.submissions.analysis) waits for every
job of every comparison. Without interim looks, a comparison whose first
look is inconclusive had its next boots queued only once every other
benchmark's boots were in and analysed: the runners idled through that
analysis and the claim after it (docs/performance.md, "One patch, all four
benchmarks"). Here, each time a job of a submission finishes, every
comparison whose jobs are all done takes the look its boots have reached;
an inconclusive one gets its next boots queued at once, while the others
still run.

The look is the one the analysis takes later (`analysis.group_look`, the
same boots and priors, the same alpha spent), so it decides alike; it
stores no verdict. The analysis, when every job is done, looks at every
comparison again and is what the submitter reads.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from kperf.core import benchmarks
from kperf.core.models import Job, MetricDef, Submission
from kperf.core.submissions import analysis

log = logging.getLogger(__name__)


def _key(group: analysis.Group, finished: int) -> dict[str, int | str]:
    return {"machine_class_id": group[0], "benchmark": group[1], "grid": group[2], "clock": group[3], "jobs": finished}


def interim_looks(sub: Submission, jobs: list[Job]) -> None:
    """Look at each comparison of `sub` whose jobs are all done, once per
    number of finished jobs; queue more boots where the look says so.

    `jobs` are every job the submission waits for (its own and the base
    boots it shares); the caller holds the submission's row lock and has
    found some of them still to run.
    """
    per_group: dict[analysis.Group, list[Job]] = defaultdict(list)
    for job in jobs:
        per_group[(job.machine_class_id, job.benchmark, job.grid, job.clock)].append(job)
    ready = [
        (group, len(group_jobs))
        for group, group_jobs in sorted(per_group.items())
        if all(j.status == Job.Status.DONE for j in group_jobs)
    ]
    taken = [_key(group, finished) for group, finished in ready]
    todo = [(group, key) for (group, _), key in zip(ready, taken, strict=True) if key not in sub.interim_looks]
    if not todo or len(ready) == len(per_group):
        # Nothing new, or every comparison is in: the analysis looks at them all.
        return
    defs = {m.name: m for m in MetricDef.objects.all()}
    for group, key in todo:
        metrics = analysis.load_boots(sub, only=group).get(group)
        if not metrics:
            continue
        plan = benchmarks.look_plan(group[1], group[2], group[3])
        if analysis.boots_per_side(metrics) < plan.looks[0]:
            continue  # fewer boots than a first look: the analysis says what is missing
        # As the analysis will: without the metrics kperf fails on (analysis.judged_look).
        judged, _ = analysis.judged_look(sub, defs, group, metrics)
        if judged is None:
            continue  # the analysis stores what failed
        look = judged.look
        sub.interim_looks = [*sub.interim_looks, key]
        if not look.decide and look.more_boots > 0:
            analysis.rerun(sub, group, look)
            log.info(
                "submission %s: %s %s inconclusive at look %s while others run, %s more boots per side queued",
                sub.pk,
                group[1],
                group[2],
                look.look,
                look.more_boots,
            )
    sub.save(update_fields=["interim_looks", "reruns"])
