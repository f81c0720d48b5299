"""pagealloc: the page-allocator microbenchmark, a kernel module loaded by csrc/kmodload.c.

The raw output of one boot is kmodload's line, then the module's procfs file:
its `clock:` and `pagealloc-info:` lines, then one result row per round
("order %2u batch %6lu alloc %llu free %llu", the format of mmtests'
stap-scripts/pagealloc-micro.stp). mmtests' pagealloc.log is the result rows
alone: its ExtractPagealloc.pm splits every line of that file into order,
batch, alloc and free and has no way to skip one, so any other line becomes
a batch size of its own and breaks its extract and compare scripts.
`pagealloc_log()` is that mapping; the parser reads the rows through it, so
kperf and mmtests read the same rows.

After each row the module prints its totals ("pagealloc-total: order %d
batch %lu ops %llu alloc %llu free %llu": the round's cycles and the count
the row divides them by, inner x batch). The row rounds down to whole cycles,
half a percent of a figure on the instruction clock; kperf's samples are the
totals divided by ops, with their decimals, and the row is what mmtests
reads. Output of a module from before the totals (stored raw output, the
arm64 capture) has rows alone, and its samples are the rows.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, TypeVar

from kperf_runner.benchmarks.base import Benchmark, Grid, Metric, MmtestsRuns, Operations, Param, Sample

PAGEALLOC_PROC = "/proc/kperf_pagealloc"
_PAGEALLOC_ROW = re.compile(
    r"order\s+(?P<order>\d+)\s+batch\s+(?P<batch>\d+)\s+alloc\s+(?P<alloc>\d+)\s+free\s+(?P<free>\d+)"
)
_PAGEALLOC_TOTAL = re.compile(
    r"pagealloc-total: order (?P<order>\d+) batch (?P<batch>\d+) ops (?P<ops>\d+) "
    r"alloc (?P<alloc>\d+) free (?P<free>\d+)"
)
_PAGEALLOC_CLOCK = re.compile(r"clock: (?P<clock>\S+)")
_KMODLOAD_SOLO = re.compile(r"kmodload: module=\S+ cpu=\d+ solo offlined=(?P<offlined>\S+) params=.*")
_PAGEALLOC_INNER = re.compile(r"pagealloc-info: .*\binner=(?P<inner>\d+)\b.*")
# ExtractPagealloc.pm (lines 41-49) counts the rows of each batch size, whatever
# their order, and keeps a row from the third on: the first two rounds of each
# batch size are warm-up. kperf reports the same rows.
WARMUP_ROUNDS = 2
Round = tuple[int, int, int, int]  # order, batch, alloc, free: a row as printed, whole cycles
Reading = tuple[int, int, float, float]  # order, batch, alloc, free: cycles per block, from the totals
_R = TypeVar("_R", Round, Reading)


def pagealloc_batches(order: int, batch_limit_kb: int) -> list[int]:
    """Batch sizes for an order: doubling from 1 while batch < (limit / 4096) >> order."""
    limit = (batch_limit_kb * 1024 // 4096) >> order
    batches, batch = [], 1
    while batch < limit:
        batches.append(batch)
        batch *= 2
    return batches


def _rows(raw_output: str) -> list[tuple[int, str, re.Match[str]]]:
    """(output line number, row as printed, its match) of every result row; ValueError on a malformed one."""
    rows = []
    for lineno, line in enumerate(raw_output.splitlines(), start=1):
        text = line.strip()
        if not text.startswith("order"):
            continue  # kmodload's line, the module's clock: and pagealloc-info: lines, console noise
        row = _PAGEALLOC_ROW.fullmatch(text)
        if not row:
            raise ValueError(f"pagealloc: malformed result on output line {lineno}: {text!r}")
        rows.append((lineno, text, row))
    return rows


def _totals(raw_output: str) -> list[tuple[float, float] | None]:
    """Per result row, in order: (alloc, free) per block from its pagealloc-total line, or None without one.

    A total line belongs to the row just before it, of the same order and
    batch; ValueError on one that does not, on a malformed one, and on totals
    that do not round down to their row (a cut or mixed-up output).
    """
    totals: list[tuple[float, float] | None] = []
    row: re.Match[str] | None = None
    for lineno, line in enumerate(raw_output.splitlines(), start=1):
        text = line.strip()
        if text.startswith("order"):
            row = _PAGEALLOC_ROW.fullmatch(text)  # _rows() reports a malformed one
            totals.append(None)
            continue
        if not text.startswith("pagealloc-total:"):
            continue
        total = _PAGEALLOC_TOTAL.fullmatch(text)
        if not total:
            raise ValueError(f"pagealloc: malformed total on output line {lineno}: {text!r}")
        if row is None or totals[-1] is not None or (row["order"], row["batch"]) != (total["order"], total["batch"]):
            raise ValueError(
                f"pagealloc: the total on output line {lineno} follows no result row of order "
                f"{total['order']} batch {total['batch']}; the module prints each right after its row"
            )
        ops, alloc, free = int(total["ops"]), int(total["alloc"]), int(total["free"])
        if ops < 1 or (alloc // ops, free // ops) != (int(row["alloc"]), int(row["free"])):
            raise ValueError(
                f"pagealloc: the total on output line {lineno} ({alloc} and {free} cycles over {ops}) "
                f"does not round down to its row (alloc {row['alloc']} free {row['free']})"
            )
        totals[-1] = (alloc / ops, free / ops)
    return totals


def pagealloc_readings(raw_output: str) -> list[Reading]:
    """Every result row as (order, batch, alloc, free) in cycles per block: its totals over its ops.

    Output of a module that printed no totals gives the rows' whole cycles.
    ValueError when only some rows have totals: the output was cut or mixed up.
    """
    rows = [(int(r["order"]), int(r["batch"]), int(r["alloc"]), int(r["free"])) for _, _, r in _rows(raw_output)]
    totals = _totals(raw_output)
    if all(t is None for t in totals):
        return [(o, b, float(a), float(f)) for o, b, a, f in rows]
    missing = [i for i, t in enumerate(totals) if t is None]
    if missing:
        o, b, _, _ = rows[missing[0]]
        raise ValueError(
            f"pagealloc: {len(missing)} result rows have no pagealloc-total line, the first of "
            f"order {o} batch {b}; the module prints one after every row"
        )
    return [(o, b, t[0], t[1]) for (o, b, _, _), t in zip(rows, totals, strict=True) if t is not None]


def pagealloc_total_log(raw_output: str) -> str:
    """The pagealloc-total lines of this raw output, in order: the export's pagealloc-total.log."""
    return "".join(
        f"{line.strip()}\n" for line in raw_output.splitlines() if line.strip().startswith("pagealloc-total:")
    )


def without_warmup(rounds: Iterable[_R]) -> list[_R]:
    """The rounds mmtests keeps: all but the first two of each batch size, counted across orders."""
    per_batch: Counter[int] = Counter()
    kept = []
    for one in rounds:
        per_batch[one[1]] += 1
        if per_batch[one[1]] > WARMUP_ROUNDS:
            kept.append(one)
    return kept


def pagealloc_log(raw_output: str) -> str:
    """mmtests' pagealloc.log for this raw output: the result rows, in order, nothing else."""
    return "".join(f"{text}\n" for _, text, _ in _rows(raw_output))


class Pagealloc(Benchmark):
    name = "pagealloc"
    description = (
        "page-allocator microbenchmark (a kernel module built with each kernel): cycles "
        "to allocate and free a block of 2^order pages, per order and batch size"
    )
    mmtests_name = "pagealloc"
    grids: ClassVar[dict[str, Grid]] = {
        "quick": Grid(
            boots=4,
            params={"orders": [0, 1, 2, 3, 4], "batch_limit_kb": 4096, "outer": 3, "inner": 100},
            description="batches up to 4 MiB, 3 rounds of 100: seconds under QEMU",
        ),
        "full": Grid(
            boots=5,
            params={"orders": [0, 1, 2, 3, 4], "batch_limit_kb": 131072, "outer": 15, "inner": 10000},
            description=(
                "mmtests' pagealloc: orders 0-4, batches up to 128 MiB, 15 rounds of 10000; "
                "the same batches in 3 rounds of 100 on the instruction clock"
            ),
            instruction_params={"outer": 3, "inner": 100},
        ),
    }
    parameters = (
        Param("orders", "int-list", 0, 10, "page orders to measure, in the order they run"),
        Param("batch_limit_kb", "int", 8, 16 * 1024 * 1024, "batch < (batch_limit_kb * 1024 / 4096) >> order"),
        # At least 3: the first two rounds of each batch size are warm-up (as
        # in mmtests), so fewer would leave the first order with no sample.
        Param(
            "outer",
            "int",
            WARMUP_ROUNDS + 1,
            1000,
            "rounds per order and batch; each round is one sample, except the first two "
            "of each batch size (warm-up, dropped as mmtests does)",
        ),
        Param("inner", "int", 1, 1_000_000, "repetitions per round"),
    )
    cpu = 0

    def command(self, params: Mapping[str, Any], bindir: str) -> list[list[str]]:
        params = self.validate(params)
        bindir = bindir.rstrip("/")
        return [
            [
                f"{bindir}/kmodload",
                "-c",
                str(self.cpu),
                # Alone on the machine: every other CPU offline for the run
                # (csrc/kmodload.c; docs/benchmarks.md, "The page allocator
                # on one vCPU and on two").
                "-s",
                "-o",
                PAGEALLOC_PROC,
                f"{bindir}/pagealloc.ko",
                f"orders={','.join(map(str, params['orders']))}",
                f"batch_limit_kb={params['batch_limit_kb']}",
                f"outer={params['outer']}",
                f"inner={params['inner']}",
            ]
        ]

    def _cases(self, params: Mapping[str, Any]) -> list[tuple[int, int]]:
        return [
            (order, batch) for order in params["orders"] for batch in pagealloc_batches(order, params["batch_limit_kb"])
        ]

    def rounds(self, raw_output: str, params: Mapping[str, Any]) -> list[Round]:
        """Every round as (order, batch, alloc, free), in output order, checked against the job's parameters."""
        params = self.validate(params)
        cases = self._cases(params)
        wanted = set(cases)
        outer: int = params["outer"]
        seen: Counter[tuple[int, int]] = Counter()
        out: list[Round] = []
        for lineno, _, row in _rows(raw_output):
            case = (int(row["order"]), int(row["batch"]))
            if case not in wanted:
                raise ValueError(
                    f"pagealloc: output line {lineno} is for order {case[0]} batch {case[1]}, "
                    "which the job's parameters do not ask for"
                )
            if seen[case] >= outer:
                raise ValueError(
                    f"pagealloc: output line {lineno} is round {outer + 1} of order {case[0]} batch {case[1]}"
                )
            seen[case] += 1
            out.append((case[0], case[1], int(row["alloc"]), int(row["free"])))
        missing = [f"order {o} batch {b} ({seen[(o, b)]} of {outer})" for o, b in cases if seen[(o, b)] != outer]
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise ValueError(f"pagealloc: incomplete output for {shown}; the raw output shows where it stopped")
        return out

    def readings(self, raw_output: str, params: Mapping[str, Any]) -> list[Reading]:
        """The rounds of rounds(), in the same order, in cycles per block with their decimals (pagealloc_readings)."""
        self.rounds(raw_output, params)  # the same checks: a complete run or ValueError
        return pagealloc_readings(raw_output)

    def parse(self, raw_output: str, params: Mapping[str, Any]) -> list[Sample]:
        """mmtests' samples with kperf's resolution: every round but the first two of each batch size, numbered from 0.

        The count is per batch size across orders, as in ExtractPagealloc.pm,
        so with the orders run in turn only the first order loses rounds (the
        later ones reuse batch sizes it warmed). The raw output keeps every round.
        A value is the round's total over its ops (readings()): the row mmtests
        reads is that figure rounded down.
        """
        kept: dict[tuple[int, int], list[tuple[float, float]]] = {}
        for order, batch, alloc, free in without_warmup(self.readings(raw_output, params)):
            kept.setdefault((order, batch), []).append((alloc, free))
        samples: list[Sample] = []
        for order, batch in self._cases(self.validate(params)):
            for kind in ("alloc", "free", "total"):
                for iteration, (alloc, free) in enumerate(kept.get((order, batch), [])):
                    value = {"alloc": alloc, "free": free, "total": alloc + free}[kind]
                    samples.append(Sample(f"{kind}-odr{order}-{batch}", iteration, value))
        return samples

    def operations(self, raw_output: str, params: Mapping[str, Any]) -> Operations:
        """Allocations of the one command: inner x (batch + 1) blocks per result row.

        Each round (one row) allocates and frees batch + 1 blocks of 2^order
        pages, inner times (the module's measure()); inner is the one the
        module states on its pagealloc-info line. Warm-up rounds count: they
        ran inside the counted command. No info line, no count.
        """
        rounds = self.rounds(raw_output, params)  # the same checks: a complete run or ValueError
        inner = next((m for m in map(_PAGEALLOC_INNER.fullmatch, map(str.strip, raw_output.splitlines())) if m), None)
        if inner is None:
            return {}
        return {0: {"alloc": sum(int(inner["inner"]) * (batch + 1) for _, batch, _, _ in rounds)}}

    def command_labels(self, params: Mapping[str, Any]) -> list[str]:
        params = self.validate(params)
        return [f"orders={','.join(map(str, params['orders']))} batch_limit_kb={params['batch_limit_kb']}"]

    def mmtests_runs(self, raw_output: str, params: Mapping[str, Any]) -> MmtestsRuns:
        """One mmtests run, pagealloc: pagealloc.log and the per-order files made from it.

        mmtests' pagealloc shellpack (shellpack_src/src/pagealloc/pagealloc-bench)
        appends the procfs file to pagealloc.log, then writes "<batch> <alloc>"
        to alloc-<order> and "<batch> <free>" to free-<order> for every row;
        ExtractPagealloc.pm finds the orders from the alloc-<order> file names.
        With the module's totals, also pagealloc-total.log: its pagealloc-total
        lines, one per row of pagealloc.log, which mmtests does not open (it
        globs alloc-[0-9]*) and kperf's import reads for the decimals.
        """
        rounds = self.rounds(raw_output, params)  # the same checks: a complete run or ValueError
        files = {"pagealloc.log": pagealloc_log(raw_output)}
        if any(_totals(raw_output)):
            pagealloc_readings(raw_output)  # every row has its total, each consistent with it
            files["pagealloc-total.log"] = pagealloc_total_log(raw_output)
        for order, batch, alloc, free in rounds:
            files[f"alloc-{order}"] = files.get(f"alloc-{order}", "") + f"{batch} {alloc}\n"
            files[f"free-{order}"] = files.get(f"free-{order}", "") + f"{batch} {free}\n"
        return {"pagealloc": files}

    def metrics(self, params: Mapping[str, Any]) -> list[Metric]:
        params = self.validate(params)
        return [
            Metric(f"{kind}-odr{order}-{batch}", "cycles", False)
            for order, batch in self._cases(params)
            for kind in ("alloc", "free", "total")
        ]

    def sources(self) -> list[str]:
        return ["kmodload.c"]

    def artifacts(self) -> list[str]:
        return ["pagealloc.ko"]

    def environment(self, raw_output: str) -> dict[str, Any]:
        """The module's cycle counter and, when kmodload ran it alone, the CPUs it took offline ("none" on one CPU)."""
        found: dict[str, Any] = {}
        for line in raw_output.splitlines():
            text = line.strip()
            solo = _KMODLOAD_SOLO.fullmatch(text)
            if solo and "offlined_cpus" not in found:
                found["offlined_cpus"] = solo["offlined"]
            clock = _PAGEALLOC_CLOCK.fullmatch(text)
            if clock and "cycle_clock" not in found:
                found["cycle_clock"] = clock["clock"]
        return found

    def expected_seconds(self, params: Mapping[str, Any]) -> float:
        params = self.validate(params)
        # ~1 us per block allocated and freed under TCG (bare metal: ~0.1 us).
        blocks = sum(batch + 1 for _, batch in self._cases(params)) * params["inner"] * params["outer"]
        return float(1.0 + blocks * 1e-6)
