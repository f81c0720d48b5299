"""The cycle model's C parts (runners/kperf_runner/cycles, docs/cycle-clock.md), without booting a kernel.

The cache model and the x86 classifier are tested by their own C program, built and run here;
the plugin is built, checked to export what QEMU looks up, and loaded into a QEMU with no guest.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

CYCLES = Path(__file__).resolve().parent.parent / "kperf_runner" / "cycles"
C_TESTS = (
    "lru_evicts_the_least_recently_used",
    "a_set_holds_as_many_lines_as_it_has_ways",
    "a_write_invalidates_other_copies",
    "a_line_bounces_between_two_writers",
    "an_llc_eviction_takes_the_line_from_every_cpu",
    "fetches_use_the_l1i_and_share_the_l2",
    "bad_geometry_is_refused",
    "x86_instructions_are_classified",
)


def _make(target: str, out: Path) -> subprocess.CompletedProcess[str]:
    if shutil.which("gcc") is None or shutil.which("make") is None:
        pytest.skip("needs gcc and make (apt-get install gcc make)")
    return subprocess.run(
        ["make", "-s", "-C", str(CYCLES), f"OUT={out}", target], capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cycles")
    built = _make("plugin", out)
    assert built.returncode == 0, built.stderr
    return out / "kperf_cycles.so"


def test_the_cache_model_and_the_classifier_pass_their_c_tests(tmp_path: Path) -> None:
    run = _make("test", tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.split() == [word for name in C_TESTS for word in ("ok", name)]


def test_the_plugin_exports_only_what_qemu_looks_up(plugin: Path) -> None:
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(plugin)], capture_output=True, text=True, check=True)
    exported = {line.split()[-1] for line in symbols.stdout.splitlines() if line.split()[1] in "TDB"}
    assert exported == {"qemu_plugin_install", "qemu_plugin_version"}


def _qemu_with(plugin_arg: str) -> subprocess.CompletedProcess[str]:
    """A QEMU with no machine and no guest, told to quit at once: enough to load and unload a plugin."""
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("needs qemu-system-x86 (apt-get install qemu-system-x86)")
    argv = ["qemu-system-x86_64", "-machine", "none", "-display", "none", "-serial", "none", "-monitor", "stdio"]
    return subprocess.run([*argv, "-plugin", plugin_arg], input="quit\n", capture_output=True, text=True, timeout=60)


def test_qemu_loads_the_plugin_and_it_reports_at_exit(plugin: Path, tmp_path: Path) -> None:
    report = tmp_path / "cycles.json"
    run = _qemu_with(f"{plugin},out={report}")
    assert run.returncode == 0, run.stderr
    written = json.loads(report.read_text())
    assert written["model"] == "golden-cove-v1"
    assert written["vcpus"] == 0 and written["per_vcpu"] == []  # no machine: nothing ran
    assert set(written["total"]["classes"]) >= {"plain", "locked", "cli", "sti", "popf", "mfence", "cpuid", "div64"}


def test_an_unknown_plugin_argument_is_refused_with_what_it_takes(plugin: Path) -> None:
    run = _qemu_with(f"{plugin},cycles=1")
    assert run.returncode != 0
    assert "kperf_cycles: unknown argument cycles=1; the one it takes is out=PATH" in run.stderr


def test_the_plugin_charges_classes_and_coherence_as_documented(tmp_path: Path) -> None:
    """plugin_harness.c plays QEMU: one block (lock add to a shared line X; cli; a store to a line of
    the vCPU's own; mfence; div %rcx), three times on vCPU 0 and 1 in turn, under golden-cove-v1."""
    built = _make("harness", tmp_path)
    assert built.returncode == 0, built.stderr
    report = tmp_path / "cycles.json"
    subprocess.run([str(tmp_path / "plugin_harness"), str(report)], check=True, timeout=60)
    written = json.loads(report.read_text())
    first, second = written["per_vcpu"]
    base = 3 * (19 + 3 + 1 + 33 + 18)  # locked, cli, plain, mfence, div64: three times each
    # vCPU 0 comes first to everything: the block's line, X and its own line from memory (345 each);
    # in rounds 2 and 3 X comes back from vCPU 1, which wrote it last (a transfer, 100).
    assert (first["base_cycles"], first["stall_cycles"], first["transfers"]) == (base, 3 * 345 + 2 * 100, 2)
    # vCPU 1: the block's line and X from vCPU 0 (100 each), its own line from memory, then X twice more.
    assert (second["base_cycles"], second["stall_cycles"], second["transfers"]) == (base, 2 * 100 + 345 + 2 * 100, 4)
    assert (first["invalidations"], second["invalidations"]) == (3, 2)  # X taken by the other's write
    for vcpu in (first, second):
        assert vcpu["instructions"] == 15 and vcpu["cycles"] == vcpu["base_cycles"] + vcpu["stall_cycles"]
        assert {k: v for k, v in vcpu["classes"].items() if v} == {
            "plain": 3, "locked": 3, "cli": 3, "mfence": 3, "div64": 3}  # fmt: skip
    assert written["total"]["cycles"] == first["cycles"] + second["cycles"]
