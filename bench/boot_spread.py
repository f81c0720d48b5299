"""The project's boot spread at seeded phases, and its between-build part where it is measured per
metric, per architecture, profile, vCPUs, benchmark and metric.

Reads the bench/build_noise.py --seeded records below and writes
service/kperf/stats/boot_spread.json, the table the service uses as a
metric's boot noise where it has learned none from history
(kperf.stats.boot_spread; docs/statistics.md, "Boot noise without
history"), and from the --perturb fault-path records
service/kperf/stats/build_spread.json, the between-build part per metric on
the shapes where a change elsewhere moves the page allocator
(kperf.stats.build_spread). Run it again after adding a record; a test
checks the tables are what these records give.

    .venv/bin/python bench/boot_spread.py [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kperf.stats import build_spread
from kperf.stats.boot_spread import TABLE, table_of, to_json

RECORDS_DIR = Path(__file__).resolve().parent / "records"
# Two vCPUs on the `mm` profile: K builds of the base with a little more work per page fault, seeded boots.
FAULT_PATH_MM_2VCPUS = "build_noise-fault-path-mm-2vcpus-2026-12-07.json"
# And with padding (code no one runs) for spawn, aim9 and pft, which the fault path would move.
PADDED_MM_2VCPUS = "build_noise-padded-seeded-mm-2vcpus-2026-12-07.json"
# The same shape since the page allocator's module runs alone (kmodload -s, 2026-12-07): K builds
# with more work, or more pauses, per page fault, seeded boots, pagealloc only.
FAULT_PATH_SOLO_MM_2VCPUS = "build_noise-fault-path-solo-mm-2vcpus-2026-12-07.json"
FAULT_PAUSE_SOLO_MM_2VCPUS = "build_noise-fault-pause-solo-mm-2vcpus-2026-12-07.json"
# And with pauses on every page put in the page cache (the initramfs's pages at boot).
CACHE_PAUSE_SOLO_MM_2VCPUS = "build_noise-cache-pause-solo-mm-2vcpus-2026-12-07.json"
# Where kperf changed how it runs a benchmark on a shape: the record from which on its figures
# count (the earlier records of that shape measured what kperf no longer runs).
MEASURED_SINCE: dict[tuple[str, str], str] = {("x86_64/mm/2vcpus", "pagealloc"): FAULT_PATH_SOLO_MM_2VCPUS}
# Per shape (kperf.stats.boot_spread.shape_key), its seeded records, oldest first (a later record's
# benchmark replaces an earlier's).
RECORDS: dict[str, tuple[str, ...]] = {
    "x86_64/tiny": ("build_noise-seeded-1s-2026-11-28.json", "build_noise-seeded-1s-spawn-aim9-2026-11-28.json"),
    "arm64/tiny": (
        "build_noise-seeded-1s-arm64-2026-11-29.json",
        "build_noise-seeded-1s-arm64-spawn-pft-2026-11-30.json",
    ),
    "x86_64/mm": ("build_noise-padded-seeded-mm-2026-11-30.json",),
    "x86_64/mm/2vcpus": (FAULT_PATH_MM_2VCPUS, PADDED_MM_2VCPUS, FAULT_PATH_SOLO_MM_2VCPUS),
}
# The same with a few pauses more per page fault instead of compiler barriers.
FAULT_PAUSE_MM_2VCPUS = "build_noise-fault-pause-mm-2vcpus-2026-12-07.json"
# Per shape with several vCPUs, its records of perturbed builds (the between-build part per metric).
BUILD_RECORDS: dict[str, tuple[str, ...]] = {
    "x86_64/mm/2vcpus": (
        FAULT_PATH_MM_2VCPUS,
        FAULT_PAUSE_MM_2VCPUS,
        PADDED_MM_2VCPUS,
        FAULT_PATH_SOLO_MM_2VCPUS,
        FAULT_PAUSE_SOLO_MM_2VCPUS,
        CACHE_PAUSE_SOLO_MM_2VCPUS,
    )
}


def _named(records: dict[str, tuple[str, ...]]) -> dict[str, list[tuple[str, object]]]:
    """Per shape, its records read, each without the benchmarks a later record of the shape
    measured again after kperf changed how it runs them (MEASURED_SINCE); a record left with none
    is left out."""
    out: dict[str, list[tuple[str, object]]] = {}
    for key, names in records.items():
        out[key] = []
        for i, name in enumerate(names):
            record = json.loads((RECORDS_DIR / name).read_text())
            for (shape, bench), since in MEASURED_SINCE.items():
                if shape == key and since in names[i + 1 :]:
                    record.get("results", {}).pop(bench, None)
            if record.get("results"):  # a record of nothing kperf still runs this way is left out
                out[key].append((name, record))
    return out


def table_json() -> str:
    return to_json(table_of(_named(RECORDS)))


def build_table_json() -> str:
    return to_json(build_spread.table_of(_named(BUILD_RECORDS)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the stored table is up to date")
    args = parser.parse_args(argv)
    tables = ((TABLE, table_json()), (build_spread.TABLE, build_table_json()))
    if args.check:
        stale = [path for path, text in tables if not path.exists() or path.read_text() != text]
        for path, _ in tables:
            print(f"{path}: {'out of date: run bench/boot_spread.py' if path in stale else 'up to date'}")
        return 1 if stale else 0
    for path, text in tables:
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
