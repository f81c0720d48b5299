"""A bare-metal runner loses no outcome when the power goes at any step after a boot.

A machine is played by `Lab`: its pstore directory, its kernel log, its boot
id, and what the kernel under test leaves in pstore when the agent jumps
into it (a run of the real init, whose transcript names the boot's nonce; a
panic; or nothing at all, as a kernel that dies before its ramoops starts).
The agent and the kexec backend are the real ones, with only the kexec
itself stubbed: the jump writes those records and ends the agent's process
(SystemExit), as the reboot does.

A power cut is the agent dying (SystemExit again) at one of the steps the
agent names (kperf_runner.crashpoints), and a new agent and backend started
on the same state directory and the same pstore, as systemd starts them at
the next boot: records read but nothing saved, the outcome saved but pstore
not cleared, pstore cleared but the service not told. Each time the service
(tests' FakeService) must get the boot's outcome exactly once, from the
right source.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from agent_fixtures import TOKEN, FakeService, _job
from kexec_fixtures import _with_nonce
from namespace_init import run_init_with_pmsg

from kperf_runner import inflight
from kperf_runner.agent import ABANDONED, DONE, FAILED, Agent, RunnerConfig
from kperf_runner.backends.kexec import KexecBackend, Ramoops
from kperf_runner.benchmarks import get_benchmark
from kperf_runner.client import Client
from kperf_runner.crashpoints import BOOT_READ, OUTCOME_SAVED, POINTS, PSTORE_CLEARED, Crashpoints
from kperf_runner.toolchain import host_arch

RAMOOPS = Ramoops(0x30000000, 0x1000000)
PARAMS = {"duration": 0.05, "iterations": 2, "extra_vmas": [0, 10]}  # FakeService's job's
DECOY = "KPERF-ENV kernel_release=decoy\nKernel panic - not syncing: a second look at pstore\n"


class MachineGoesAway(SystemExit):
    """The agent's process ends here: a kexec, a reset, a power cut."""


@pytest.fixture(scope="module")
def transcript(tmp_path_factory: pytest.TempPathFactory, init_binary: Path, spawn_binary: Path) -> bytes:
    """What the real init writes to pmsg running FakeService's spawn job."""
    bench = get_benchmark("spawn")
    commands = bench.command(bench.validate(PARAMS), "/kperf/bin")
    _, pmsg = run_init_with_pmsg(tmp_path_factory.mktemp("init"), init_binary, {"spawn": spawn_binary}, commands)
    assert b"KPERF-DONE" in pmsg
    return pmsg


class Lab:
    """One machine across its reboots, and what the kernel under test does on it.

    ramoops as the machine's own kernel has it: the console and pmsg zones
    hold what the kernel before wrote until ramoops starts, which shows them
    in pstore for that boot only and empties them; kmsg dumps stay until
    they are removed from pstore. pstore's directory shows nothing until
    ramoops is started (by the agent, `open_pstore()`).
    """

    def __init__(self, tmp_path: Path, transcript: bytes) -> None:
        self.pstore = tmp_path / "pstore"
        self.pstore.mkdir()
        self.kmsg = tmp_path / "kmsg"  # the machine's own kernel log (the agent's jump mark lands here)
        self.kmsg.write_text("")
        self.state = tmp_path / "state"
        self.transcript = transcript
        self.boots = 1
        self.kernel = "runs"  # or "panics", "dies-early"
        self.jumps: list[str] = []  # the nonces of the boots jumped into
        self.zones: dict[str, str] = {}  # console and pmsg as the last kernel left them
        self.dumps: dict[str, str] = {}  # kmsg dumps
        self.ramoops = False  # started in this boot
        self.cut_when_ramoops_starts = False

    def boot_id(self) -> str:
        return f"boot {self.boots} of the machine"

    def start_ramoops(self) -> None:
        for name, text in {**self.dumps, **self.zones}.items():
            (self.pstore / name).write_text(text)
        self.zones, self.ramoops = {}, True
        if self.cut_when_ramoops_starts:
            self.cut_when_ramoops_starts = False
            self.reset()
            raise MachineGoesAway("power cut right after ramoops started")

    def _erased(self) -> None:
        # A record removed from pstore is gone from ramoops' RAM too.
        if self.ramoops:
            self.dumps = {name: text for name, text in self.dumps.items() if (self.pstore / name).exists()}

    def _reboot(self) -> None:
        for entry in self.pstore.iterdir():
            entry.unlink()
        self.ramoops = False
        self.boots += 1

    def reset(self) -> None:
        """A warm reset (the watchdog, a reset button): ramoops' RAM stays."""
        self._erased()
        self._reboot()

    def kexec(self, cmdline: str) -> None:
        """The machine's own kernel hands over; the kernel under test leaves what it leaves; back."""
        self._erased()
        nonce = re.findall(r"kperf\.boot=([0-9a-f]{32})", cmdline)[-1]
        self.jumps.append(nonce)
        own_log = "".join(f"<5>[  900.0] {line}\n" for line in self.kmsg.read_text().splitlines())
        self.dumps["dmesg-ramoops-3"] = f"Shutdown#1 Part1\n{own_log}<5>[  901.2] kexec_core: Starting new kernel\n"
        console = f"[    0.000000] Command line: {cmdline}\n"
        if self.kernel == "runs":
            self.zones = {
                "pmsg-ramoops-0": _with_nonce(self.transcript, nonce).decode(),
                "console-ramoops-0": console + "[   30.0] reboot: Restarting system\n",
            }
        elif self.kernel == "panics":
            self.zones = {"console-ramoops-0": console}
            self.dumps["dmesg-ramoops-0"] = (
                f"Panic#1 Part1\n<0>[    2.6] Kernel panic - not syncing: Fatal exception in boot {nonce[:6]}\n"
            )
        self._reboot()

    def backend(self) -> Machine:
        return Machine(self)

    def agent(
        self,
        url: str,
        runner_state: Path,
        cut: str = "",
        once: bool = True,
        stop: threading.Event | None = None,
    ) -> Agent:
        """A fresh agent and backend on this machine's state directory, started as the CLI starts them.

        cut: the step the power goes at.
        """
        self.state.mkdir(exist_ok=True)
        if not (self.state / "bin").exists():
            (self.state / "bin").symlink_to(runner_state / "bin", target_is_directory=True)

        def power_cut(point: str) -> None:
            if point == cut:
                self.reset()
                raise MachineGoesAway(f"power cut after {point}")

        config = RunnerConfig("bm-1", host_arch(), "bm-x86", self.state, poll=0.01, once=once)
        client = Client(url, TOKEN, backoff=0.01, retries=4)
        backend = self.backend()
        backend.open_pstore()
        return Agent(config, client, backend, stop, crashpoints=Crashpoints(self.state, power_cut))

    def snapshot(self) -> dict[str, Any] | None:
        """The agent's copy of the boot's records, if it has one."""
        path = self.state / "kexec" / "pstore-snapshot.json"
        return json.loads(path.read_text()) if path.exists() else None


class Machine(KexecBackend):
    """The kexec backend on the Lab's machine: everything real but modprobe, `kexec -l` and the jump."""

    def __init__(self, lab: Lab) -> None:
        super().__init__(host_arch(), lab.state, RAMOOPS, pstore=lab.pstore, kmsg=lab.kmsg, return_timeout=600)
        self.lab = lab
        self.cmdline = ""

    def ramoops_loaded(self) -> bool:
        return self.lab.ramoops

    def load_ramoops(self) -> None:
        self.lab.start_ramoops()

    def load(self, kernel: Path, initrd: Path, cmdline: str) -> None:
        assert initrd.is_file()
        self.cmdline = cmdline

    def boot_id(self) -> str:
        return self.lab.boot_id()

    def jump(self) -> None:
        self.lab.kexec(self.cmdline)
        raise MachineGoesAway("the machine went into the kernel under test")


def _jump(lab: Lab, url: str, runner_state: Path) -> dict[str, Any]:
    """Claim the job and jump into its kernel; the record the agent left for the way back."""
    with pytest.raises(MachineGoesAway):
        lab.agent(url, runner_state).run()
    left = inflight.load(lab.state)
    assert left is not None and left.under_way and left.state["boot"] == lab.jumps[-1]
    return left.state


def _records(lab: Lab) -> list[str]:
    return sorted(p.name for p in lab.pstore.iterdir())


@pytest.mark.parametrize("cut", POINTS)
def test_a_power_cut_after_a_good_boot_loses_nothing(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    transcript: bytes,
    cut: str,
) -> None:
    fake, url = service
    fake.job = _job(boots=1)
    lab = Lab(tmp_path, transcript)
    _jump(lab, url, runner_state)
    assert sorted(lab.zones) == ["console-ramoops-0", "pmsg-ramoops-0"] and list(lab.dumps) == ["dmesg-ramoops-3"]

    # Back on its own kernel, the agent gets as far as `cut`, and the power goes.
    with pytest.raises(MachineGoesAway):
        lab.agent(url, runner_state, cut=cut).run()
    kept = inflight.load(lab.state)
    assert kept is not None and kept.failure is None
    assert not fake.bodies("results")
    # ramoops handed the transcript over once, to the boot that is gone: only the agent's copy has it now.
    assert lab.zones == {}
    snapshot = lab.snapshot()
    if cut == BOOT_READ:
        # Nothing saved: the boot is still under way, its records copied, pstore left as it was.
        assert kept.under_way and kept.results == [] and "dmesg-ramoops-3" in lab.dumps
        assert snapshot is not None and "KPERF-DONE" in snapshot["records"]["pmsg-ramoops-0"]
    else:
        # Saved, with the samples, before pstore was cleared (and only then cleared).
        assert not kept.under_way and kept.boot == 1
        [saved] = kept.results
        assert len(saved["samples"]) == 4 and "KPERF-DONE" in saved["console"]
        assert ("dmesg-ramoops-3" in lab.dumps) == (cut == OUTCOME_SAVED)
        assert (snapshot is not None) == (cut == OUTCOME_SAVED)
    # What pstore shows from now on is not this boot's: a second look would find this.
    lab.zones = {"pmsg-ramoops-0": DECOY}

    # The next boot's agent finishes the job: one upload, the boot's own samples.
    again = lab.agent(url, runner_state)
    assert again.run() == 0 and again.jobs[DONE] == 1, again.jobs
    [results] = fake.delivered("results")
    [boot] = results["boots"]
    assert {(s["metric"], s["iteration"]) for s in boot["samples"]} == {
        (f"spawn-vmas-{v}", i) for v in (0, 10) for i in (0, 1)
    }
    assert boot["environment"]["backend"] == "kexec" and "decoy" not in results["console_log"]
    assert "KPERF-DONE" in results["console_log"] and not fake.bodies("fail")
    assert len(fake.bodies("claim")) == 1  # nothing else claimed, the job not run twice
    assert inflight.load(lab.state) is None
    if cut == BOOT_READ:
        assert _records(lab) == [] and lab.snapshot() is None  # saved, then cleared
    else:
        # Never read again; the next boot's start clears what is left.
        assert (lab.pstore / "pmsg-ramoops-0").read_text() == DECOY


@pytest.mark.parametrize("cut", POINTS)
def test_a_power_cut_after_a_panic_loses_no_failure(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    transcript: bytes,
    cut: str,
) -> None:
    fake, url = service
    fake.job = _job(boots=1)
    lab = Lab(tmp_path, transcript)
    lab.kernel = "panics"
    _jump(lab, url, runner_state)
    with pytest.raises(MachineGoesAway):
        lab.agent(url, runner_state, cut=cut).run()
    kept = inflight.load(lab.state)
    assert kept is not None and not fake.bodies("fail")
    # The kernel's console went to the boot that is gone; its panic's dump stays until cleared.
    assert lab.zones == {}
    if cut == BOOT_READ:
        assert kept.under_way and kept.failure is None and "dmesg-ramoops-0" in lab.dumps
    else:
        assert kept.failure is not None and kept.failure["kind"] == "boot"
        assert "Fatal exception" in kept.failure["message"] and not kept.under_way
        assert ("dmesg-ramoops-0" in lab.dumps) == (cut == OUTCOME_SAVED)

    again = lab.agent(url, runner_state)
    assert again.run() == 0 and again.jobs[FAILED] == 1, again.jobs
    [failure] = fake.delivered("fail")
    assert failure["kind"] == "boot" and failure["attempt"] == 1
    assert f"Fatal exception in boot {lab.jumps[0][:6]}" in failure["message"]
    assert "Kernel panic" in failure["log"] and "Command line:" in failure["log"]
    # The panicking kernel ran once: the job was not claimed or booted again.
    assert len(lab.jumps) == 1 and len(fake.bodies("claim")) == 1 and not fake.bodies("results")
    assert inflight.load(lab.state) is None


def test_a_reset_before_the_records_are_kept_is_the_runners_fault_not_an_early_death(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    transcript: bytes,
) -> None:
    fake, url = service
    fake.job = _job(boots=1)
    lab = Lab(tmp_path, transcript)
    _jump(lab, url, runner_state)
    # The power goes the moment ramoops has handed the boot over, before the agent copied it.
    lab.cut_when_ramoops_starts = True
    with pytest.raises(MachineGoesAway):
        lab.agent(url, runner_state)
    assert lab.zones == {} and lab.snapshot() is None
    # What is left (the machine's own shutdown log, handing over) looks like an
    # early death; the agent's note says an earlier boot took the records.
    back = lab.agent(url, runner_state)
    assert back.run() == 0 and back.jobs[FAILED] == 1, back.jobs
    [failure] = fake.delivered("fail")
    assert failure["kind"] == "infra", failure
    assert "was reset before the agent could keep them" in failure["message"]
    assert not fake.bodies("results")


def test_a_failure_the_service_does_not_acknowledge_stays_on_disk_and_is_sent_again(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    transcript: bytes,
) -> None:
    fake, url = service
    fake.job = _job(boots=1)
    lab = Lab(tmp_path, transcript)
    lab.kernel = "panics"
    _jump(lab, url, runner_state)
    # The service is down for the whole first try (the client's 4 attempts) and the second.
    fake.script["fail"] = [(503, {"detail": "restarting"})] * 8
    back = lab.agent(url, runner_state)
    assert back.run() == 0 and back.jobs[ABANDONED] == 1, back.jobs
    kept = inflight.load(lab.state)
    assert kept is not None and kept.failure is not None and kept.failure["kind"] == "boot"
    # Saved, so pstore could go; the report is the record's now.
    assert _records(lab) == [] and len(fake.bodies("fail")) == 4 and not fake.delivered("fail")

    # Every start of the agent tries it first, and claims nothing meanwhile:
    # here the service is still down, so the loop keeps it and backs off.
    stop = threading.Event()
    retrying = lab.agent(url, runner_state, once=False, stop=stop)
    delays: list[float] = []
    real_report = retrying._report_failure

    def report(job: dict[str, Any], label: str, failure: dict[str, str]) -> str:
        delays.append(retrying.retry_delay)
        outcome = real_report(job, label, failure)
        if outcome != ABANDONED:
            stop.set()
        return outcome

    retrying._report_failure = report  # type: ignore[method-assign]
    timer = threading.Timer(60, stop.set)  # a broken loop must not hang the run
    timer.start()
    try:
        assert retrying.run() == 0
    finally:
        timer.cancel()
    assert retrying.jobs[ABANDONED] == 1 and retrying.jobs[FAILED] == 1, retrying.jobs
    # The first try at once; the second after a pause.
    assert delays[0] == 0.0 and delays[1] > 0
    [failure] = fake.delivered("fail")
    assert failure["kind"] == "boot" and "Kernel panic" in failure["log"]
    assert len(fake.bodies("claim")) == 1 and len(lab.jumps) == 1
    assert inflight.load(lab.state) is None


def test_a_kernel_that_dies_before_its_ramoops_is_a_boot_failure_with_the_evidence(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    transcript: bytes,
) -> None:
    fake, url = service
    fake.job = _job(boots=1)
    lab = Lab(tmp_path, transcript)
    lab.kernel = "dies-early"
    _jump(lab, url, runner_state)
    # Only the machine's own kernel going down.
    assert list(lab.dumps) == ["dmesg-ramoops-3"] and lab.zones == {}
    back = lab.agent(url, runner_state)
    assert back.run() == 0 and back.jobs[FAILED] == 1, back.jobs
    [failure] = fake.delivered("fail")
    assert failure["kind"] == "boot", failure
    assert failure["message"].startswith("the kernel under test died before its ramoops started")
    assert "this boot's jump, by its nonce" in failure["message"]
    # The evidence: the machine's own kernel naming the boot, then handing over.
    assert f"jumping into the kernel under test, boot {lab.jumps[0]}" in failure["log"]
    assert failure["log"].index(lab.jumps[0]) < failure["log"].index("kexec_core: Starting new kernel")
    assert _records(lab) == [] and inflight.load(lab.state) is None


def test_a_power_cut_between_two_boots_keeps_the_first_and_clears_its_records_before_the_second(
    service: tuple[FakeService, str],
    tmp_path: Path,
    runner_state: Path,
    transcript: bytes,
) -> None:
    fake, url = service
    fake.job = _job(boots=2)
    lab = Lab(tmp_path, transcript)
    _jump(lab, url, runner_state)
    # Boot 1 is saved, the power goes before pstore is cleared.
    with pytest.raises(MachineGoesAway):
        lab.agent(url, runner_state, cut=OUTCOME_SAVED).run()
    # A record boot 2 does not overwrite (ramoops keeps kmsg dumps until they are cleared).
    lab.dumps["dmesg-ramoops-5"] = "Panic#1 Part1\n<0>Kernel panic - not syncing: left over\n"
    # The next start goes on with boot 2: what is left is cleared before the jump ...
    with pytest.raises(MachineGoesAway):
        lab.agent(url, runner_state).run()
    left = inflight.load(lab.state)
    assert left is not None and left.under_way and left.boot == 1 and len(left.results) == 1
    assert len(lab.jumps) == 2 and lab.jumps[0] != lab.jumps[1]
    # ... so what pstore holds now is boot 2's alone.
    assert "dmesg-ramoops-5" not in lab.dumps
    done = lab.agent(url, runner_state, cut=PSTORE_CLEARED)
    with pytest.raises(MachineGoesAway):
        done.run()
    finished = lab.agent(url, runner_state)
    assert finished.run() == 0 and finished.jobs[DONE] == 1
    [results] = fake.delivered("results")
    assert [boot["boot"] for boot in results["boots"]] == [0, 1]
    assert all(len(boot["samples"]) == 4 for boot in results["boots"])
    assert "left over" not in results["console_log"] and len(fake.bodies("claim")) == 1
