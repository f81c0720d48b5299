"""The kexec backend on a machine of its own: a Debian VM standing in for a lab box.

kperf_testing.baremetal boots a Debian bookworm machine under QEMU (TCG)
with the systemd unit an operator installs (runners/systemd/kperf-runner.service),
an i6300esb hardware watchdog and RAM reserved for ramoops. The agent in it
talks to a live kperf service on this host (10.0.2.2 from the guest) and
works through four jobs of a bare-metal machine class, one VM session, with
the power cut (QEMU's reset button: RAM, and so pstore, survives) at each
step between reading a boot's outcome and the service having it:

(a) it kexecs into the fixture kernel, runs spawn, the kernel reboots the
    machine back into Debian; the power goes once after the agent read
    pstore (nothing saved yet) and once after it saved the result (pstore
    not yet cleared); the agent uploads all the same: done, samples,
    attempt 1;
(b) a kernel that panics (no init) comes back through panic=; the power
    goes after the failure is saved and pstore cleared, before the service
    is told; the agent tells it then: a `boot` failure whose console has
    the panic, and the runner goes on;
(c) a kernel that hangs without a panic (waiting for a root device that
    never comes) comes back through the watchdog, armed for that boot's
    own time limit: `boot` again, with its console;
(d) a kernel that dies before its ramoops starts (here: told to have none)
    leaves nothing in pstore: the machine's own kernel's shutdown log shows
    it handed over, so it is the kernel's `boot` failure, not `infra`.

The agent stops at each step named in KPERF_RUNNER_HOLD_AT (kperf_runner.crashpoints),
once, and says so on the console; the test resets the machine there and
checks that the service had not got the outcome yet.

Jobs (b)-(d) belong to submissions with boot parameters of their own
(Submission.boot_params), which their claims carry to the runner. rdinit=,
root=, panic= and ramoops.* are words kperf refuses from people
(kperf.core.lab.boot_params), so the test sets them on the submissions
directly, as an operator could.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from kperf_runner.crashpoints import BOOT_READ, ENV, OUTCOME_SAVED, POINTS, PSTORE_CLEARED
from kperf_testing.baremetal import (
    HOST_FROM_GUEST,
    RAMOOPS_REGION,
    Machine,
    ensure_debian_image,
    running_machine,
)

pytestmark = [pytest.mark.kernel, pytest.mark.e2e]

# TCG boots of Debian take about a minute; a job is a kexec, a test kernel
# run and a reboot back, plus the watchdog's time for the hang.
BOOT_TIMEOUT_S = 240
JOB_TIMEOUT_S = 420
# From a reset to the agent, started again on Debian, at its next step.
RESET_TIMEOUT_S = 300


def elapsed(t0: float) -> str:
    return f"{time.monotonic() - t0:.0f} s"


def wait_for(what: str, check: Callable[[], Any], timeout: float, vm: Machine) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if not vm.alive():
            raise AssertionError(f"QEMU exited before {what}:\n{vm.console_text()[-6000:]}")
        time.sleep(2)
    raise AssertionError(f"no {what} after {timeout:.0f} s; the machine's console:\n{vm.console_text()[-8000:]}")


@pytest.mark.django_db(transaction=True)
def test_a_bare_metal_runner_kexecs_into_each_job_and_comes_back(
    live_server: Any,
    settings: Any,
    kperf_cache: Path,
    kernel_tree: Path,
    tmp_path: Path,
    django_user_model: Any,
) -> None:
    from kperf.core.builds.artifacts import sha256_file
    from kperf.core.models import BootRecord, Job, KernelBuild, MachineClass, Runner, Sample, Submission, Tree
    from kperf.core.models.lab import Clock
    from kperf_testing.kbuild import build_fixture_kernel

    if os.geteuid() != 0:
        pytest.skip("the Debian runner image is made with debootstrap and chroot, which need root")
    t0 = time.monotonic()
    image = ensure_debian_image(kperf_cache)
    print(f"Debian image {image.key}: ready after {elapsed(t0)}", flush=True)
    fixture = build_fixture_kernel(kernel_tree, "base", "x86_64", kperf_cache)
    assert fixture.ok, fixture
    print(f"fixture kernel: ready after {elapsed(t0)}", flush=True)

    # The guest reaches this host's loopback as 10.0.2.2 and says so in its Host header.
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, HOST_FROM_GUEST]
    port = urlsplit(live_server.url).port
    mclass = MachineClass.objects.create(name="bm-x86_64", arch="x86_64", clock=Clock.WALL)
    runner, token = Runner.register("bm-1", mclass)

    kernel = Path(fixture.artifacts["kernel"])
    owner = django_user_model.objects.create_user("dev", "dev@example.org", "dev-password-1")
    tree = Tree.objects.create(url=str(kernel_tree))
    sha = subprocess.run(
        ["git", "-C", str(kernel_tree), "rev-parse", "refs/heads/base"], capture_output=True, text=True, check=True
    ).stdout.strip()
    build = KernelBuild.objects.create(
        tree=tree,
        sha=sha,
        arch="x86_64",
        config_digest=fixture.config_digest,
        status=KernelBuild.Status.DONE,
        artifacts={"kernel": {"path": str(kernel), "sha256": sha256_file(kernel), "size": kernel.stat().st_size}},
    )
    params = {"duration": 0.2, "iterations": 2, "extra_vmas": [0]}

    def queue(seq: int, boot_params: str = "") -> Job:
        # One submission per job: its boot parameters are every one of its boots'.
        sub = Submission.objects.create(
            owner=owner,
            tree=tree,
            head_ref="base",
            base_ref="base",
            head_sha=build.sha,
            base_sha=build.sha,
            benchmarks=["spawn"],
            grids=["quick"],
            arches=["x86_64"],
            boot_params=boot_params,
            status=Submission.Status.TESTING,
        )
        job = Job.queue_one_boot(build, mclass, "spawn", "quick", params, seq, submission=sub, side="base")
        assert job.boot_params == boot_params
        return job

    def final(job: Job, vm: Machine, timeout: float = JOB_TIMEOUT_S) -> Job:
        def done() -> Job | None:
            job.refresh_from_db()
            return job if job.is_final else None

        result: Job = wait_for(f"end of job {job.pk}", done, timeout, vm)
        assert result.runner_id == runner.pk
        return result

    def cut_power_at(point: str, job: Job, vm: Machine, after: int, timeout: float) -> int:
        """Wait for the agent to hold at `point`, check the service has no outcome yet, reset."""
        at = vm.wait_console(f"holding at {point}", timeout, after)
        job.refresh_from_db()
        assert not job.is_final and job.attempt == 1, (point, job.status, job.attempt)
        vm.reset()
        print(f"    power cut after {point}: {elapsed(t0)}", flush=True)
        return at

    env = {
        "KPERF_SERVER": f"http://{HOST_FROM_GUEST}:{port}",
        "KPERF_RUNNER_TOKEN": token,
        "KPERF_RUNNER_NAME": runner.name,
        "KPERF_MACHINE_CLASS": mclass.name,
        "KPERF_ARCH": "x86_64",
        "KPERF_KEXEC_RAMOOPS": RAMOOPS_REGION,
        "KPERF_KEXEC_CMDLINE": "console=ttyS0,115200",
        "KPERF_KEXEC_WATCHDOG": "/dev/watchdog",
        # A TCG VM jumps, boots the fixture kernel and reboots in well under
        # a minute: with that figure a hang is told apart in minutes, not five.
        "KPERF_RUNNER_ARGS": "--poll 2 --kexec-boot-seconds 45",
        # Where the power is cut, each once (kperf_runner.crashpoints).
        ENV: ",".join(POINTS),
    }
    vm_dir = tmp_path / "vm"
    with running_machine(image, vm_dir, env) as vm:
        try:
            # The machine boots, systemd starts the unit, the agent registers.
            def heartbeat() -> Runner | None:
                runner.refresh_from_db()
                return runner if runner.last_heartbeat else None

            wait_for("heartbeat from the runner in the VM", heartbeat, BOOT_TIMEOUT_S, vm)
            assert "kexec" in runner.capabilities.get("backends", []), runner.capabilities
            assert runner.hostname == "kperf-bm"
            print(f"VM booted, agent heartbeating: {elapsed(vm.started)}", flush=True)

            # (a) A kernel that runs the benchmark and reboots the machine,
            # which loses power twice on the way to the upload.
            t = time.monotonic()
            job = queue(0)
            at = cut_power_at(BOOT_READ, job, vm, len(vm.console_text()), JOB_TIMEOUT_S)
            at = vm.wait_console("resuming at boot 1 of 1", RESET_TIMEOUT_S, at)
            at = cut_power_at(OUTCOME_SAVED, job, vm, at, RESET_TIMEOUT_S)
            vm.wait_console("uploading the 1 boot(s) kept in the state directory", RESET_TIMEOUT_S, at)
            ok = final(job, vm)
            assert ok.status == Job.Status.DONE, f"{ok.failure_kind}: {ok.failure_message}\n{ok.console_log[-4000:]}"
            assert ok.attempt == 1  # not retried: nothing was lost
            [boot] = BootRecord.objects.filter(job=ok)
            assert boot.environment["backend"] == "kexec", boot.environment
            assert boot.environment["clock"] == "wall"
            assert "ramoops.mem_address=0x30000000" in boot.environment["kernel_cmdline"]
            assert boot.environment["kernel_release"].startswith("6.1"), boot.environment
            values = list(Sample.objects.filter(boot_record=boot).values_list("value", flat=True))
            assert len(values) == 2 and all(v > 0 for v in values), values
            assert "KPERF-DONE" in ok.console_log
            # The machine's own kernel's shutdown log is not the boot's console.
            assert "Starting new kernel" not in ok.console_log
            # The agent started ramoops itself (after its note), at every start.
            assert "loaded ramoops: mem_address=0x30000000" in vm.console_text()
            assert "ramoops was started before the agent" not in vm.console_text()
            print(f"(a) kexec, benchmark, reboot, two power cuts, upload: {elapsed(t)}", flush=True)

            # (b) A kernel that panics: panic= brings the machine back; the
            # power goes between saving the failure and telling the service.
            t = time.monotonic()
            job = queue(1, "rdinit=/kperf/none")
            at = cut_power_at(PSTORE_CLEARED, job, vm, len(vm.console_text()), JOB_TIMEOUT_S)
            vm.wait_console("reporting the failure kept in the state directory", RESET_TIMEOUT_S, at)
            panic = final(job, vm)
            assert panic.status == Job.Status.FAILED and panic.failure_kind == "boot", panic.failure_message
            assert panic.attempt == 1
            assert "Kernel panic" in panic.console_log and "No working init found" in panic.console_log
            assert "Rebooting in 10 seconds" in panic.console_log, panic.console_log[-4000:]
            print(f"(b) panic, back through panic=, a power cut, then reported: {elapsed(t)}", flush=True)

            # (c) A kernel that hangs without a panic: only the watchdog brings the machine back.
            t = time.monotonic()
            hang = final(queue(2, "rdinit=/kperf/none root=/dev/nonexistent rootwait"), vm)
            assert hang.status == Job.Status.FAILED and hang.failure_kind == "boot", hang.failure_message
            armed = re.search(r"hang ended by the watchdog \(armed for (\d+) s, no panic", hang.failure_message)
            assert armed, hang.failure_message
            # Armed from this boot's own time limit (2 x 0.2 s of spawn, one
            # command, --kexec-boot-seconds 45 twice): not a fixed period.
            assert 90 <= int(armed[1]) <= 120, armed[1]
            assert "Waiting for root device /dev/nonexistent" in hang.console_log, hang.console_log[-4000:]
            assert "Kernel panic" not in hang.console_log
            assert time.monotonic() - t > int(armed[1])
            print(f"(c) hang without a panic, back through the watchdog: {elapsed(t)}", flush=True)

            # Back on Debian the agent heartbeats before it reports the boot:
            # the runner is in service again after the hang, too.
            runner.refresh_from_db()
            assert hang.started is not None and runner.last_heartbeat is not None
            assert runner.last_heartbeat - hang.started > timedelta(seconds=int(armed[1]))

            # (d) A kernel that dies before its ramoops starts: nothing of it in pstore.
            t = time.monotonic()
            early = final(queue(3, "rdinit=/kperf/none ramoops.mem_size=0"), vm)
            assert early.status == Job.Status.FAILED and early.failure_kind == "boot", early.failure_message
            assert early.failure_message.startswith("the kernel under test died before its ramoops started")
            assert "kexec_core: Starting new kernel" in early.console_log, early.console_log[-4000:]
            print(f"(d) died before ramoops, told by the handover: {elapsed(t)}", flush=True)
            # One attempt each: no outcome was lost, no kernel booted twice.
            assert not Job.objects.filter(runner=runner, attempt__gt=1).exists()
            print(f"whole VM session: {elapsed(vm.started)}", flush=True)
        except BaseException:
            print(f"--- the machine's serial console ({vm.console}) ---\n{vm.console_text()[-20000:]}")
            raise
