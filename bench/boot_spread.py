"""The project's boot spread at seeded phases, per architecture, profile, benchmark and metric.

Reads the bench/build_noise.py --seeded records below and writes
service/kperf/stats/boot_spread.json, the table the service uses as a
metric's boot noise where it has learned none from history
(kperf.stats.boot_spread; docs/statistics.md, "Boot noise without
history"). Run it again after adding a record; a test checks the table is
what these records give.

    .venv/bin/python bench/boot_spread.py [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kperf.stats.boot_spread import TABLE, table_of, to_json

RECORDS_DIR = Path(__file__).resolve().parent / "records"
# Per "arch/profile", the seeded records of it, oldest first (a later record's benchmark replaces an earlier's).
RECORDS: dict[str, tuple[str, ...]] = {
    "x86_64/tiny": ("build_noise-seeded-1s-2026-11-28.json", "build_noise-seeded-1s-spawn-aim9-2026-11-28.json"),
    "arm64/tiny": (
        "build_noise-seeded-1s-arm64-2026-11-29.json",
        "build_noise-seeded-1s-arm64-spawn-pft-2026-11-30.json",
    ),
    "x86_64/mm": ("build_noise-padded-seeded-mm-2026-11-30.json",),
}


def table_json() -> str:
    named = {
        key: [(name, json.loads((RECORDS_DIR / name).read_text())) for name in names] for key, names in RECORDS.items()
    }
    return to_json(table_of(named))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the stored table is up to date")
    args = parser.parse_args(argv)
    text = table_json()
    if args.check:
        same = TABLE.exists() and TABLE.read_text() == text
        print(f"{TABLE}: {'up to date' if same else 'out of date: run bench/boot_spread.py'}")
        return 0 if same else 1
    TABLE.write_text(text)
    print(f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
