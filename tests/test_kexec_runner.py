"""The kexec backend on a machine of its own: a Debian VM standing in for a lab box.

kperf.testing.baremetal boots a Debian bookworm machine under QEMU (TCG)
with the systemd unit an operator installs (runners/systemd/kperf-runner.service),
an i6300esb hardware watchdog and RAM reserved for ramoops. The agent in it
talks to a live kperf service on this host (10.0.2.2 from the guest) and
works through three jobs of a bare-metal machine class, one VM session:

(a) it kexecs into the fixture kernel, runs spawn, the kernel reboots the
    machine back into Debian, and the agent uploads: done, samples, backend kexec;
(b) a kernel that panics (no init) comes back through panic=: a `boot`
    failure whose console has the panic, and the runner goes on;
(c) a kernel that hangs after its panic (panic=0) comes back through the
    watchdog's reset: `boot` again, with its console, and the runner goes on.

Jobs (b) and (c) belong to submissions with boot parameters of their own
(Submission.boot_params), which their claims carry to the runner. rdinit=
and panic= are words kperf refuses from people (kperf.core.boot_params), so
the test sets them on the submissions directly, as an operator could.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from kperf.testing.baremetal import (
    HOST_FROM_GUEST,
    RAMOOPS_REGION,
    Machine,
    ensure_debian_image,
    running_machine,
)

pytestmark = [pytest.mark.kernel, pytest.mark.e2e]

WATCHDOG_S = 60
# TCG boots of Debian take about a minute; a job is a kexec, a test kernel
# run and a reboot back, plus the watchdog's time for the hang.
BOOT_TIMEOUT_S = 240
JOB_TIMEOUT_S = 420


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
    from kperf.core.artifacts import sha256_file
    from kperf.core.models import BootRecord, Job, KernelBuild, MachineClass, Runner, Sample, Submission, Tree
    from kperf.core.models.lab import Clock
    from kperf_kbuild.testing import build_fixture_kernel

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
            grid="quick",
            arches=["x86_64"],
            boot_params=boot_params,
            status=Submission.Status.TESTING,
        )
        job = Job.queue_one_boot(build, mclass, "spawn", "quick", params, seq, submission=sub, side="base")
        assert job.boot_params == boot_params
        return job

    def final(job: Job, vm: Machine) -> Job:
        def done() -> Job | None:
            job.refresh_from_db()
            return job if job.is_final else None

        result: Job = wait_for(f"end of job {job.pk}", done, JOB_TIMEOUT_S, vm)
        assert result.runner_id == runner.pk
        return result

    env = {
        "KPERF_SERVER": f"http://{HOST_FROM_GUEST}:{port}",
        "KPERF_RUNNER_TOKEN": token,
        "KPERF_RUNNER_NAME": runner.name,
        "KPERF_MACHINE_CLASS": mclass.name,
        "KPERF_ARCH": "x86_64",
        "KPERF_KEXEC_RAMOOPS": RAMOOPS_REGION,
        "KPERF_KEXEC_CMDLINE": "console=ttyS0,115200",
        "KPERF_KEXEC_WATCHDOG": "/dev/watchdog",
        "KPERF_KEXEC_WATCHDOG_TIMEOUT": str(WATCHDOG_S),
        # A TCG VM jumps, boots the fixture kernel and reboots in well under
        # a minute: with that figure a hang is told apart in minutes, not five.
        "KPERF_RUNNER_ARGS": "--poll 2 --kexec-boot-seconds 45",
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

            # (a) A kernel that runs the benchmark and reboots the machine.
            t = time.monotonic()
            ok = final(queue(0), vm)
            assert ok.status == Job.Status.DONE, f"{ok.failure_kind}: {ok.failure_message}\n{ok.console_log[-4000:]}"
            [boot] = BootRecord.objects.filter(job=ok)
            assert boot.environment["backend"] == "kexec", boot.environment
            assert boot.environment["clock"] == "wall"
            assert "ramoops.mem_address=0x30000000" in boot.environment["kernel_cmdline"]
            assert boot.environment["kernel_release"].startswith("6.1"), boot.environment
            values = list(Sample.objects.filter(boot_record=boot).values_list("value", flat=True))
            assert len(values) == 2 and all(v > 0 for v in values), values
            assert "KPERF-DONE" in ok.console_log
            print(f"(a) kexec, benchmark, reboot, upload: {elapsed(t)}", flush=True)

            # (b) A kernel that panics: panic= brings the machine back.
            t = time.monotonic()
            panic = final(queue(1, "rdinit=/kperf/none"), vm)
            assert panic.status == Job.Status.FAILED and panic.failure_kind == "boot", panic.failure_message
            assert "Kernel panic" in panic.console_log and "No working init found" in panic.console_log
            assert "Rebooting in 10 seconds" in panic.console_log, panic.console_log[-4000:]
            print(f"(b) panic, back through panic=: {elapsed(t)}", flush=True)

            # (c) A kernel that hangs: only the watchdog brings the machine back.
            t = time.monotonic()
            hang = final(queue(2, "rdinit=/kperf/none panic=0"), vm)
            assert hang.status == Job.Status.FAILED and hang.failure_kind == "boot", hang.failure_message
            assert "No working init found" in hang.console_log, hang.console_log[-4000:]
            assert "Rebooting in" not in hang.console_log
            assert time.monotonic() - t > WATCHDOG_S
            print(f"(c) hang, back through the watchdog: {elapsed(t)}", flush=True)

            # Back on Debian the agent heartbeats before it reports the boot:
            # the runner is in service again after the hang, too.
            runner.refresh_from_db()
            assert hang.started is not None and runner.last_heartbeat is not None
            assert runner.last_heartbeat - hang.started > timedelta(seconds=WATCHDOG_S)
            print(f"whole VM session: {elapsed(vm.started)}", flush=True)
        except BaseException:
            print(f"--- the machine's serial console ({vm.console}) ---\n{vm.console_text()[-20000:]}")
            raise
