"""Importing mmtests result directories, and comparing them like kperf runs."""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import Any

import pytest

from kperf.cli.client import CliError
from kperf.cli.mmtests import import_target
from kperf.core.models import BootRecord, Job, Sample
from kperf.core.results import mmtests_import
from kperf.mmtests import MmtestsImportError, read_run
from kperf.stats.abtest import MetricInput
from kperf.stats.summary import summary_rows
from kperf_runner.benchmarks import get_benchmark, resolve_params

from tests.conftest import Api, kperf_cli
from tests.mmtests_layout import kperf_spawn_output, make_run, unixbench_spawn_log

RUNNER_DATA = Path(__file__).resolve().parents[4] / "runners" / "tests" / "data"

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
    assert run.left_out == ["unixbench-spawn with 4 copies (spawn-4-*.log): kperf's spawn is one process"]


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


# kperf's raw output of every benchmark, both pft modes and spawn at five extra-VMA
# counts: (benchmark, raw output, grid overrides). No metric is in two of them, so
# an import that merged two experiments into one series shows as a wrong name.
RAW_RUNS: list[tuple[str, str, dict[str, Any]]] = [
    ("aim9", (RUNNER_DATA / "aim9-quick-qemu-x86_64.txt").read_text(), {"iterations": 3}),
    ("pagealloc", (RUNNER_DATA / "pagealloc-quick-qemu-x86_64.txt").read_text(), {}),
    ("pft", (RUNNER_DATA / "pft-native-threads-x86_64.txt").read_text(), {"size_mb": 32, "clients": [1, 2, 4]}),
    (
        "pft",
        (RUNNER_DATA / "pft-native-processes-x86_64.txt").read_text(),
        {"size_mb": 32, "clients": [1, 2], "mode": "processes"},
    ),
    ("spawn", (RUNNER_DATA / "spawn-native-x86_64.txt").read_text(), {"duration": 0.2}),
    ("spawn", kperf_spawn_output([1, 100, 6400], 3, seed=7), {"duration": 0.2, "extra_vmas": [1, 100, 6400]}),
]
RAW_IDS = ["aim9", "pagealloc", "pft-threads", "pft-processes", "spawn-0-1000", "spawn-1-100-6400"]


def kperfs_samples(bench: str, raw: str, overrides: dict[str, Any]) -> dict[tuple[str, int], float]:
    params = resolve_params(bench, "quick", overrides)
    return {(s.metric, s.iteration): s.value for s in get_benchmark(bench).parse(raw, params)}


def export(root: Path, bench: str, raw: str, overrides: dict[str, Any]) -> list[Path]:
    """kperf's raw output as the mmtests run directories the export writes (one boot: iter-0)."""
    benchmark = get_benchmark(bench)
    runs = benchmark.mmtests_runs(raw, resolve_params(bench, "quick", overrides))
    for run_name, files in runs.items():
        logs = root / run_name / "iter-0" / benchmark.mmtests_name / "logs"
        logs.mkdir(parents=True)
        for name, content in files.items():
            (logs / name).write_text(content)
    return [root / run_name for run_name in runs]


def assert_same_samples(got: dict[tuple[str, int], float], want: dict[tuple[str, int], float], bench: str) -> None:
    # Names and iterations exactly: each experiment its own series.
    assert sorted(got) == sorted(want)
    for key, value in want.items():
        # UnixBench's row has one decimal of spawn's forks/s; everything else is as printed.
        assert got[key] == pytest.approx(value, abs=0.051 if bench == "spawn" else 0), key


@pytest.mark.parametrize(("bench", "raw", "overrides"), RAW_RUNS, ids=RAW_IDS)
def test_kperfs_raw_output_as_mmtests_files_imports_as_kperfs_samples(
    tmp_path: Path, bench: str, raw: str, overrides: dict[str, Any]
) -> None:
    """The runner's mmtests mapping and this importer agree with the runner's parser, names and values."""
    imported: dict[tuple[str, int], float] = {}
    for run_dir in export(tmp_path, bench, raw, overrides):
        run = read_run(run_dir)
        assert list(run.benchmarks) == [bench] and run.left_out == []
        for metric, iteration, value in run.benchmarks[bench].samples:
            assert (metric, iteration) not in imported, f"{run_dir.name} repeats {metric} {iteration}"
            imported[(metric, iteration)] = value
    assert_same_samples(imported, kperfs_samples(bench, raw, overrides), bench)


@pytest.mark.django_db
def test_every_export_imported_for_one_kernel_keeps_each_experiment_in_its_series(
    staff_api: Api, qemu_class: Any, tmp_path: Path
) -> None:
    """Stored, not only read: one kernel holds every experiment, each under its own metric."""
    want: dict[tuple[str, int], float] = {}
    for n, (bench, raw, overrides) in enumerate(RAW_RUNS):
        samples = kperfs_samples(bench, raw, overrides)
        assert not set(samples) & set(want)  # so a merge cannot hide among the expected
        want.update(samples)
        for run_dir in export(tmp_path / str(n), bench, raw, overrides):
            resp = staff_api.post("/imports/mmtests", payload(run_dir, BASE))
            assert resp.status_code == 201, resp.content
    stored = Sample.objects.filter(boot_record__job__build__sha=BASE).values_list("metric", "iteration", "value")
    got = {(m, i): v for m, i, v in stored}
    assert len(got) == stored.count()
    for bench in ("aim9", "pagealloc", "pft", "spawn"):
        names = {m for m, _ in want if mmtests_import.METRIC_RULES[bench][0].fullmatch(m)}
        assert_same_samples(
            {k: v for k, v in got.items() if k[0] in names}, {k: v for k, v in want.items() if k[0] in names}, bench
        )
    assert {m for m, _ in got} == {m for m, _ in want}
    assert {"spawn-vmas-0", "spawn-vmas-1000", "faults/sec-threads-2", "faults/sec-processes-2"} <= {m for m, _ in got}


def write_logs(root: Path, bench_dir: str, files: dict[str, str]) -> Path:
    logs = root / "iter-0" / bench_dir / "logs"
    logs.mkdir(parents=True)
    for name, text in files.items():
        (logs / name).write_text(text)
    return root


def test_a_spawn_pass_of_unknown_extra_vmas_is_refused_not_taken_for_zero(tmp_path: Path) -> None:
    row = f"{'Process Creation':<40} {126.0:12.1f} {5000.0:12.1f} {396.8:8.1f}\n"
    bare = write_logs(tmp_path / "bare", "unixbench-spawn", {"workloads": "spawn\n", "spawn-1-1.log": row})
    with pytest.raises(MmtestsImportError, match=r"spawn-1-1.log: cannot tell how many extra VMAs .* line 1"):
        read_run(bare)
    # A log named for one copy whose report ran four is not one experiment either.
    four = write_logs(
        tmp_path / "four", "unixbench-spawn", {"workloads": "spawn\n", "spawn-1-1.log": unixbench_spawn_log(9e3, 4)}
    )
    with pytest.raises(
        MmtestsImportError, match=r"for spawn-1-\*\.log, but UnixBench's report on line 17 ran 4 parallel copies"
    ):
        read_run(four)
    # Several copies are left out and said, not stored as kperf's one-process spawn.
    only_four = write_logs(
        tmp_path / "only-four",
        "unixbench-spawn",
        {"workloads": "spawn\n", "spawn-4-1.log": unixbench_spawn_log(9e3, 4)},
    )
    with pytest.raises(MmtestsImportError, match=r"no result lines .*left out: unixbench-spawn with 4 copies"):
        read_run(only_four)


def test_pft_runs_in_the_mode_commands_log_gives_for_each_client_count(tmp_path: Path) -> None:
    row = "   0    1   1     0.00s     0.01s     0.03s  652541.023 305687.188\n"
    two = row.replace("   0    1", "   0    2")

    def pft(name: str, commands: str | None) -> Path:
        files = {"pft-1.log": row, "pft-2.log": two} | ({"commands.log": commands} if commands is not None else {})
        return write_logs(tmp_path / name, "pft", files)

    mixed = pft("mixed", "./pft -m 33554432 -n 1\n./pft -m 33554432 -t 2\n")
    assert {m for m, _, _ in read_run(mixed).benchmarks["pft"].samples} == {
        "faults/sec-processes-1",
        "faults/cpu-processes-1",
        "faults/sec-threads-2",
        "faults/cpu-threads-2",
    }
    with pytest.raises(MmtestsImportError, match="ran pft with 1 clients as processes, but --pft-mode says threads"):
        read_run(mixed, pft_mode="threads")
    both = pft("both", "./pft -m 33554432 -t 1\n./pft -m 33554432 -n 1\n./pft -m 33554432 -n 2\n")
    with pytest.raises(MmtestsImportError, match=r"1 clients both as threads .* and as processes"):
        read_run(both, pft_mode="processes")
    missing = pft("missing", "./pft -m 33554432 -n 1\n")
    with pytest.raises(MmtestsImportError, match=r"pft-2.log .* has no pft -t/-n command for 2 clients.*--pft-mode"):
        read_run(missing)
    # Where commands.log does not say, the user's --pft-mode does; where it does, they must agree.
    assert {m for m, _, _ in read_run(missing, pft_mode="processes").benchmarks["pft"].samples} == {
        "faults/sec-processes-1",
        "faults/cpu-processes-1",
        "faults/sec-processes-2",
        "faults/cpu-processes-2",
    }
    with pytest.raises(MmtestsImportError, match="as processes, but --pft-mode says threads"):
        read_run(missing, pft_mode="threads")


def test_aim9_tests_kperf_does_not_run_are_said_to_be_left_out(tmp_path: Path) -> None:
    table = (
        "     2 page_test           15.00       1650   110.00000       187000.00 System Allocations & Pages/second\n"
    )
    disk = "     3 disk_rr             15.00        300    20.00000       102400.00 Random Disk Reads (K)/second\n"
    run = read_run(write_logs(tmp_path / "r", "aim9", {"aim9-1": table + disk}))
    assert run.benchmarks["aim9"].samples == [("page_test", 0, 187000.0)]
    assert run.left_out == ["aim9 disk_rr: kperf's aim9 runs page_test, brk_test, exec_test, fork_test"]


def test_the_pagealloc_totals_of_an_export_give_the_imported_samples_their_decimals(tmp_path: Path) -> None:
    """pagealloc-total.log, beside the rows mmtests reads: kperf's samples, not the rows' whole cycles."""
    raw = "".join(
        f"order  0 batch {b:6d} alloc 400 free 200\n"
        f"pagealloc-total: order 0 batch {b} ops {100 * b} alloc {40037 * b + r} free {20050 * b}\n"
        for b in (1, 2)
        for r in range(3)
    )
    overrides = {"orders": [0], "batch_limit_kb": 16}
    (run_dir,) = export(tmp_path, "pagealloc", raw, overrides)
    run = read_run(run_dir)
    assert run.benchmarks["pagealloc"].files == ["pagealloc.log", "pagealloc-total.log"]
    imported = {(m, i): v for m, i, v in run.benchmarks["pagealloc"].samples}
    assert imported == kperfs_samples("pagealloc", raw, overrides)
    assert imported[("alloc-odr0-1", 0)] == 400.39 and imported[("free-odr0-2", 0)] == 200.5
    totals = run_dir / "iter-0" / "pagealloc" / "logs" / "pagealloc-total.log"
    lines = totals.read_text().splitlines(keepends=True)
    totals.write_text("".join(lines[:-1]))
    with pytest.raises(MmtestsImportError, match=r"has 5 lines for the 6 rows of .*pagealloc\.log: it is one"):
        read_run(run_dir)
    totals.write_text("".join(lines).replace("alloc 40039", "alloc 50039"))
    with pytest.raises(MmtestsImportError, match=r"pagealloc-total\.log: .* does not round down to its row"):
        read_run(run_dir)
    # Without it, what mmtests reads: the rows.
    totals.unlink()
    assert {v for m, _, v in read_run(run_dir).benchmarks["pagealloc"].samples if m.startswith("alloc")} == {400.0}


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
        (
            {"benchmarks": {"aim9": {"samples": [{"metric": "page_test", "iteration": 0, "value": 1.0, "boot": -1}]}}},
            "and a boot, if any",
        ),
        ({"clock": "instructions", "profile": "huge", "vcpus": 0, "numa_nodes": 0}, "unknown configuration profile"),
        ({"clock": "instructions", "profile": "tiny", "vcpus": -2, "numa_nodes": 0}, "vcpus must be a count"),
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
        assert "left out: unixbench-spawn with 4 copies (spawn-4-*.log)" in out.stdout
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


def test_a_plain_mmtests_run_needs_its_kernel_and_machine_class_given(tmp_path: Path) -> None:
    run = read_run(make_run(tmp_path, "plain", seed=5))
    assert run.kperf is None
    with pytest.raises(CliError, match=r"plain mmtests run .*--kernel-sha and --machine-class"):
        import_target(run, BASE, None)
    assert import_target(run, BASE, "qemu-x86_64") == (BASE, "qemu-x86_64")
