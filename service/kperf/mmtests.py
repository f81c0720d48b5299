"""Read an mmtests result directory (work/log/<run>) into kperf samples.

Pure Python, no Django: `kperf import-mmtests` reads the directory on the
user's machine and uploads what it found. The layout and line formats are
those of mmtests at commit 74aced35950fe732f0ca559398b5127e8b18c126 (the last
with the pagealloc, pft and unixbench-spawn drivers); see docs/benchmarks.md
for the file each format comes from.

An mmtests run does not reboot between its iterations (iter-0, iter-1, …),
so one run directory is one boot: its iterations are iterations. Import
several runs of the same kernel to give kperf several boots. A run kperf
exported is the exception: the export wrote each boot as an iter-<n>
directory (and says so with its kperf-run.json), so each is a boot again.

Each benchmark reads what mmtests' own extractor reads, so imported samples
are mmtests' samples: pagealloc drops the first two rounds of each batch size
as ExtractPagealloc.pm does (kperf's parser does the same), spawn takes the
RESULT of UnixBench's index row as ExtractUnixbenchcommon.pm does.

A sample's metric name is its series: it carries the experiment's parameters
(spawn's extra VMAs, pft's mode and client count, pagealloc's order and batch,
aim9's test), each read from the logs. Where the logs do not say, the
directory is refused: a guessed parameter would merge two experiments into one
series and nothing downstream could tell.

A run kperf exported also holds `kperf-run.json` (KPERF_RUN_FILE): the clock,
configuration profile, machine shape and kernel the boots were measured
with, which mmtests' files do not say. Without it a run is mmtests' own:
timed with the wall clock, its shape unknown.
"""

from __future__ import annotations

import gzip
import json
import lzma
import re
from dataclasses import dataclass, field
from pathlib import Path

from kperf_runner.backends import CLOCKS
from kperf_runner.benchmarks import pagealloc_readings, without_warmup

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
# What says which experiment an index row belongs to. kperf's spawn prints,
# before each pass's row, "spawn vmas=<extra> iteration=<i> count=... elapsed=..."
# (csrc/spawn.c); the export keeps that line in each spawn-1-<i>.log.
_KPERF_SPAWN = re.compile(r"^spawn vmas=(?P<vmas>\d+) iteration=\d+ ")
# UnixBench's Run prints, before a run's scores and index table (summarizeRun),
# "<n> CPUs in system; running <copies> parallel cop(y|ies) of tests": that is
# UnixBench's own spawn, which holds no VMA beyond the process's own.
_UNIXBENCH_RUN = re.compile(r"^(?:\d+|unknown) CPUs? in system; running (?P<copies>\d+) parallel cop(?:y|ies) of tests")
_SPAWN_LOG = re.compile(r"spawn-(?P<copies>\d+)-(?P<iteration>\d+)\.log(?:\.gz|\.xz)?")
# A pft command as pft-bench logs it ("./pft -m <bytes> -t|-n <clients>", log_cmd
# appends it to commands.log), and as kperf's export writes it.
_PFT_COMMAND = re.compile(r"(?:^|/)pft\s(?:.*\s)?(?P<switch>-t|-n)\s+(?P<clients>\d+)(?:\s|$)")
PFT_SWITCHES = {"-t": "threads", "-n": "processes"}

# What kperf's export writes beside mmtests' files in each run directory
# (kperf.core.results.mmtests_export), and the version of its fields.
KPERF_RUN_FILE = "kperf-run.json"
KPERF_RUN_FORMAT = 1

BENCHMARK_DIRS = {"aim9": "aim9", "pagealloc": "pagealloc", "pft": "pft", "unixbench-spawn": "spawn"}


class MmtestsImportError(ValueError):
    """The directory is not what kperf can import; the message says why."""


@dataclass
class ImportedBenchmark:
    benchmark: str  # kperf's name
    # (boot, metric, iteration, value): a plain mmtests run is one boot (0); a
    # run kperf exported has one boot per iter-<n> directory, boot n.
    readings: list[tuple[int, str, int, float]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    # The boot add() files readings under: the iter-<n> being read.
    boot: int = 0

    def add(self, metric: str, value: float) -> None:
        iteration = sum(1 for b, m, _, _ in self.readings if m == metric and b == self.boot)
        self.readings.append((self.boot, metric, iteration, value))

    @property
    def samples(self) -> list[tuple[str, int, float]]:
        """(metric, iteration, value) of every boot, in the order read."""
        return [(m, i, v) for _, m, i, v in self.readings]


@dataclass(frozen=True)
class RunSetup:
    """Where and how a run's boots were measured: what kperf's export writes
    (kperf.core.results.mmtests_export.Setup) and an import reads back."""

    kernel_sha: str
    arch: str
    machine_class: str
    clock: str
    profile: str
    vcpus: int
    numa_nodes: int


@dataclass(frozen=True)
class KperfRun(RunSetup):
    """What kperf's export says about a run (KPERF_RUN_FILE): how its boots were measured, and the kernel."""

    kernel_version: str


@dataclass
class ImportedRun:
    run_name: str
    kernel_version: str
    benchmarks: dict[str, ImportedBenchmark]
    # Experiments in the directory kperf has no series for (another aim9 test,
    # spawn with several copies): said, not stored under a name that is not theirs.
    left_out: list[str] = field(default_factory=list)
    # None: a plain mmtests run (wall clock, shape unknown).
    kperf: KperfRun | None = None


def read_kperf_run(run_dir: Path) -> KperfRun | None:
    """The run's KPERF_RUN_FILE, checked; None when there is none."""
    path = run_dir / KPERF_RUN_FILE
    if not path.exists():
        return None
    instead = f"fix or delete {path} (without it the run imports as a plain mmtests run, on the wall clock)"
    try:
        data = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise MmtestsImportError(f"{path} is not JSON ({e}): {instead}") from None
    if not isinstance(data, dict):
        raise MmtestsImportError(f"{path} is not a JSON object: {instead}")
    if data.get("format") != KPERF_RUN_FORMAT:
        raise MmtestsImportError(
            f"{path} is format {data.get('format')!r}, this kperf reads format {KPERF_RUN_FORMAT}: "
            "import it with the kperf that exported it, or upgrade"
        )
    if data.get("clock") not in CLOCKS:
        raise MmtestsImportError(f"{path}: unknown clock {data.get('clock')!r} (kperf's are {', '.join(CLOCKS)})")

    def text(key: str) -> str:
        value = data.get(key)
        if not isinstance(value, str) or not value.strip():
            raise MmtestsImportError(f"{path}: {key} must be a non-empty string, not {value!r}: {instead}")
        return value.strip()

    def count(key: str) -> int:
        value = data.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise MmtestsImportError(f"{path}: {key} must be a count (0 or more), not {value!r}: {instead}")
        return value

    version = data.get("kernel_version")
    return KperfRun(
        kernel_sha=text("kernel_sha"),
        arch=text("arch"),
        machine_class=text("machine_class"),
        clock=str(data["clock"]),
        profile=text("profile"),
        vcpus=count("vcpus"),
        numa_nodes=count("numa_nodes"),
        kernel_version=version.strip() if isinstance(version, str) else "",
    )


def _leave_out(left_out: list[str], why: str) -> None:
    if why not in left_out:
        left_out.append(why)


def read_text(path: Path) -> str:
    if path.suffix == ".gz":
        return gzip.decompress(path.read_bytes()).decode(errors="replace")
    if path.suffix == ".xz":
        return lzma.decompress(path.read_bytes()).decode(errors="replace")
    return path.read_text(errors="replace")


def _logs(iter_dir: Path, bench_dir: str) -> Path | None:
    logs = iter_dir / bench_dir / "logs"
    return logs if logs.is_dir() else None


def _aim9(logs: Path, out: ImportedBenchmark, left_out: list[str]) -> None:
    files = sorted(
        (p for p in logs.iterdir() if re.fullmatch(r"aim9-\d+(\.gz|\.xz)?", p.name)),
        key=lambda p: int(re.findall(r"\d+", p.name)[-1]),
    )
    for path in files:
        out.files.append(path.name)
        for line in read_text(path).splitlines():
            m = _AIM9_ROW.match(line)
            if not m:
                continue
            if m["name"] in AIM9_TESTS:
                out.add(m["name"], float(m["ops"]))
            else:
                _leave_out(left_out, f"aim9 {m['name']}: kperf's aim9 runs {', '.join(AIM9_TESTS)}")


def _pagealloc(logs: Path, out: ImportedBenchmark) -> None:
    path = logs / "pagealloc.log"
    if not path.exists():
        raise MmtestsImportError(f"{logs} has no pagealloc.log")
    out.files.append(path.name)
    rows = [line.strip() for line in read_text(path).splitlines() if _PAGEALLOC_ROW.match(line.strip())]
    readings = [
        (int(m["order"]), int(m["batch"]), float(m["alloc"]), float(m["free"]))
        for m in map(_PAGEALLOC_ROW.match, rows)
        if m
    ]
    totals = logs / "pagealloc-total.log"
    if totals.exists():
        # kperf's export: the module's totals, one line per row, give each row its decimals.
        out.files.append(totals.name)
        lines = [line.strip() for line in read_text(totals).splitlines() if line.strip()]
        if len(lines) != len(rows) or not all(line.startswith("pagealloc-total:") for line in lines):
            raise MmtestsImportError(
                f"{totals} has {len(lines)} lines for the {len(rows)} rows of {path}: "
                "it is one pagealloc-total line per row, nothing else; export the run again, "
                "or delete it to import the rows alone"
            )
        try:
            readings = pagealloc_readings("".join(f"{row}\n{line}\n" for row, line in zip(rows, lines, strict=True)))
        except ValueError as e:
            raise MmtestsImportError(f"{totals}: {e}") from None
    # The first two rounds of each batch size are warm-up, for mmtests and kperf alike.
    for o, b, alloc, free in without_warmup(readings):
        out.add(f"alloc-odr{o}-{b}", alloc)
        out.add(f"free-odr{o}-{b}", free)
        out.add(f"total-odr{o}-{b}", alloc + free)


def _pft_commands(logs: Path) -> dict[int, set[str]] | None:
    """{client count: the modes commands.log ran it in}; None without a commands.log."""
    commands = logs / "commands.log"
    if not commands.exists():
        return None
    modes: dict[int, set[str]] = {}
    for line in read_text(commands).splitlines():
        m = _PFT_COMMAND.search(line.strip())
        if m:
            modes.setdefault(int(m["clients"]), set()).add(PFT_SWITCHES[m["switch"]])
    return modes


def _pft_mode(logs: Path, clients: int, commands: dict[int, set[str]] | None, given: str | None) -> str:
    """The mode pft-<clients>.log ran in: commands.log's, else --pft-mode's; never a default."""
    said = set() if commands is None else commands.get(clients, set())
    if len(said) > 1:
        raise MmtestsImportError(
            f"{logs / 'commands.log'} runs pft with {clients} clients both as threads (-t) and as processes (-n), "
            f"so pft-{clients}.log mixes two experiments; import runs of one mode"
        )
    if said:
        (mode,) = said
        if given and given != mode:
            raise MmtestsImportError(
                f"{logs / 'commands.log'} ran pft with {clients} clients as {mode}, but --pft-mode says {given}"
            )
        return mode
    if given:
        return given
    where = "has no commands.log" if commands is None else f"has no pft -t/-n command for {clients} clients"
    raise MmtestsImportError(
        f"cannot tell whether pft-{clients}.log in {logs} ran threads or processes ({logs} {where}): "
        "pass --pft-mode threads or --pft-mode processes"
    )


def _pft(logs: Path, out: ImportedBenchmark, mode: str | None) -> None:
    files = sorted(p for p in logs.iterdir() if re.fullmatch(r"pft-\d+\.log", p.name))
    if not files:
        return
    commands = _pft_commands(logs)
    for path in sorted(files, key=lambda p: int(re.findall(r"\d+", p.name)[0])):
        out.files.append(path.name)
        clients = int(re.findall(r"\d+", path.name)[0])
        resolved = _pft_mode(logs, clients, commands, mode)
        for line in read_text(path).splitlines():
            m = _PFT_ROW.match(line)
            if m:
                out.add(f"faults/sec-{resolved}-{clients}", float(m["wall"]))
                out.add(f"faults/cpu-{resolved}-{clients}", float(m["cpu"]))


def _spawn_passes(path: Path, copies: int) -> list[tuple[int, float]]:
    """(extra VMAs, RESULT) of every index row in one spawn log.

    A row belongs to the experiment named last before it: kperf's spawn line
    (its extra VMAs) or UnixBench's Run report (no extra VMAs). A row with
    neither is refused: 0 would be a guess, and a wrong one merges series.
    """
    extra: int | None = None
    passes = []
    for lineno, line in enumerate(read_text(path).splitlines(), start=1):
        text = line.strip()
        if m := _KPERF_SPAWN.match(text):
            extra = int(m["vmas"])
        elif m := _UNIXBENCH_RUN.match(text):
            if int(m["copies"]) != copies:
                raise MmtestsImportError(
                    f"{path}: its name is for spawn-{copies}-*.log, "
                    f"but UnixBench's report on line {lineno} ran {m['copies']} parallel copies"
                )
            extra = 0
        elif m := _SPAWN_ROW.match(line):
            if extra is None:
                raise MmtestsImportError(
                    f"{path}: cannot tell how many extra VMAs the spawn pass on line {lineno} held: "
                    "neither kperf's 'spawn vmas=<N>' line nor UnixBench's report "
                    "('... running 1 parallel copy of tests') comes before its index row"
                )
            passes.append((extra, float(m.group(2))))
    return passes


def _spawn(logs: Path, out: ImportedBenchmark, left_out: list[str]) -> None:
    logs_of: dict[int, list[tuple[int, Path]]] = {}
    for p in logs.iterdir():
        if m := _SPAWN_LOG.fullmatch(p.name):
            logs_of.setdefault(int(m["copies"]), []).append((int(m["iteration"]), p))
    for copies in sorted(set(logs_of) - {1}):
        _leave_out(
            left_out, f"unixbench-spawn with {copies} copies (spawn-{copies}-*.log): kperf's spawn is one process"
        )
    # One copy (spawn-1-<iteration>.log) is kperf's spawn: the series is its extra VMAs.
    for _, path in sorted(logs_of.get(1, [])):
        out.files.append(path.name)
        for extra, result in _spawn_passes(path, 1):
            out.add(f"spawn-vmas-{extra}", result)


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
    kperf = read_kperf_run(run_dir)
    version_file = iters[0] / "kernel.version"
    kernel_version = read_text(version_file).strip() if version_file.exists() else ""
    if not kernel_version and kperf is not None:
        kernel_version = kperf.kernel_version
    found: dict[str, ImportedBenchmark] = {}
    left_out: list[str] = []
    for iter_dir in iters:
        for bench_dir, name in BENCHMARK_DIRS.items():
            logs = _logs(iter_dir, bench_dir)
            if logs is None:
                continue
            bench = found.setdefault(name, ImportedBenchmark(name))
            # mmtests does not reboot between its iterations; kperf's export
            # writes each boot as an iteration directory of its own.
            bench.boot = int(iter_dir.name[5:]) if kperf is not None else 0
            if name == "aim9":
                _aim9(logs, bench, left_out)
            elif name == "pagealloc":
                _pagealloc(logs, bench)
            elif name == "pft":
                _pft(logs, bench, pft_mode)
            else:
                _spawn(logs, bench, left_out)
    empty = [n for n, b in found.items() if not b.samples]
    if empty:
        also = f" (left out: {'; '.join(left_out)})" if left_out else ""
        raise MmtestsImportError(
            f"{run_dir}: found {', '.join(empty)} but no result lines in its logs{also}; the run may have failed"
        )
    if not found:
        raise MmtestsImportError(
            f"{run_dir} has no results of a benchmark kperf knows (looked for {', '.join(BENCHMARK_DIRS)} "
            "under iter-*/<benchmark>/logs/)"
        )
    return ImportedRun(
        run_name=run_dir.name, kernel_version=kernel_version, benchmarks=found, left_out=left_out, kperf=kperf
    )
