"""The tracked-branch request: one schema for the REST API's body and the domain.

POST /api/v1/branches takes this schema as its body (kperf.core.web.api.branches,
whose TrackIn adds nothing to it) and kperf.core.tracking.branches.track takes the
same object: each field is declared once, with its type, default and what it means
(the OpenAPI document's description). The checks stay in `track`, which refuses
with SubmissionError naming the field at fault (the API answers 400
`invalid-branch` with that `field`), as a submission's checks do.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from kperf.core.submissions.request import BenchmarkNames


class TrackRequest(BaseModel):
    """What to follow and how to measure each commit it moves to (docs/tracking.md)."""

    tree: Annotated[str, Field(title="Tree", description="the git tree's URL, as for a submission")]
    branch: Annotated[
        str, Field(title="Branch", description="one of the tree's branches as `git branch` shows it ('master')")
    ]
    benchmarks: Annotated[
        BenchmarkNames,
        Field(title="Benchmarks", description="benchmark names, or all for every one (docs/benchmarks.md)"),
    ] = ["spawn"]
    grid: Annotated[str, Field(title="Grid", description="the grid every commit runs (docs/benchmarks.md)")] = "quick"
    arches: Annotated[list[str], Field(title="Architectures", description="x86_64, arm64")] = ["x86_64"]
    boots: Annotated[
        int, Field(title="Boots", description="boots per commit and machine class, 0 to 100; 0: the grid's")
    ] = 0
    max_commits: Annotated[
        int,
        Field(
            title="Commits per poll",
            description="at most this many of the new commits of one poll are measured, evenly spaced, "
            "the newest included (1 to 500)",
        ),
    ] = 16
    backfill: Annotated[
        int, Field(title="Backfill", description="commits before the branch's head to measure at once (0 to 200)")
    ] = 0
    notify: Annotated[
        list[str], Field(title="Notify", description="addresses mailed about its change points, besides its owner")
    ] = []
    bisect: Annotated[
        bool, Field(title="Bisect", description="find the commit of each change point between two measured ones")
    ] = True
    min_effect_pct: Annotated[
        float | None,
        Field(title="Smallest effect", description="percent below which a change is not flagged; none: the clock's"),
    ] = None
    profile: Annotated[
        str,
        Field(
            title="Profile",
            description="configuration profile of its commits: tiny, mm or distro; empty for each machine "
            "class's own (docs/kernels.md)",
        ),
    ] = ""
