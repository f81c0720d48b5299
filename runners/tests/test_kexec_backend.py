"""The kexec backend's parts that run without a jump: command line, machine checks, resume from pstore.

The pstore directories here are laid out as the kernel lays out
/sys/fs/pstore (pmsg-ramoops-0, console-ramoops-0, dmesg-ramoops-N), with
init's transcript written by the real init binary through KPERF_INIT_PMSG.
The jump itself is tests/test_kexec_runner.py's (a VM).
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from kexec_fixtures import NONCE, RAMOOPS, SPAWN_PARAMS, _spawn_commands, _with_nonce
from namespace_init import run_init_with_pmsg

from kperf_runner.backends import BENCHMARK_CMDLINE, BenchmarkFailure, BootFailure, BootJob, CannotResume
from kperf_runner.backends.kexec import KexecBackend, KexecSetupError, Ramoops, check_ramoops
from kperf_runner.backends.watchdog import WDIOC_KEEPALIVE, WDIOC_SETTIMEOUT
from kperf_runner.benchmarks import get_benchmark
from kperf_runner.toolchain import host_arch


def _backend(tmp_path: Path, **kwargs: Any) -> KexecBackend:
    pstore = tmp_path / "pstore"
    pstore.mkdir(exist_ok=True)
    return KexecBackend(host_arch(), tmp_path / "state", RAMOOPS, pstore=pstore, **kwargs)


def test_the_command_line_is_the_machines_then_kperfs_then_the_jobs(tmp_path: Path) -> None:
    backend = _backend(tmp_path, cmdline="console=ttyS0,115200")
    line = backend.kernel_cmdline("panic=0 mitigations=off", "0123456789abcdef0123456789abcdef")
    assert line.startswith(
        "console=ttyS0,115200 " + BENCHMARK_CMDLINE + " panic=10 kperf.end=reboot "
        "kperf.boot=0123456789abcdef0123456789abcdef watchdog.handle_boot_enabled=0 "
    )
    # Before the job's own options (which could still turn it back on).
    assert line.index("watchdog.handle_boot_enabled=0") < line.index("mitigations=off")
    assert "kperf.boot=" not in backend.kernel_cmdline()
    assert (
        "memmap=16M$0x30000000 ramoops.mem_address=0x30000000 ramoops.mem_size=0x1000000 "
        "ramoops.record_size=0x40000 ramoops.console_size=0x200000 ramoops.pmsg_size=0x800000 ramoops.ecc=0"
    ) in line
    # The job's own words come last, so its panic= wins over kperf's.
    assert line.endswith(" panic=0 mitigations=off")
    assert line.index("panic=10") < line.index("panic=0 ")
    assert backend.clocks() == ("wall",)


def test_arm64_reserves_no_ram_with_memmap_which_it_does_not_have(tmp_path: Path) -> None:
    # arm64 boards reserve ramoops' RAM in their device tree (or with mem=):
    # memmap= would only reach init as a stray argument.
    backend = KexecBackend("arm64", tmp_path / "state", RAMOOPS, pstore=tmp_path)
    line = backend.kernel_cmdline()
    assert "memmap=" not in line
    assert "ramoops.mem_address=0x30000000 ramoops.mem_size=0x1000000" in line
    with pytest.raises(KexecSetupError) as refused:
        check_ramoops(RAMOOPS, tmp_path / "no-sys-module", "arm64")
    assert "memmap" not in str(refused.value) and "ramoops.mem_address=0x30000000" in str(refused.value)


def test_ramoops_flags_parse_and_refuse_what_cannot_work() -> None:
    assert Ramoops.parse("0x30000000:0x1000000") == RAMOOPS
    assert Ramoops.parse("0x30000000:16M") == RAMOOPS
    with pytest.raises(ValueError, match="ADDRESS:SIZE"):
        Ramoops.parse("0x30000000")
    with pytest.raises(ValueError, match="too small"):
        Ramoops.parse("0x30000000:1M")
    with pytest.raises(ValueError, match="not a number"):
        Ramoops.parse("lots:16M")


def _sys_module(tmp_path: Path, address: int, size: int) -> Path:
    """/sys/module as the kernel shows a loaded ramoops: ulong parameters in decimal."""
    params = tmp_path / "module" / "ramoops" / "parameters"
    params.mkdir(parents=True)
    (params / "mem_address").write_text(f"{address}\n")
    (params / "mem_size").write_text(f"{size}\n")
    return tmp_path / "module"


def test_ramoops_must_be_loaded_with_the_same_ram(tmp_path: Path) -> None:
    check_ramoops(RAMOOPS, _sys_module(tmp_path / "same", 0x30000000, 0x1000000))
    with pytest.raises(KexecSetupError, match=r"uses 0x800000 bytes at 0x30000000 .* add to the machine's kernel"):
        check_ramoops(RAMOOPS, _sys_module(tmp_path / "other", 0x30000000, 0x800000))
    with pytest.raises(KexecSetupError, match=r"ramoops is not loaded .* memmap=16M\$0x30000000"):
        check_ramoops(RAMOOPS, tmp_path / "empty")


def test_the_watchdog_ioctls_are_the_kernel_headers(tmp_path: Path) -> None:
    if shutil.which("gcc") is None or not Path("/usr/include/linux/watchdog.h").exists():
        pytest.skip("needs gcc and the kernel's uapi headers (linux-libc-dev)")
    source = tmp_path / "wd.c"
    source.write_text(
        "#include <stdio.h>\n#include <linux/watchdog.h>\n"
        'int main(void) { printf("%lu %lu\\n", (unsigned long)WDIOC_SETTIMEOUT, (unsigned long)WDIOC_KEEPALIVE); }\n'
    )
    subprocess.run(["gcc", "-o", str(tmp_path / "wd"), str(source)], check=True)
    out = subprocess.run([str(tmp_path / "wd")], capture_output=True, text=True, check=True).stdout.split()
    assert [int(word) for word in out] == [WDIOC_SETTIMEOUT, WDIOC_KEEPALIVE]


def _state(seconds_ago: float = 30.0) -> dict[str, Any]:
    # boot_id: the boot the jump came from, not this one.
    return {"started": time.time() - seconds_ago, "boot_id": "the machine's previous boot", "timeout": 600}


def test_a_boot_is_resumed_from_the_transcript_init_wrote_to_pmsg(
    tmp_path: Path, init_binary: Path, spawn_binary: Path
) -> None:
    commands = _spawn_commands()
    console, transcript = run_init_with_pmsg(tmp_path, init_binary, {"spawn": spawn_binary}, commands)
    # pmsg gets exactly what the console gets: the markers and the commands' output.
    assert transcript.decode() == console and "KPERF-DONE" in console and "COUNT|" in console
    backend = _backend(tmp_path)
    (backend.pstore / "pmsg-ramoops-0").write_bytes(transcript)
    (backend.pstore / "console-ramoops-0").write_text(
        "[    0.000000] Linux version 6.1.0-kperf\nreboot: Restarting system\n"
    )
    job = BootJob(commands=commands, binaries={"spawn": spawn_binary})
    result = backend.resume(job, _state(30))
    assert result.commands and [c.status for c in result.commands] == [0] * len(commands)
    assert result.environment["kernel_release"] and 29 < result.seconds < 60
    assert "Linux version 6.1.0-kperf" in result.console and result.details["clock"] == "wall"
    assert result.details["machine_kernel_release"] == os.uname().release
    samples = get_benchmark("spawn").parse(result.raw_output, SPAWN_PARAMS)
    assert {s.metric for s in samples} == {"spawn-vmas-0", "spawn-vmas-10"}
    # Read, and left there until the agent has saved what it made of them ...
    assert sorted(p.name for p in backend.pstore.iterdir()) == ["console-ramoops-0", "pmsg-ramoops-0"]
    assert backend.resume(job, _state(30)).raw_output == result.raw_output
    # ... then removed: the next boot's records are its own.
    backend.release()
    assert list(backend.pstore.iterdir()) == []


def test_a_failing_command_on_the_test_kernel_is_a_benchmark_failure(
    tmp_path: Path, init_binary: Path, spawn_binary: Path
) -> None:
    commands = [["spawn", "--no-such-option"]]
    _, transcript = run_init_with_pmsg(tmp_path, init_binary, {"spawn": spawn_binary}, commands)
    backend = _backend(tmp_path)
    (backend.pstore / "pmsg-ramoops-0").write_bytes(transcript)
    with pytest.raises(BenchmarkFailure, match=r"command 1 of 1 \(spawn --no-such-option\) exited with status"):
        backend.resume(BootJob(commands=commands, binaries={}), _state())


def test_init_tells_pmsg_once_what_it_could_not_execute(tmp_path: Path, init_binary: Path) -> None:
    console, transcript = run_init_with_pmsg(tmp_path, init_binary, {}, [["no-such-benchmark", "1"]])
    assert transcript.decode() == console
    assert console.count("kperf-init: cannot execute no-such-benchmark") == 1
    assert "KPERF-END 0 127" in console and console.rstrip().endswith("KPERF-DONE")


def _cut_transcript(tmp_path: Path, init: Path, spawn: Path) -> tuple[list[list[str]], bytes]:
    """A real transcript cut off inside the first command, as a crash leaves it."""
    commands = _spawn_commands()
    _, transcript = run_init_with_pmsg(tmp_path, init, {"spawn": spawn}, commands)
    return commands, transcript[: transcript.index(b"KPERF-BEGIN 0\n") + len(b"KPERF-BEGIN 0\n")]


def test_a_panic_record_is_a_boot_failure_that_names_the_panic(
    tmp_path: Path, init_binary: Path, spawn_binary: Path
) -> None:
    commands, transcript = _cut_transcript(tmp_path, init_binary, spawn_binary)
    backend = _backend(tmp_path)
    (backend.pstore / "pmsg-ramoops-0").write_bytes(transcript)
    (backend.pstore / "console-ramoops-0").write_text("[    1.0] Linux version 6.1.0-kperf\n")
    (backend.pstore / "dmesg-ramoops-0").write_text(
        "Panic#1 Part1\n<4>[    2.5] BUG: unable to handle page fault\n"
        "<0>[    2.6] Kernel panic - not syncing: Fatal exception\n"
    )
    with pytest.raises(BootFailure) as failure:
        backend.resume(BootJob(commands=commands, binaries={}), _state(40))
    message = failure.value.message
    assert message.startswith("came back without KPERF-DONE after 40 s: kernel panic while command 1 of 2")
    assert message.endswith("Fatal exception") and "watchdog" not in message
    assert "BUG: unable to handle page fault" in failure.value.console
    # A failure is kept in pstore as a result is, until it is saved.
    assert len(list(backend.pstore.iterdir())) == 3


def test_a_transcript_that_stops_without_a_panic_is_a_hang_the_watchdog_ended(
    tmp_path: Path, init_binary: Path, spawn_binary: Path
) -> None:
    commands, transcript = _cut_transcript(tmp_path, init_binary, spawn_binary)
    backend = _backend(tmp_path)
    (backend.pstore / "pmsg-ramoops-0").write_bytes(transcript)
    with pytest.raises(BootFailure, match=r"after 700 s: hang ended by the watchdog .*command 1 of 2"):
        backend.resume(BootJob(commands=commands, binaries={}), _state(700))
    # The period the watchdog was armed for, when the boot's state has it.
    with pytest.raises(BootFailure, match=r"hang ended by the watchdog \(armed for 655 s, no panic was recorded\)"):
        backend.resume(BootJob(commands=commands, binaries={}), {**_state(700), "watchdog_seconds": 655})


def test_an_empty_pstore_is_the_runners_problem_not_the_kernels(tmp_path: Path) -> None:
    backend = _backend(tmp_path)
    with pytest.raises(RuntimeError, match="has nothing of the boot: nothing is known") as failure:
        backend.resume(BootJob(commands=[["true"]], binaries={}), _state())
    assert not isinstance(failure.value, BootFailure)


def test_a_machine_that_never_left_its_kernel_cannot_resume(tmp_path: Path) -> None:
    backend = _backend(tmp_path)
    (backend.pstore / "console-ramoops-0").write_text("left over\n")
    state = {**_state(), "boot_id": Path("/proc/sys/kernel/random/boot_id").read_text().strip()}
    with pytest.raises(CannotResume, match="never left its own kernel"):
        backend.resume(BootJob(commands=[["true"]], binaries={}), state)


# -- the boot's nonce: pstore's records must come from the kernel under test ---


def test_a_boot_whose_transcript_names_its_nonce_is_resumed(
    tmp_path: Path, init_binary: Path, spawn_binary: Path
) -> None:
    commands = _spawn_commands()
    _, transcript = run_init_with_pmsg(tmp_path, init_binary, {"spawn": spawn_binary}, commands)
    backend = _backend(tmp_path)
    (backend.pstore / "pmsg-ramoops-0").write_bytes(_with_nonce(transcript))
    result = backend.resume(BootJob(commands=commands, binaries={}), {**_state(), "boot": NONCE})
    assert [c.status for c in result.commands] == [0] * len(commands)
    # Another boot's nonce is not this one's.
    backend.release()
    (backend.pstore / "pmsg-ramoops-0").write_bytes(_with_nonce(transcript, "0" * 32))
    with pytest.raises(RuntimeError, match="without having booted the kernel under test"):
        backend.resume(BootJob(commands=commands, binaries={}), {**_state(), "boot": NONCE})


def test_a_panic_before_init_counts_by_the_kernels_own_command_line(tmp_path: Path) -> None:
    backend = _backend(tmp_path)
    for arch_line in (
        f"Command line: console=ttyS0 kperf.boot={NONCE} panic=10",
        f"Kernel command line: kperf.boot={NONCE}",
    ):
        (backend.pstore / "dmesg-ramoops-0").write_text(
            f"Panic#1 Part1\n<5>[    0.000000] {arch_line}\n"
            "<0>[    0.5] Kernel panic - not syncing: VFS: Unable to mount root\n"
        )
        with pytest.raises(BootFailure, match="Unable to mount root"):
            backend.resume(BootJob(commands=[["true"]], binaries={}), {**_state(), "boot": NONCE})
        backend.release()  # the failure is saved: the next reading is of pstore again


def test_a_machine_that_reset_without_jumping_is_the_runners_fault_not_the_kernels(tmp_path: Path) -> None:
    backend = _backend(tmp_path)
    # The machine's own kernel crashed on the way down: its console and panic,
    # and the agent's log line naming the command line it loaded, no "Command line:" of ours.
    (backend.pstore / "console-ramoops-0").write_text(
        "[    0.000000] Command line: BOOT_IMAGE=/vmlinuz root=/dev/sda1 memmap=16M$0x30000000\n"
        f"[  900.1] kperf-runner: loading /var/lib/kperf-runner/kernel: panic=10 kperf.boot={NONCE}\n"
    )
    (backend.pstore / "dmesg-ramoops-0").write_text("<0>[  901.0] Kernel panic - not syncing: Fatal exception\n")
    with pytest.raises(RuntimeError) as failure:
        backend.resume(BootJob(commands=[["true"]], binaries={}), {**_state(), "boot": NONCE})
    assert not isinstance(failure.value, BootFailure)
    assert str(failure.value).startswith("the machine came back after 30 s without having booted the kernel under test")
    assert f"(no kperf.boot={NONCE} in what pstore kept, and no kexec in" in str(failure.value)
    assert "console-ramoops-0, dmesg-ramoops-0" in str(failure.value)
    # A state from before boots had a nonce: the same records are the kernel's boot failure, as before.
    (backend.pstore / "dmesg-ramoops-0").write_text("<0>[  901.0] Kernel panic - not syncing: Fatal exception\n")
    with pytest.raises(BootFailure, match="Fatal exception"):
        backend.resume(BootJob(commands=[["true"]], binaries={}), _state())


class _StopsAtTheJump(KexecBackend):
    """start() up to the jump: what it loads, and the state it commits."""

    loaded: tuple[Path, str] | None = None

    def ramoops_loaded(self) -> bool:
        return True

    def load(self, kernel: Path, initrd: Path, cmdline: str) -> None:
        self.loaded = (initrd, cmdline)

    def jump(self) -> None:
        raise SystemExit("the machine went into the kernel under test")


def test_start_gives_each_boot_a_nonce_and_an_initramfs_that_reboots(tmp_path: Path, runner_state: Path) -> None:
    if shutil.which("cpio") is None:
        pytest.skip("needs cpio")
    state = tmp_path / "state"
    state.mkdir()
    # The compile cache the other tests use: init.c compiles once.
    (runner_state / "bin").mkdir(exist_ok=True)
    (state / "bin").symlink_to(runner_state / "bin", target_is_directory=True)
    kernel = tmp_path / "bzImage"
    kernel.write_bytes(b"kernel")
    commits: list[dict[str, Any]] = []
    nonces = []
    for _ in range(2):
        kmsg = tmp_path / "kmsg"  # the kernel log's device, which the backend never creates
        kmsg.write_text("")
        backend = _StopsAtTheJump(host_arch(), state, RAMOOPS, pstore=tmp_path / "pstore", kmsg=kmsg)
        with pytest.raises(SystemExit):
            backend.start(BootJob(commands=[["true"]], binaries={}), kernel, lambda s, _quiet: commits.append(s))
        assert backend.loaded is not None
        initrd, cmdline = backend.loaded
        nonce = commits[-1]["boot"]
        assert len(nonce) == 32 and int(nonce, 16) >= 0 and f" kperf.boot={nonce} " in cmdline
        # The machine's own kernel log names the boot it jumps into (its shutdown dump keeps it).
        assert kmsg.read_text().endswith(f"<5>kperf-runner: jumping into the kernel under test, boot {nonce}\n")
        assert commits[-1]["cmdline"] == cmdline
        nonces.append(nonce)
        root = tmp_path / f"root-{len(nonces)}"
        root.mkdir()
        subprocess.run(["cpio", "-idm", "--quiet"], input=gzip.decompress(initrd.read_bytes()), cwd=root, check=True)
        assert (root / "kperf" / "end").read_text() == "reboot\n"
    assert nonces[0] != nonces[1]


# -- the watchdog left armed by a jump that never happened ---------------------


def test_a_watchdog_left_armed_is_stopped_when_the_agent_never_jumped(tmp_path: Path) -> None:
    # A regular file stands in for /dev/watchdog: what matters is the magic 'V' written to it.
    watchdog, sysfs = tmp_path / "watchdog", tmp_path / "class"
    watchdog.write_bytes(b"")
    backend = _backend(tmp_path, watchdog=watchdog, watchdog_sysfs=sysfs)
    state = {**_state(), "boot_id": Path("/proc/sys/kernel/random/boot_id").read_text().strip()}
    with pytest.raises(CannotResume, match="never left its own kernel"):
        backend.resume(BootJob(commands=[["true"]], binaries={}), state)
    assert watchdog.read_bytes() == b"V"
    # At start-up too; but one that sysfs says is not running is left alone
    # (opening it would start it). /dev/watchdog is watchdog0.
    (sysfs / "watchdog0").mkdir(parents=True)
    (sysfs / "watchdog0" / "state").write_text("inactive\n")
    watchdog.write_bytes(b"")
    _backend(tmp_path, watchdog=watchdog, watchdog_sysfs=sysfs).stop_watchdog()
    assert watchdog.read_bytes() == b""
    (sysfs / "watchdog0" / "state").write_text("active\n")
    _backend(tmp_path, watchdog=watchdog, watchdog_sysfs=sysfs).stop_watchdog()
    assert watchdog.read_bytes() == b"V"


# -- init's pmsg path: a child left holding the output, a command that prints too much

HELPER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "linger") == 0) {
		/* Leaves a child holding stdout open long after it exits itself. */
		printf("parent says goodbye\n");
		fflush(stdout);
		if (fork() == 0) {
			sleep(90);
			printf("child too late\n");
		}
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "spew") == 0) {
		char line[100];
		memset(line, 'x', sizeof(line) - 1);
		line[sizeof(line) - 1] = '\n';
		for (long i = atol(argv[2]); i > 0; i--)
			fwrite(line, 1, sizeof(line), stdout);
		return 0;
	}
	return 2;
}
"""


@pytest.fixture(scope="module")
def helper_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A static helper for init's namespace root, which has no shell or anything else to run."""
    directory = tmp_path_factory.mktemp("helper")
    (directory / "helper.c").write_text(HELPER)
    run = subprocess.run(
        ["gcc", "-static", "-O2", "-o", str(directory / "helper"), str(directory / "helper.c")],
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode != 0:
        pytest.skip(f"cannot build a static helper: {run.stderr.strip()[-200:]}")
    return directory / "helper"


def test_init_does_not_wait_for_a_child_the_command_left_holding_its_output(
    tmp_path: Path, init_binary: Path, helper_binary: Path
) -> None:
    commands = [["helper", "linger"], ["helper", "spew", "3"]]
    began = time.monotonic()
    console, transcript = run_init_with_pmsg(tmp_path, init_binary, {"helper": helper_binary}, commands)
    # The child sleeps 90 s: init went on when the command exited, not when the pipe closed.
    assert time.monotonic() - began < 45
    assert transcript.decode() == console
    assert "parent says goodbye\nKPERF-END 0 0\n" in console and "child too late" not in console
    assert "KPERF-END 1 0" in console and console.rstrip().endswith("KPERF-DONE")


def test_pmsg_keeps_4_mib_of_output_per_boot_and_says_so(
    tmp_path: Path, init_binary: Path, helper_binary: Path
) -> None:
    # 5 MB of 100-byte lines: the cut falls inside a line.
    commands = [["helper", "spew", "50000"], ["helper", "spew", "10"]]
    console, transcript = run_init_with_pmsg(tmp_path, init_binary, {"helper": helper_binary}, commands)
    assert console.count("x" * 99 + "\n") == 50010 and "not kept in pmsg" not in console
    text = transcript.decode()
    note = "\nkperf-init: output beyond 4194304 bytes not kept in pmsg\nKPERF-END 0 0\n"
    assert note in text and text.count("kperf-init: output beyond") == 1
    # Exactly the first 4 MiB of the output, cut inside line 41944.
    kept = text[text.index("KPERF-BEGIN 0\n") + len("KPERF-BEGIN 0\n") : text.index(note)]
    assert kept == ("x" * 99 + "\n") * 41943 + "xxxx" and len(kept) == 4 << 20
    # init's own lines still reach pmsg: the second command ran, and the boot is done.
    assert "KPERF-BEGIN 1\nKPERF-END 1 0\n" in text and text.rstrip().endswith("KPERF-DONE")


def test_init_ends_by_rebooting_when_the_initramfs_says_so(tmp_path: Path, init_binary: Path) -> None:
    (tmp_path / "reboot").mkdir()
    (tmp_path / "poweroff").mkdir()
    console, transcript = run_init_with_pmsg(tmp_path / "reboot", init_binary, {}, [["missing"]], end="reboot")
    assert console.rstrip().endswith("KPERF-DONE\nkperf-init: would reboot now") and transcript.decode() == console
    console, _ = run_init_with_pmsg(tmp_path / "poweroff", init_binary, {}, [["missing"]])
    assert "would reboot" not in console
