"""Read an mmtests result directory (work/log/<run>) into kperf samples.

Pure Python, no Django: `kperf import-mmtests` reads the directory on the
user's machine and uploads what it found. The layout and line formats are
those of mmtests at commit 74aced35950fe732f0ca559398b5127e8b18c126 (the last
with the pagealloc, pft and unixbench-spawn drivers); see docs/benchmarks.md
for the file each format comes from.

An mmtests run does not reboot between its iterations (iter-0, iter-1, …),
so one run directory is one boot: its iterations are iterations. Import
several runs of the same kernel to give kperf several boots.

Each benchmark reads what mmtests' own extractor reads, so imported samples
are mmtests' samples: pagealloc drops the first two rounds of each batch size
as ExtractPagealloc.pm does (kperf's parser does the same), spawn takes the
RESULT of UnixBench's index row as ExtractUnixbenchcommon.pm does.
"""

from __future__ import annotations

import gzip
import lzma
import re
from dataclasses import dataclass, field
from pathlib import Path

from kperf_runner.benchmarks import without_warmup

# One run of aim9's singleuser: field 2 is the test, field 6 ops/sec.
AIM9_TESTS = ("page_test", "brk_test", "exec_test", "fork_test")
_AIM9_ROW = re.compile(r"^\s*\d+\s+(?P<name>\w+)\s+[\d.]+\s+\d+\s+[\d.]+\s+(?P<ops>[\d.]+)\b")
# pagealloc's systemtap script: "order %2u batch %6lu alloc %llu free %llu".
_PAGEALLOC_ROW = re.compile(
    r"^order\s+(?P<order>\d+)\s+batch\s+(?P<batch>\d+)\s+alloc\s+(?P<alloc>\d+)\s+free\s+(?P<free>\d+)\s*$"
)
# pft: " %3ld %4ld %3ld %8.2fs %8.2fs %8.2fs  %10.3f %10.3f".
_PFT_ROW = re.compile(
    r"^\s*\d+\s+(?P<thr>\d+)\s+\d+\s+[\d.]+s\s+[\d.]+s\s+[\d.]+s\s+(?P<cpu>[\d.]+)\s+(?P<wall>[\d.]+)\s*$"
)
# UnixBench's index table row, the one line of a spawn log mmtests' extractor
# reads (ExtractUnixbenchcommon.pm line 60): BASELINE, RESULT, INDEX; the
# sample is RESULT. Run's score line ("Process Creation  12345.6 lps   (30.0 s,
# 2 samples)") has a word after its first number, so it does not match.
_SPAWN_ROW = re.compile(r"^Process Creation +([\d.]+) +([\d.]+) +([\d.]+)")

BENCHMARK_DIRS = {"aim9": "aim9", "pagealloc": "pagealloc", "pft": "pft", "unixbench-spawn": "spawn"}


class MmtestsImportError(ValueError):
    """The directory is not what kperf can import; the message says why."""


@dataclass
class ImportedBenchmark:
    benchmark: str  # kperf's name
    samples: list[tuple[str, int, float]] = field(default_factory=list)  # (metric, iteration, value)
    files: list[str] = field(default_factory=list)

    def add(self, metric: str, value: float) -> None:
        iteration = sum(1 for m, _, _ in self.samples if m == metric)
        self.samples.append((metric, iteration, value))


@dataclass
class ImportedRun:
    run_name: str
    kernel_version: str
    benchmarks: dict[str, ImportedBenchmark]


def read_text(path: Path) -> str:
    if path.suffix == ".gz":
        return gzip.decompress(path.read_bytes()).decode(errors="replace")
    if path.suffix == ".xz":
        return lzma.decompress(path.read_bytes()).decode(errors="replace")
    return path.read_text(errors="replace")


def _logs(iter_dir: Path, bench_dir: str) -> Path | None:
    logs = iter_dir / bench_dir / "logs"
    return logs if logs.is_dir() else None


def _aim9(logs: Path, out: ImportedBenchmark) -> None:
    files = sorted(
        (p for p in logs.iterdir() if re.fullmatch(r"aim9-\d+(\.gz|\.xz)?", p.name)),
        key=lambda p: int(re.findall(r"\d+", p.name)[-1]),
    )
    for path in files:
        out.files.append(path.name)
        for line in read_text(path).splitlines():
            m = _AIM9_ROW.match(line)
            if m and m["name"] in AIM9_TESTS:
                out.add(m["name"], float(m["ops"]))


def _pagealloc(logs: Path, out: ImportedBenchmark) -> None:
    path = logs / "pagealloc.log"
    if not path.exists():
        raise MmtestsImportError(f"{logs} has no pagealloc.log")
    out.files.append(path.name)
    rows = []
    for line in read_text(path).splitlines():
        m = _PAGEALLOC_ROW.match(line.strip())
        if m:
            rows.append((int(m["order"]), int(m["batch"]), int(m["alloc"]), int(m["free"])))
    # The first two rounds of each batch size are warm-up, for mmtests and kperf alike.
    for o, b, alloc, free in without_warmup(rows):
        out.add(f"alloc-odr{o}-{b}", float(alloc))
        out.add(f"free-odr{o}-{b}", float(free))
        out.add(f"total-odr{o}-{b}", float(alloc + free))


def _pft_mode(logs: Path, given: str | None) -> str:
    if given:
        return given
    commands = logs / "commands.log"
    if commands.exists():
        text = read_text(commands)
        if re.search(r"\s-t\b", text):
            return "threads"
        if re.search(r"\s-n\b", text):
            return "processes"
    raise MmtestsImportError(
        f"cannot tell whether pft in {logs} ran threads or processes (no -t/-n in commands.log): "
        "pass --pft-mode threads or --pft-mode processes"
    )


def _pft(logs: Path, out: ImportedBenchmark, mode: str | None) -> None:
    files = sorted(p for p in logs.iterdir() if re.fullmatch(r"pft-\d+\.log", p.name))
    if not files:
        return
    resolved = _pft_mode(logs, mode)
    for path in sorted(files, key=lambda p: int(re.findall(r"\d+", p.name)[0])):
        out.files.append(path.name)
        clients = int(re.findall(r"\d+", path.name)[0])
        for line in read_text(path).splitlines():
            m = _PFT_ROW.match(line)
            if m:
                out.add(f"faults/sec-{resolved}-{clients}", float(m["wall"]))
                out.add(f"faults/cpu-{resolved}-{clients}", float(m["cpu"]))


def _spawn(logs: Path, out: ImportedBenchmark) -> None:
    # Only one copy (spawn-1-<iteration>.log) is comparable with kperf's
    # single-process spawn with no extra VMAs.
    files = sorted(
        (p for p in logs.iterdir() if re.fullmatch(r"spawn-1-\d+\.log(\.gz|\.xz)?", p.name)),
        key=lambda p: int(p.name.split("-")[2].split(".")[0]),
    )
    for path in files:
        out.files.append(path.name)
        for line in read_text(path).splitlines():
            m = _SPAWN_ROW.match(line)
            if m:
                out.add("spawn-vmas-0", float(m.group(2)))


def read_run(run_dir: Path, pft_mode: str | None = None) -> ImportedRun:
    """Everything kperf understands in one mmtests run directory."""
    if not run_dir.is_dir():
        raise MmtestsImportError(f"{run_dir} is not a directory")
    iters = sorted((d for d in run_dir.iterdir() if re.fullmatch(r"iter-\d+", d.name)), key=lambda d: int(d.name[5:]))
    if not iters:
        raise MmtestsImportError(
            f"{run_dir} is not an mmtests run directory: it has no iter-0/ "
            "(give work/log/<run-name>, the directory run-mmtests.sh wrote)"
        )
    version_file = iters[0] / "kernel.version"
    kernel_version = read_text(version_file).strip() if version_file.exists() else ""
    found: dict[str, ImportedBenchmark] = {}
    for iter_dir in iters:
        for bench_dir, name in BENCHMARK_DIRS.items():
            logs = _logs(iter_dir, bench_dir)
            if logs is None:
                continue
            bench = found.setdefault(name, ImportedBenchmark(name))
            if name == "aim9":
                _aim9(logs, bench)
            elif name == "pagealloc":
                _pagealloc(logs, bench)
            elif name == "pft":
                _pft(logs, bench, pft_mode)
            else:
                _spawn(logs, bench)
    empty = [n for n, b in found.items() if not b.samples]
    if empty:
        raise MmtestsImportError(
            f"{run_dir}: found {', '.join(empty)} but no result lines in its logs; the run may have failed"
        )
    if not found:
        raise MmtestsImportError(
            f"{run_dir} has no results of a benchmark kperf knows (looked for {', '.join(BENCHMARK_DIRS)} "
            "under iter-*/<benchmark>/logs/)"
        )
    return ImportedRun(run_name=run_dir.name, kernel_version=kernel_version, benchmarks=found)
