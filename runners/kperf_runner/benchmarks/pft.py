"""pft: the page fault test, threads or processes faulting in one region (csrc/pft.c)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from kperf_runner.benchmarks.base import Benchmark, Grid, Metric, MmtestsRuns, Operations, Param, Sample

PFT_MODES = ("threads", "processes")
# mmtests' line: " %3ld %4ld %3ld %8.2fs %8.2fs %8.2fs  %10.3f %10.3f"
_PFT_ROW = re.compile(
    r"\s*(?P<gb>\d+)\s+(?P<clients>\d+)\s+(?P<cline>\d+)\s+(?P<user>\d+\.\d+)s\s+"
    r"(?P<system>\d+\.\d+)s\s+(?P<wall>\d+\.\d+)s\s+(?P<per_cpu>\d+\.\d+)\s+(?P<per_wall>\d+\.\d+)"
)
_PFT_INFO = re.compile(r"pft-info: mode=(?P<mode>\w+) clients=(?P<clients>\d+) .*")
_PFT_BYTES = re.compile(r".* bytes=(?P<bytes>\d+) .*")
_PFT_PAGES = re.compile(r".* pages=(?P<pages>\d+) .*")
_PFT_SKIP = re.compile(r"pft-skip: mode=(?P<mode>\w+) clients=(?P<clients>\d+) .*")


class Pft(Benchmark):
    name = "pft"
    description = (
        "page fault test: N workers (threads sharing one mm and one VMA, or processes) "
        "fault in equal slices of one anonymous region, base pages; faults per wall "
        "second and per CPU second"
    )
    mmtests_name = "pft"
    grids: ClassVar[dict[str, Grid]] = {
        "quick": Grid(
            boots=4,
            # One worker: an instruction-clock job boots one vCPU unless it
            # asks for more (docs/runners.md); the scaling grids draw counts.
            params={"size_mb": 64, "clients": [1], "iterations": 3, "mode": "threads"},
            description="64 MiB (fits a 512 MiB QEMU guest), one thread",
        ),
        # Thread scaling drawn as the per-VMA-lock discussion draws it: the
        # same region faulted by 1, 2, 3 and 4 threads of one mm (one VMA, one
        # mmap_lock), beside processes (one mm each). A job with fewer vCPUs
        # skips the counts above them (pft.c). Under the instruction clock
        # the vCPUs share one clock: faults/sec is then faults per 10^9
        # instructions of all CPUs together, and faults/cpu is divided by
        # the worker count besides (docs/runners.md).
        "scaling": Grid(
            boots=4,
            params={"size_mb": 64, "clients": [1, 2, 3, 4], "iterations": 3, "mode": "threads"},
            description=(
                "64 MiB, 1-4 threads of one process (one mm, one VMA); counts above the "
                "guest's vCPUs are skipped: boot 4 vCPUs for the whole curve"
            ),
        ),
        "scaling-processes": Grid(
            boots=4,
            params={"size_mb": 64, "clients": [1, 2, 3, 4], "iterations": 3, "mode": "processes"},
            description="as scaling, with 1-4 processes (one mm each, no shared mm)",
        ),
        # What memcg reclaim and swap-out add to a fault: the region is twice
        # the cgroup's limit, so past the first half every fault first
        # reclaims a page of the region to zram swap (pft.c's -c). Needs a
        # kernel with memcg and zram (the mm and distro profiles); the tiny
        # profile is refused at submission.
        "memcg-swap": Grid(
            boots=4,
            params={"size_mb": 64, "clients": [1], "iterations": 3, "mode": "threads", "memcg_mb": 32},
            description=(
                "64 MiB faulted by one thread inside a memory cgroup limited to 32 MiB: half the "
                "faults reclaim a page to zram swap first (mm and distro profiles)"
            ),
            needs=("memcg", "swap"),
        ),
        "full": Grid(
            boots=5,
            params={"size_mb": 0, "clients": list(range(1, 65)), "iterations": 30, "mode": "threads"},
            description=(
                "mmtests' defaults: MemTotal/5, clients 1..NUMCPUS (counts above the "
                "machine's CPUs are skipped; up to 64), 30 iterations, threads"
            ),
        ),
        "full-processes": Grid(
            boots=5,
            params={"size_mb": 0, "clients": list(range(1, 65)), "iterations": 30, "mode": "processes"},
            description="as full, with processes instead of threads (one mm each)",
        ),
    }
    parameters = (
        Param("size_mb", "int", 0, 16 * 1024 * 1024, "MiB of the region (0: MemTotal/5, as mmtests)"),
        Param(
            "clients",
            "int-list",
            1,
            4096,
            "worker counts, one run each; counts above the machine's CPUs are skipped",
        ),
        Param("iterations", "int", 1, 1000, "iterations per client count and boot"),
        Param(
            "memcg_mb",
            "int",
            0,
            16 * 1024 * 1024,
            "MiB a memory cgroup around the workers allows (0: none); below size_mb the faults reclaim to swap",
            default=0,
        ),
        Param(
            "mode",
            "choice",
            0,
            0,
            "threads (one process: one mm, one VMA) or processes (one mm each)",
            choices=PFT_MODES,
        ),
    )

    def command(self, params: Mapping[str, Any], bindir: str) -> list[list[str]]:
        params = self.validate(params)
        binary = f"{bindir.rstrip('/')}/pft"
        memcg = ["-c", str(params["memcg_mb"])] if params["memcg_mb"] else []
        return [
            [
                binary,
                *memcg,
                "-m",
                str(params["size_mb"]),
                "-n",
                str(clients),
                "-i",
                str(params["iterations"]),
                "-M",
                params["mode"],
            ]
            for clients in params["clients"]
        ]

    @staticmethod
    def metric_names(mode: str, clients: int, memcg_mb: int = 0) -> tuple[str, str]:
        """(faults per wall second, faults per CPU second) for a mode and client count.

        Runs inside a limited memcg are named for it: their faults include
        reclaim and swap-out and are never read as plain faults.
        """
        suffix = f"-memcg{memcg_mb}m" if memcg_mb else ""
        return f"faults/sec-{mode}-{clients}{suffix}", f"faults/cpu-{mode}-{clients}{suffix}"

    def parse(self, raw_output: str, params: Mapping[str, Any]) -> list[Sample]:
        params = self.validate(params)
        mode: str = params["mode"]
        wanted: list[int] = params["clients"]
        iterations: int = params["iterations"]
        rows: dict[int, list[tuple[float, float]]] = {}
        skipped: set[int] = set()
        current: int | None = None
        for lineno, line in enumerate(raw_output.splitlines(), start=1):
            text = line.strip()
            if text.startswith(("pft-info:", "pft-skip:")):
                match = (_PFT_INFO if text.startswith("pft-info:") else _PFT_SKIP).fullmatch(text)
                if not match:
                    raise ValueError(f"pft: malformed line {lineno}: {text!r}")
                clients = int(match["clients"])
                if match["mode"] != mode:
                    raise ValueError(f"pft: output line {lineno} is for mode {match['mode']}, the job asked for {mode}")
                if clients not in wanted:
                    raise ValueError(
                        f"pft: output line {lineno} is for clients={clients}, the job asked for clients {wanted}"
                    )
                if clients in rows or clients in skipped:
                    raise ValueError(f"pft: output line {lineno} repeats clients={clients}")
                if text.startswith("pft-skip:"):
                    skipped.add(clients)
                    current = None
                else:
                    rows[clients] = []
                    current = clients
                continue
            if not text or not text[0].isdigit():
                continue  # the heading, console noise
            row = _PFT_ROW.fullmatch(text)
            if not row:
                raise ValueError(f"pft: malformed result row on output line {lineno}: {text!r}")
            if current is None:
                raise ValueError(f"pft: result row on output line {lineno} comes before any pft-info line")
            if int(row["clients"]) != current:
                raise ValueError(f"pft: output line {lineno} reports {row['clients']} clients in the run of {current}")
            if len(rows[current]) >= iterations:
                raise ValueError(
                    f"pft: output line {lineno} is iteration {iterations + 1} of a {iterations}-iteration run"
                )
            wall_rate, cpu_rate = float(row["per_wall"]), float(row["per_cpu"])
            if wall_rate <= 0 or cpu_rate <= 0:
                raise ValueError(f"pft: output line {lineno} has no fault rate: {text!r}")
            rows[current].append((wall_rate, cpu_rate))
        missing = [
            f"clients={clients} ({len(rows.get(clients, []))} of {iterations} iterations)"
            for clients in wanted
            if clients not in skipped and len(rows.get(clients, [])) != iterations
        ]
        if missing:
            raise ValueError(f"pft: incomplete output for {', '.join(missing)}; the raw output shows where it stopped")
        samples: list[Sample] = []
        for clients in wanted:
            per_sec, per_cpu = self.metric_names(mode, clients, params["memcg_mb"])
            for iteration, (wall_rate, cpu_rate) in enumerate(rows.get(clients, [])):
                samples.append(Sample(per_sec, iteration, wall_rate))
                samples.append(Sample(per_cpu, iteration, cpu_rate))
        if not samples:
            raise ValueError(f"pft: every client count was skipped ({sorted(skipped)}): the machine has fewer CPUs")
        return samples

    def metrics(self, params: Mapping[str, Any]) -> list[Metric]:
        params = self.validate(params)
        out: list[Metric] = []
        for clients in params["clients"]:
            per_sec, per_cpu = self.metric_names(params["mode"], clients, params["memcg_mb"])
            out += [Metric(per_sec, "faults/s", True), Metric(per_cpu, "faults/cpu-s", True)]
        return out

    def operations(self, raw_output: str, params: Mapping[str, Any]) -> Operations:
        """Faults per command (one per client count): pft-info's pages= times its result rows.

        Every iteration faults in each page of the region once (pft.c's rates
        are pages / seconds). A skipped client count faulted nothing and an
        info line without pages= states no count: both are left out.
        """
        params = self.validate(params)
        self.parse(raw_output, params)  # the same checks: a complete run or ValueError
        pages: dict[int, int] = {}
        rows: dict[int, int] = {}
        current: int | None = None
        for line in raw_output.splitlines():
            text = line.strip()
            info = _PFT_INFO.fullmatch(text)
            if info:
                current = int(info["clients"])
                size = _PFT_PAGES.fullmatch(text)
                if size:
                    pages[current] = int(size["pages"])
            elif text.startswith("pft-skip:"):
                current = None
            elif current is not None and _PFT_ROW.fullmatch(text):
                rows[current] = rows.get(current, 0) + 1
        return {
            n: {"fault": pages[clients] * rows[clients]}
            for n, clients in enumerate(params["clients"])
            if clients in pages and rows.get(clients)
        }

    def command_labels(self, params: Mapping[str, Any]) -> list[str]:
        params = self.validate(params)
        return [f"{params['mode']} clients={clients}" for clients in params["clients"]]

    def mmtests_runs(self, raw_output: str, params: Mapping[str, Any]) -> MmtestsRuns:
        """One mmtests run, pft, with one file per client count.

        mmtests' pft shellpack (shellpack_src/src/pft/pft-bench) appends
        every iteration of `./pft -m <bytes> -t|-n <clients>` to
        pft-<clients>.log and logs the command to commands.log (-t threads,
        -n processes); ExtractPft.pm reads pft-<clients>.log. Each file here
        holds the non-blank lines after the client count's pft-info line
        (pft's heading and rows); skipped client counts have none.
        """
        params = self.validate(params)
        self.parse(raw_output, params)  # the same checks: a complete run or ValueError
        switch = "-t" if params["mode"] == "threads" else "-n"
        files: dict[str, list[str]] = {}
        commands: list[str] = []
        current: list[str] | None = None
        for line in raw_output.splitlines():
            text = line.strip()
            info = _PFT_INFO.fullmatch(text)
            if info:
                size = _PFT_BYTES.fullmatch(text)
                commands.append(f"./pft -m {size['bytes'] if size else 0} {switch} {info['clients']}")
                current = files.setdefault(f"pft-{info['clients']}.log", [])
            elif text.startswith("pft-skip:"):
                current = None
            elif current is not None and text:
                current.append(line)
        logs = {name: "\n".join(lines) + "\n" for name, lines in files.items()}
        return {"pft": {**logs, "commands.log": "\n".join(commands) + "\n"}}

    def sources(self) -> list[str]:
        return ["pft.c"]

    def expected_seconds(self, params: Mapping[str, Any]) -> float:
        params = self.validate(params)
        # ~20 us per fault under TCG, the slowest place kperf runs it; with
        # size_mb=0 assume a 512 MiB guest (bare metal is far faster per fault).
        size = params["size_mb"] or 512 // 5
        faults = size * 256
        return float(len(params["clients"]) * params["iterations"] * (0.5 + faults * 20e-6))
