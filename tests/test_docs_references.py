"""Every docs page the code names exists: a docstring that sends a reader to a missing page
(seven pointed to a summaries page in docs/ that never existed; the
name is not spelt out here, or this file would name it too) is a dead end.
And every source file the docs name exists: the tests moved into folders like the code's,
and a page naming the old path would send its reader nowhere."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = re.compile(r"\bdocs/([A-Za-z0-9_.-]+\.md)\b")
# A path from the repository's root: docs/ and the README write them so (a package's own README
# names its files from the package, and `…/` elides a prefix on purpose).
SOURCE = re.compile(r"(?<![\w./…-])((?:service|runners|kernel-builds|dashboards|testing|tests|bench)/[\w./*-]+\.py)\b")


def test_every_docs_page_the_code_names_exists() -> None:
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    named: dict[str, list[str]] = {}
    for name in listed.stdout.split():
        for found in REFERENCE.finditer((ROOT / name).read_text()):
            named.setdefault(found[1], []).append(name)
    assert len(named) > 10, f"only {sorted(named)} found: the pattern no longer matches how the code names pages"
    missing = {page: sorted(set(files)) for page, files in named.items() if not (ROOT / "docs" / page).is_file()}
    assert not missing, missing


def test_every_source_file_the_docs_name_exists() -> None:
    listed = subprocess.run(
        ["git", "ls-files", "docs/*.md", "README.md"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    named: dict[str, list[str]] = {}
    for name in listed.stdout.split():
        for found in SOURCE.finditer((ROOT / name).read_text()):
            named.setdefault(found[1], []).append(name)
    assert len(named) > 50, f"only {sorted(named)} found: the pattern no longer matches how the docs name files"
    missing = {path: sorted(set(pages)) for path, pages in named.items() if not any(ROOT.glob(path))}
    assert not missing, missing
