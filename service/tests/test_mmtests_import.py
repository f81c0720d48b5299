"""Importing mmtests result directories, and comparing them like kperf runs."""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import Any

import pytest

from kperf.core.models import BootRecord, Job, Sample
from kperf.mmtests import MmtestsImportError, read_run
from kperf.stats.abtest import MetricInput
from kperf.stats.summary import summary_rows
from kperf_runner.benchmarks import get_benchmark, resolve_params

from .conftest import Api, kperf_cli
from .mmtests_layout import make_run, unixbench_spawn_log

RUNNER_DATA = Path(__file__).resolve().parents[2] / "runners" / "tests" / "data"

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
    assert len(total) == 13 and all(500 < v < 700 for v in total)  # the first two rounds are warm-up
    # Counted per batch size across orders (ExtractPagealloc.pm lines 41-49): order 1 keeps all 15.
    assert sum(1 for m, _, _ in run.benchmarks["pagealloc"].samples if m == "total-odr1-1") == 15
    pft = {m for m, _, _ in run.benchmarks["pft"].samples}
    assert pft == {"faults/sec-threads-1", "faults/cpu-threads-1", "faults/sec-threads-2", "faults/cpu-threads-2"}
    spawn = run.benchmarks["spawn"].samples
    # One copy only, the index row's RESULT, not Run's score line above it.
    assert [m for m, _, _ in spawn] == ["spawn-vmas-0"] * 3
    assert all(3800 < v < 4200 for _, _, v in spawn)


def test_a_real_unixbench_spawn_directory_imports(tmp_path: Path) -> None:
    """Run's whole output, as mmtests' unixbench shellpack tees it, compressed or not."""
    logs = tmp_path / "run" / "iter-0" / "unixbench-spawn" / "logs"
    logs.mkdir(parents=True)
    (logs / "workloads").write_text("spawn\n")
    (logs / "spawn-1-1.log").write_text(unixbench_spawn_log(12341.46, 1))
    (logs / "spawn-1-2.log.gz").write_bytes(gzip.compress(unixbench_spawn_log(12005.04, 1).encode()))
    (logs / "spawn-4-1.log").write_text(unixbench_spawn_log(45000.0, 4))
    run = read_run(tmp_path / "run")
    assert run.benchmarks["spawn"].samples == [("spawn-vmas-0", 0, 12341.5), ("spawn-vmas-0", 1, 12005.0)]
    assert run.benchmarks["spawn"].files == ["spawn-1-1.log", "spawn-1-2.log.gz"]


@pytest.mark.parametrize(
    ("bench", "raw", "overrides"),
    [
        ("aim9", "aim9-quick-qemu-x86_64.txt", {"iterations": 3}),
        ("pagealloc", "pagealloc-quick-qemu-x86_64.txt", {}),
        ("pft", "pft-native-threads-x86_64.txt", {"size_mb": 32, "clients": [1, 2, 4]}),
        ("spawn", "spawn-native-x86_64.txt", {"duration": 0.2}),
    ],
)
def test_kperfs_raw_output_as_mmtests_files_imports_as_kperfs_samples(
    tmp_path: Path, bench: str, raw: str, overrides: dict[str, Any]
) -> None:
    """The runner's mmtests mapping and this importer agree with the runner's parser."""
    benchmark = get_benchmark(bench)
    params = resolve_params(bench, "quick", overrides)
    text = (RUNNER_DATA / raw).read_text()
    expected: dict[str, list[float]] = {}
    for sample in benchmark.parse(text, params):
        expected.setdefault(sample.metric, []).append(sample.value)
    imported: dict[str, list[float]] = {}
    for run_name, files in benchmark.mmtests_runs(text, params).items():
        logs = tmp_path / run_name / "iter-0" / benchmark.mmtests_name / "logs"
        logs.mkdir(parents=True)
        for name, content in files.items():
            (logs / name).write_text(content)
        run = read_run(tmp_path / run_name)
        # mmtests has no extra VMAs: each spawn-vmas-<n> run imports as spawn-vmas-0.
        vmas = run_name.removeprefix("spawn-vmas-")
        for metric, _, value in run.benchmarks[bench].samples:
            imported.setdefault(metric.replace("spawn-vmas-0", f"spawn-vmas-{vmas}"), []).append(value)
    assert imported.keys() == expected.keys()
    for metric, values in expected.items():
        # UnixBench's row has one decimal of spawn's forks/s; everything else is as printed.
        assert imported[metric] == pytest.approx(values, abs=0.051 if bench == "spawn" else 0)


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
def test_imported_runs_compare_and_find_a_page_test_regression(
    alice_api: Api, staff_api: Api, qemu_class: Any, tmp_path: Path
) -> None:
    # An admin imports the lab's runs; every user compares with them.
    for i in range(3):
        assert (
            staff_api.post(
                "/imports/mmtests", payload(make_run(tmp_path / f"b{i}", f"base-{i}", seed=i), BASE)
            ).status_code
            == 201
        )
        slow = make_run(tmp_path / f"h{i}", f"head-{i}", seed=10 + i, page_test_scale=0.75)
        resp = staff_api.post("/imports/mmtests", payload(slow, HEAD))
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
    staff_api: Api, qemu_class: Any, tmp_path: Path, change: dict[str, Any], says: str
) -> None:
    body = payload(make_run(tmp_path, "r", seed=3), BASE)
    body.update(change)
    resp = staff_api.post("/imports/mmtests", body)
    assert resp.status_code == 400 and says in resp.json()["detail"]
    assert not Job.objects.exists() and not BootRecord.objects.exists() and not Sample.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_cli_imports_a_run_and_compares_kernels(
    live_server: Any, alice_api: Api, staff_api: Api, qemu_class: Any, tmp_path: Path
) -> None:
    cli = kperf_cli(live_server.url, alice_api, tmp_path / "c.json")
    admin_cli = kperf_cli(live_server.url, staff_api, tmp_path / "admin.json")
    mine = make_run(tmp_path / "mine", "mine", seed=19)
    refused = cli("import-mmtests", str(mine), "--kernel-sha", BASE, "--machine-class", "qemu-x86_64")
    assert refused.returncode != 0 and "403" in refused.stderr and "an admin imports" in refused.stderr
    page_test: dict[str, list[list[float]]] = {BASE: [], HEAD: []}
    for i, (sha, scale) in enumerate([(BASE, 1.0), (BASE, 1.0), (HEAD, 0.7), (HEAD, 0.7)]):
        run = make_run(tmp_path / str(i), f"run-{i}", seed=20 + i, page_test_scale=scale)
        out = admin_cli("import-mmtests", str(run), "--kernel-sha", sha, "--machine-class", "qemu-x86_64")
        assert out.returncode == 0, out.stderr
        assert "aim9 (48 samples)" in out.stdout
        page_test[sha].append([v for m, _, v in read_run(run).benchmarks["aim9"].samples if m == "page_test"])
    out = cli("compare-kernels", "--base", BASE, "--head", HEAD, "--machine-class", "qemu-x86_64", "--bench", "aim9")
    assert out.returncode == 0, out.stderr
    # compare-mmtests.pl's eight rows per metric, kperf's verdict beside the mean row...
    lines = [line for line in out.stdout.splitlines() if line.split()[1:2] == ["page_test"]]
    labels = ["Min", "Hmean", "HStddev", "HCoeffVar", "Max", "BHmean-50", "BHmean-95", "BHmean-99"]
    assert [line.split()[0] for line in lines] == labels
    assert lines[1].endswith("%*  regression")
    assert all(line.endswith("%)") for line in lines if not line.startswith("Hmean"))
    # ...of the pooled iterations of the imported runs...
    expected = summary_rows(MetricInput(page_test[BASE], page_test[HEAD], True))
    for line, want in zip(lines, expected):
        base, base_pct, head, head_pct = re.findall(r"-?\d+\.\d+", line)
        assert (base, base_pct, head, head_pct) == (
            f"{want.base:.2f}",
            "0.00",
            f"{want.head:.2f}",
            f"{want.change_pct:.2f}",
        )
    # ...and what each verdict rests on, below.
    assert "page_test: regression -" in out.stdout and "boots 2/2, iterations 24/24" in out.stdout
    # mmtests times with the wall clock: its history is the wall clock's, not the class's own clock.
    noise = cli("noise", "--machine-class", "qemu-x86_64", "--boots", "5", "--iterations", "12", "--clock", "wall")
    assert noise.returncode == 0, noise.stderr
    row = next(line for line in noise.stdout.splitlines() if line.startswith("page_test "))
    assert row.split()[1:3] == ["2", "4"], row  # two kernels, four imported runs (one boot each)
    assert "detectable at 5x12" in noise.stdout
    bad = admin_cli("import-mmtests", str(tmp_path), "--kernel-sha", BASE, "--machine-class", "qemu-x86_64")
    assert bad.returncode == 2 and "no iter-0" in bad.stderr


@pytest.mark.django_db
def test_noise_is_learned_per_machine_class_and_metric(
    alice_api: Api, staff_api: Api, qemu_class: Any, tmp_path: Path
) -> None:
    for i in range(3):
        staff_api.post("/imports/mmtests", payload(make_run(tmp_path / f"b{i}", f"b-{i}", seed=40 + i), BASE))
        staff_api.post("/imports/mmtests", payload(make_run(tmp_path / f"h{i}", f"h-{i}", seed=50 + i), HEAD))
    # The machine class's own clock (instructions) has no history: imports are wall-clock runs.
    assert alice_api.get("/noise?machine_class=qemu-x86_64&boots=5&iterations=12").json()["metrics"] == []
    report = alice_api.get("/noise?machine_class=qemu-x86_64&boots=5&iterations=12&clock=wall").json()
    assert report["clock"] == "wall"
    page = next(m for m in report["metrics"] if m["metric"] == "page_test")
    assert page["clock"] == "wall"
    assert page["kernels"] == 2 and page["boots"] == 6
    # The runs were made with 1% iteration noise and no boot-level noise.
    assert 0.005 < page["within_boot_sd"] < 0.02
    assert page["between_boot_sd"] < 0.01
    assert 0 < page["min_detectable_pct"] < 5
    assert alice_api.get("/noise?machine_class=qemu-x86_64&boots=1").status_code == 400
