"""Importing mmtests result directories, and comparing them like kperf runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kperf.core.models import BootRecord, Job, Sample
from kperf.mmtests import MmtestsImportError, read_run

from .conftest import Api, kperf_cli
from .mmtests_layout import make_run

BASE = "a" * 40
HEAD = "b" * 40


def payload(run: Path, sha: str, mclass: str = "qemu-x86_64") -> dict[str, Any]:
    r = read_run(run)
    return {
        "kernel_sha": sha,
        "machine_class": mclass,
        "run_name": r.run_name,
        "environment": {"kernel_version": r.kernel_version},
        "benchmarks": {
            n: {"samples": [{"metric": m, "iteration": i, "value": v} for m, i, v in b.samples]}
            for n, b in r.benchmarks.items()
        },
    }


def test_it_reads_every_benchmark_in_the_mmtests_layout(tmp_path: Path) -> None:
    run = read_run(make_run(tmp_path, "base-1", seed=1, gz_aim9=True))
    assert run.run_name == "base-1" and "6.1.0-kperf" in run.kernel_version
    aim9 = {m for m, _, _ in run.benchmarks["aim9"].samples}
    assert aim9 == {"page_test", "brk_test", "exec_test", "fork_test"}
    assert sum(1 for m, _, _ in run.benchmarks["aim9"].samples if m == "page_test") == 12
    page = [v for m, _, v in run.benchmarks["aim9"].samples if m == "page_test"]
    assert all(150_000 < v < 230_000 for v in page)  # field 6, ops/sec: 110 loops/s x 1700
    pa = {m for m, _, _ in run.benchmarks["pagealloc"].samples}
    assert {"alloc-odr0-1", "free-odr1-4", "total-odr0-2"} <= pa and len(pa) == 18
    total = [v for m, _, v in run.benchmarks["pagealloc"].samples if m == "total-odr0-1"]
    assert len(total) == 15 and all(500 < v < 700 for v in total)
    pft = {m for m, _, _ in run.benchmarks["pft"].samples}
    assert pft == {"faults/sec-threads-1", "faults/cpu-threads-1", "faults/sec-threads-2", "faults/cpu-threads-2"}
    spawn = run.benchmarks["spawn"].samples
    assert [m for m, _, _ in spawn] == ["spawn-vmas-0"] * 3  # one copy only, the RESULT column
    assert all(3800 < v < 4200 for _, _, v in spawn)


def test_it_says_what_is_wrong_with_a_directory(tmp_path: Path) -> None:
    with pytest.raises(MmtestsImportError, match="not a directory"):
        read_run(tmp_path / "missing")
    with pytest.raises(MmtestsImportError, match="no iter-0"):
        read_run(tmp_path)
    run = make_run(tmp_path, "r", seed=2)
    (run / "iter-0" / "pft" / "logs" / "commands.log").unlink()
    with pytest.raises(MmtestsImportError, match="--pft-mode"):
        read_run(run)
    assert {m for m, _, _ in read_run(run, pft_mode="processes").benchmarks["pft"].samples} >= {
        "faults/sec-processes-2"
    }


@pytest.mark.django_db
def test_imported_runs_compare_and_find_a_page_test_regression(alice_api: Api, qemu_class: Any, tmp_path: Path) -> None:
    for i in range(3):
        assert (
            alice_api.post(
                "/imports/mmtests", payload(make_run(tmp_path / f"b{i}", f"base-{i}", seed=i), BASE)
            ).status_code
            == 201
        )
        slow = make_run(tmp_path / f"h{i}", f"head-{i}", seed=10 + i, page_test_scale=0.75)
        resp = alice_api.post("/imports/mmtests", payload(slow, HEAD))
        assert resp.status_code == 201, resp.content
    resp = alice_api.get(f"/compare?machine_class=qemu-x86_64&benchmark=aim9&base={BASE}&head={HEAD}")
    assert resp.status_code == 200, resp.content
    verdicts = {m["metric"]: m for m in resp.json()["metrics"]}
    assert verdicts["page_test"]["verdict"] == "regression"
    assert -27 < verdicts["page_test"]["change_pct"] < -23
    assert verdicts["page_test"]["base_boots"] == 3 and verdicts["page_test"]["base_samples"] == 36
    assert verdicts["brk_test"]["verdict"] != "regression"
    pa = alice_api.get(f"/compare?machine_class=qemu-x86_64&benchmark=pagealloc&base={BASE}&head={HEAD}").json()
    assert {m["metric"] for m in pa["metrics"]} >= {"total-odr0-1"}
    assert all(m["verdict"] != "regression" for m in pa["metrics"])


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"kernel_sha": "v6.1"}, "40-hex"),
        ({"machine_class": "nope"}, "unknown machine class"),
        ({"benchmarks": {"dhrystone": {"samples": []}}}, "unknown benchmark"),
        (
            {"benchmarks": {"aim9": {"samples": [{"metric": "disk_rr", "iteration": 0, "value": 1.0}]}}},
            "not one of its metric",
        ),
        ({"benchmarks": {"aim9": {"samples": [{"metric": "page_test", "iteration": 0, "value": "NaN"}]}}}, "finite"),
    ],
)
def test_a_bad_import_is_refused_and_stores_nothing(
    alice_api: Api, qemu_class: Any, tmp_path: Path, change: dict[str, Any], says: str
) -> None:
    body = payload(make_run(tmp_path, "r", seed=3), BASE)
    body.update(change)
    resp = alice_api.post("/imports/mmtests", body)
    assert resp.status_code == 400 and says in resp.json()["detail"]
    assert not Job.objects.exists() and not BootRecord.objects.exists() and not Sample.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_cli_imports_a_run_and_compares_kernels(
    live_server: Any, alice_api: Api, qemu_class: Any, tmp_path: Path
) -> None:
    cli = kperf_cli(live_server.url, alice_api, tmp_path / "c.json")
    for i, (sha, scale) in enumerate([(BASE, 1.0), (BASE, 1.0), (HEAD, 0.7), (HEAD, 0.7)]):
        run = make_run(tmp_path / str(i), f"run-{i}", seed=20 + i, page_test_scale=scale)
        out = cli("import-mmtests", str(run), "--kernel-sha", sha, "--machine-class", "qemu-x86_64")
        assert out.returncode == 0, out.stderr
        assert "aim9 (48 samples)" in out.stdout
    out = cli("compare-kernels", "--base", BASE, "--head", HEAD, "--machine-class", "qemu-x86_64", "--bench", "aim9")
    assert out.returncode == 0, out.stderr
    assert "page_test" in out.stdout and "regression" in out.stdout
    noise = cli("noise", "--machine-class", "qemu-x86_64", "--boots", "5", "--iterations", "12")
    assert noise.returncode == 0, noise.stderr
    row = next(line for line in noise.stdout.splitlines() if line.startswith("page_test "))
    assert row.split()[1:3] == ["2", "4"], row  # two kernels, four imported runs (one boot each)
    assert "detectable at 5x12" in noise.stdout
    bad = cli("import-mmtests", str(tmp_path), "--kernel-sha", BASE, "--machine-class", "qemu-x86_64")
    assert bad.returncode == 2 and "no iter-0" in bad.stderr


@pytest.mark.django_db
def test_noise_is_learned_per_machine_class_and_metric(alice_api: Api, qemu_class: Any, tmp_path: Path) -> None:
    for i in range(3):
        alice_api.post("/imports/mmtests", payload(make_run(tmp_path / f"b{i}", f"b-{i}", seed=40 + i), BASE))
        alice_api.post("/imports/mmtests", payload(make_run(tmp_path / f"h{i}", f"h-{i}", seed=50 + i), HEAD))
    report = alice_api.get("/noise?machine_class=qemu-x86_64&boots=5&iterations=12").json()
    page = next(m for m in report["metrics"] if m["metric"] == "page_test")
    assert page["kernels"] == 2 and page["boots"] == 6
    # The runs were made with 1% iteration noise and no boot-level noise.
    assert 0.005 < page["within_boot_sd"] < 0.02
    assert page["between_boot_sd"] < 0.01
    assert 0 < page["min_detectable_pct"] < 5
    assert alice_api.get("/noise?machine_class=qemu-x86_64&boots=1").status_code == 400
