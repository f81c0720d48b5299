"""Write kperf's raw output as mmtests result directories, and run mmtests on them.

mmtests is not vendored: `KPERF_TEST_MMTESTS` names a tree of mmtests at
commit 74aced35950fe732f0ca559398b5127e8b18c126 (`git archive` of it will
do), and the tests that run its Perl extractors are skipped without it or
without perl (its scripts also want File::Slurp, File::Which,
List::MoreUtils and Cpanel::JSON::XS; Debian: libfile-slurp-perl
libfile-which-perl liblist-moreutils-perl libcpanel-json-xs-perl).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kperf_runner.benchmarks import Benchmark, Params

MMTESTS = os.environ.get("KPERF_TEST_MMTESTS", "")

needs_mmtests = pytest.mark.skipif(
    not (MMTESTS and Path(MMTESTS, "bin", "extract-mmtests.pl").is_file() and shutil.which("perl")),
    reason="set KPERF_TEST_MMTESTS to an mmtests tree at 74aced35 (and install perl) to run its extractors",
)


def write_runs(root: Path, bench: Benchmark, raw_output: str, params: Params) -> list[str]:
    """bench.mmtests_runs() as work/log/<run>/iter-0/<benchmark>/logs/ under root; the run names."""
    runs = bench.mmtests_runs(raw_output, params)
    for run, files in runs.items():
        logs = root / run / "iter-0" / bench.mmtests_name / "logs"
        logs.mkdir(parents=True)
        for name, text in files.items():
            (logs / name).write_text(text)
    return list(runs)


def extract(root: Path, benchmark: str, run: str) -> dict[str, list[float]]:
    """{metric: its samples over the iter-* directories} as extract-mmtests.pl reads one run.

    Through --print-json, the extractor's data as it holds it: its text
    report stops at the first metric without data (Extract.pm line 329),
    which pagealloc's every-order-with-every-batch metric list always has
    when the orders' batch ranges differ (ExtractPagealloc.pm lines 52-58).
    """
    out = subprocess.run(
        [
            "perl",
            str(Path(MMTESTS, "bin", "extract-mmtests.pl")),
            "-d",
            str(root),
            "-b",
            benchmark,
            "-n",
            run,
            "--print-json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    data = json.loads(out.stdout)["_ResultData"]
    # Perl keeps numbers read from a log as strings; JSON shows which.
    return {metric: [float(v) for it in data[metric] for v in it["Values"]] for metric in sorted(data)}
