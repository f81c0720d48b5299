"""A Debian machine in QEMU standing in for a bare-metal kperf runner (tests).

The kexec backend runs on a machine with its own kernel, systemd, a hardware
watchdog and RAM that survives a warm reset. A TCG virtual machine gives all
of that: Debian bookworm's kernel and systemd, QEMU's i6300esb watchdog set to
reset the machine, and guest RAM that a reset leaves alone (ramoops).

Two parts:

- ensure_debian_image(cache): a debootstrap root filesystem as a raw ext4
  image, plus its kernel and initrd, built once and cached under
  <cache>/baremetal/<key>/ (key = digest of everything the build uses:
  packages, configuration files, commands, the systemd unit). The build runs
  under a file lock in a scratch directory that is renamed into place only
  when complete, so concurrent runs build it once and an interrupted build
  never counts as done.
- running_machine(image, workdir, env): boots it (qcow2 overlay per run, so
  the cached image stays pristine) with a small "seed" disk carrying what a
  test decides: the agent copied from runners/kperf_runner and the unit's
  environment file. A oneshot unit of the test image (kperf-seed.service)
  copies them into place before kperf-runner.service starts, at every boot,
  as an operator's provisioning would; the agent is not baked into the
  cached image, so editing it does not cost an image build.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kperf_kbuild.host import file_lock

REPO_ROOT = Path(__file__).resolve().parents[2]
AGENT_DIR = REPO_ROOT / "runners" / "kperf_runner"
UNIT_FILE = REPO_ROOT / "runners" / "systemd" / "kperf-runner.service"

MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm"
PACKAGES = (
    "linux-image-amd64",
    "initramfs-tools",
    "kmod",
    "systemd",
    "systemd-sysv",
    "udev",
    "kexec-tools",
    "python3",
    "gcc",
    "libc6-dev",
    "iproute2",
    "ca-certificates",
)
# Bump when the build changes in a way the inputs below do not show.
IMAGE_FORMAT = 1
IMAGE_SIZE = "3G"

# RAM for ramoops, the same on the machine's and on the test kernel's command
# line (the agent adds it to the test kernel's itself from --kexec-ramoops).
RAMOOPS_REGION = "0x30000000:0x1000000"
# max_reason=4: the machine's kernel dumps its log as it goes down (showing a kexec's handover).
RAMOOPS_CMDLINE = (
    "memmap=16M$0x30000000 ramoops.mem_address=0x30000000 ramoops.mem_size=0x1000000 "
    "ramoops.record_size=0x40000 ramoops.console_size=0x200000 ramoops.pmsg_size=0x800000 ramoops.ecc=0 "
    "ramoops.max_reason=4"
)
MACHINE_CMDLINE = f"root=/dev/vda rw console=ttyS0,115200 watchdog.stop_on_reboot=0 {RAMOOPS_CMDLINE}"
# QEMU user networking: the guest is 10.0.2.15, the host's loopback is 10.0.2.2.
HOST_FROM_GUEST = "10.0.2.2"
SEED_LABEL = "kperf-seed"

# Files written into the root filesystem after debootstrap.
CONFIG_FILES: dict[str, str] = {
    "etc/hostname": "kperf-bm\n",
    "etc/hosts": "127.0.0.1 localhost\n127.0.1.1 kperf-bm\n",
    "etc/fstab": (
        "/dev/vda / ext4 rw,errors=remount-ro 0 1\n"
        # The per-run seed disk; nofail: the image also boots without one.
        f"LABEL={SEED_LABEL} /mnt/kperf-seed ext4 ro,nofail,x-systemd.device-timeout=60s 0 0\n"
    ),
    "etc/systemd/network/10-qemu.network": (
        "[Match]\nName=en* eth*\n\n[Network]\nAddress=10.0.2.15/24\nGateway=10.0.2.2\nDNS=10.0.2.3\n"
    ),
    # systemd must not arm the watchdog on reboot (and so disarm it on the
    # way): the agent owns /dev/watchdog across the kexec.
    "etc/systemd/system.conf.d/kperf-watchdog.conf": "[Manager]\nRuntimeWatchdogSec=off\nRebootWatchdogSec=off\n",
    # Not ramoops: the agent loads it, after noting that it does (docs/runners-bare-metal.md).
    "etc/modules-load.d/kperf.conf": "i6300esb\n",
    # Every boot of a TCG machine costs a minute or more, four per test run:
    # an initrd with the three modules the root disk needs (not the 36 MB
    # of "most"), and none of the drivers udev would load for QEMU's PC
    # chipset and a CPU model that offers virtualisation.
    "etc/initramfs-tools/conf.d/kperf.conf": "MODULES=list\n",
    "etc/initramfs-tools/modules": "virtio_pci\nvirtio_blk\next4\n",
    "etc/modprobe.d/kperf-vm.conf": "".join(
        f"blacklist {m}\n"
        for m in (
            "floppy",
            "ata_piix",
            "pata_acpi",
            "parport_pc",
            "ppdev",
            "pcspkr",
            "serio_raw",
            "kvm",
            "kvm_amd",
            "kvm_intel",
            "cfg80211",
            "bochs",
            "snd_pcsp",
            "joydev",
        )
    ),
    # Test image only: copy the seed disk's agent and environment into place.
    "etc/systemd/system/kperf-seed.service": (
        "[Unit]\n"
        "Description=kperf test seed: the agent and its environment file\n"
        "RequiresMountsFor=/mnt/kperf-seed\n"
        "ConditionPathExists=/mnt/kperf-seed/kperf-runner.env\n"
        "Before=kperf-runner.service\n\n"
        "[Service]\n"
        "Type=oneshot\n"
        "RemainAfterExit=yes\n"
        "ExecStart=/bin/sh -ec 'install -m 0600 /mnt/kperf-seed/kperf-runner.env /etc/kperf-runner.env; "
        "rm -rf /opt/kperf-runner/kperf_runner; mkdir -p /opt/kperf-runner; "
        "cp -a /mnt/kperf-seed/kperf_runner /opt/kperf-runner/'\n\n"
        "[Install]\nWantedBy=multi-user.target\n"
    ),
    "etc/systemd/system/kperf-runner.service.d/test-seed.conf": (
        "[Unit]\nRequires=kperf-seed.service\nAfter=kperf-seed.service\n\n"
        # The agent's log on the serial console too: a failing test prints it.
        "[Service]\nStandardOutput=journal+console\nStandardError=journal+console\n"
    ),
    "etc/systemd/system/kperf-runner.service": UNIT_FILE.read_text() if UNIT_FILE.is_file() else "",
}
# Run in the chroot, in order.
CHROOT_COMMANDS: tuple[tuple[str, ...], ...] = (
    # kexec-tools asks (debconf) whether to load a kernel for kexec at boot,
    # which turns every reboot into a kexec into that kernel; the agent loads
    # its own. debootstrap answered with the default (yes): preseed no and
    # let the package write /etc/default/kexec again from that answer.
    ("sh", "-c", "echo 'kexec-tools kexec-tools/load_kexec boolean false' | debconf-set-selections"),
    ("rm", "-f", "/etc/default/kexec"),
    ("dpkg-reconfigure", "-f", "noninteractive", "kexec-tools"),
    ("systemctl", "disable", "kexec-load.service"),
    ("update-initramfs", "-u", "-k", "all"),
    # The agent reads /sys/fs/pstore itself; systemd-pstore would move it away.
    ("systemctl", "mask", "systemd-pstore.service"),
    # Work a lab box does not need, and that a TCG machine pays for dearly.
    (
        "systemctl",
        "disable",
        "apt-daily.timer",
        "apt-daily-upgrade.timer",
        "dpkg-db-backup.timer",
        "e2scrub_all.timer",
        "fstrim.timer",
        "getty@tty1.service",
        "e2scrub_reap.service",
    ),
    ("systemctl", "enable", "systemd-networkd.service", "kperf-seed.service", "kperf-runner.service"),
    ("apt-get", "clean"),
)


class ImageError(RuntimeError):
    """The Debian image could not be built; the message says why and what to do."""


@dataclass(frozen=True)
class DebianImage:
    root: Path  # raw ext4 image of the root filesystem
    kernel: Path
    initrd: Path
    key: str


def _digest(inputs: dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def bootstrap_key() -> str:
    """Digest of what debootstrap makes: the packages and where they come from."""
    return _digest({"format": IMAGE_FORMAT, "mirror": MIRROR, "suite": SUITE, "packages": PACKAGES})


def image_key() -> str:
    """Digest of every input of the build: a change to any of them builds a new image."""
    return _digest(
        {"bootstrap": bootstrap_key(), "size": IMAGE_SIZE, "files": CONFIG_FILES, "commands": CHROOT_COMMANDS}
    )


def missing_host_tools() -> list[str]:
    """apt packages this host lacks to build the image and boot it."""
    tools = {
        "debootstrap": "debootstrap",
        "mkfs.ext4": "e2fsprogs",
        "qemu-img": "qemu-utils",
        "qemu-system-x86_64": "qemu-system-x86",
    }
    found = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return sorted({pkg for tool, pkg in tools.items() if shutil.which(tool, path=found) is None})


def _load(done: Path) -> DebianImage | None:
    manifest = done / "image.json"
    if not manifest.is_file():
        return None
    names = json.loads(manifest.read_text())
    image = DebianImage(done / names["root"], done / names["kernel"], done / names["initrd"], names["key"])
    return image if all(p.is_file() for p in (image.root, image.kernel, image.initrd)) else None


def ensure_debian_image(cache_dir: Path, log: Callable[[str], None] = print) -> DebianImage:
    """The cached image for this build's inputs, built first if there is none."""
    if os.geteuid() != 0:
        raise ImageError("building the Debian test image needs root (debootstrap, chroot, device nodes)")
    missing = missing_host_tools()
    if missing:
        raise ImageError(f"this host lacks {', '.join(missing)}: apt-get install {' '.join(missing)}")
    base = Path(cache_dir) / "baremetal"
    base.mkdir(parents=True, exist_ok=True)
    key = image_key()
    done = base / key
    with file_lock(base / f"{key}.lock"):
        image = _load(done)
        if image is not None:
            return image
        # Whatever an interrupted build left: not done, never reused.
        for stale in base.glob(f"{key}.tmp-*"):
            _remove_tree(stale)
        if done.exists():
            _remove_tree(done)
        tarball = _bootstrap_tarball(base, log)
        scratch = base / f"{key}.tmp-{os.getpid()}"
        scratch.mkdir()
        started = time.monotonic()
        try:
            _build(scratch, tarball, key)
            os.rename(scratch, done)
        except BaseException:
            _remove_tree(scratch)
            raise
        log(f"Debian image {key} built in {time.monotonic() - started:.0f} s")
        _prune(base, keep={key, f"debootstrap-{bootstrap_key()}.tar"})
        image = _load(done)
        assert image is not None
        return image


def _prune(base: Path, keep: set[str]) -> None:
    """Drop the images and debootstrap tarballs of earlier inputs (a gigabyte each).

    Only finished ones whose lock nobody holds: a run still building one is
    left alone, and QEMU keeps a removed image open until it exits.
    """
    for path in base.iterdir():
        name = path.name
        finished = (path.is_dir() and (path / "image.json").is_file()) or (
            name.startswith("debootstrap-") and name.endswith(".tar")
        )
        if name in keep or not finished:
            continue
        lock = base / f"{name.removesuffix('.tar')}.lock"
        with lock.open("a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            if path.is_dir():
                _remove_tree(path)
            else:
                path.unlink()


def _run(argv: list[str], what: str, timeout: float = 1800) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-4000:]
        raise ImageError(f"{what} failed (exit {proc.returncode}): {' '.join(argv)}\n{tail}")


def _bootstrap_tarball(base: Path, log: Callable[[str], None]) -> Path:
    """debootstrap's tree as a tarball, cached apart from the image: changing
    a configuration file or the unit then costs a minute, not a debootstrap."""
    key = bootstrap_key()
    tarball = base / f"debootstrap-{key}.tar"
    with file_lock(base / f"debootstrap-{key}.lock"):
        if tarball.is_file():
            return tarball
        for stale in base.glob(f"debootstrap-{key}.tmp-*"):
            _remove_tree(stale)  # an interrupted build's
        scratch = base / f"debootstrap-{key}.tmp-{os.getpid()}"
        scratch.mkdir()
        root = scratch / "root"
        debs = base / "debs"
        debs.mkdir(exist_ok=True)
        log(f"debootstrap {SUITE} from {MIRROR} (a few minutes; .debs kept in {debs})")
        t0 = time.monotonic()
        try:
            argv = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", f"--cache-dir={debs}"]
            try:
                _run([*argv, SUITE, str(root), MIRROR], "debootstrap", timeout=3600)
            finally:
                _unmount_under(root)
            partial = scratch / "root.tar"
            _run(["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-cf", str(partial), "."], "tar")
            os.rename(partial, tarball)
        finally:
            _remove_tree(scratch)
        log(f"debootstrap done in {time.monotonic() - t0:.0f} s")
        return tarball


def _build(scratch: Path, tarball: Path, key: str) -> None:
    if not CONFIG_FILES["etc/systemd/system/kperf-runner.service"]:
        raise ImageError(f"{UNIT_FILE} is missing: the image installs that unit")
    root = scratch / "root"
    root.mkdir()
    _run(["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-xpf", str(tarball)], "tar (unpacking debootstrap)")
    try:
        for rel, text in CONFIG_FILES.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        (root / "mnt" / "kperf-seed").mkdir(parents=True, exist_ok=True)
        for argv in CHROOT_COMMANDS:
            _run(["chroot", str(root), *argv], f"configuring the image ({argv[0]})", timeout=600)
        _check_configured(root)
    finally:
        _unmount_under(root)
    kernel, initrd = _extract_boot(root, scratch)
    raw = scratch / "root.raw"
    subprocess.run(["truncate", "-s", IMAGE_SIZE, str(raw)], check=True)
    _run(["mkfs.ext4", "-q", "-F", "-L", "kperf-root", "-d", str(root), str(raw)], "mkfs.ext4 -d", timeout=900)
    _remove_tree(root)
    (scratch / "image.json").write_text(
        json.dumps({"key": key, "root": raw.name, "kernel": kernel.name, "initrd": initrd.name}) + "\n"
    )


def _check_configured(root: Path) -> None:
    """What the agent and the test rely on, checked in the tree before it becomes an image."""
    problems = []
    default_kexec = root / "etc" / "default" / "kexec"
    if "LOAD_KEXEC=false" not in (default_kexec.read_text() if default_kexec.is_file() else ""):
        problems.append("/etc/default/kexec does not say LOAD_KEXEC=false")
    pstore = root / "etc" / "systemd" / "system" / "systemd-pstore.service"
    if not (pstore.is_symlink() and os.readlink(pstore) == "/dev/null"):
        problems.append("systemd-pstore.service is not masked")
    wants = root / "etc" / "systemd" / "system" / "multi-user.target.wants"
    if not (wants / "kperf-runner.service").is_symlink():
        problems.append("kperf-runner.service is not enabled")
    for tool in ("usr/sbin/kexec", "usr/bin/gcc", "usr/bin/python3"):
        if not (root / tool).exists():
            problems.append(f"/{tool} is missing")
    if problems:
        raise ImageError("the Debian image is not configured as the test needs: " + "; ".join(problems))


def _extract_boot(root: Path, scratch: Path) -> tuple[Path, Path]:
    kernels = sorted((root / "boot").glob("vmlinuz-*"))
    initrds = sorted((root / "boot").glob("initrd.img-*"))
    if len(kernels) != 1 or len(initrds) != 1:
        raise ImageError(f"expected one kernel and one initrd in /boot, found {kernels} and {initrds}")
    kernel, initrd = scratch / "vmlinuz", scratch / "initrd.img"
    shutil.copyfile(kernels[0], kernel)
    shutil.copyfile(initrds[0], initrd)
    return kernel, initrd


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve())
    points = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            point = line.split()[4].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
    return points


def _unmount_under(path: Path) -> None:
    # debootstrap mounts /proc, /sys and (in a container) binds /dev into
    # the target; a killed build leaves them mounted. Deepest first.
    for point in sorted(_mounts_under(path), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


def _remove_tree(path: Path) -> None:
    """Remove a scratch tree, never reaching through a mount into the host's /dev or /proc."""
    if not path.exists():
        return
    _unmount_under(path)
    left = _mounts_under(path)
    if left:
        raise ImageError(f"cannot remove {path}: still mounted there: {', '.join(left)}; unmount them first")
    shutil.rmtree(path)


# --- the machine ------------------------------------------------------------


def write_seed(seed_dir: Path, env: dict[str, str], agent_dir: Path = AGENT_DIR) -> Path:
    """The seed disk of one run: the environment file and a copy of the agent."""
    tree = seed_dir / "tree"
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    lines = []
    for name, value in env.items():
        if "\n" in value or '"' in value or "\\" in value:
            raise ValueError(f"{name}: a value with a newline, quote or backslash does not fit an environment file")
        lines.append(f'{name}="{value}"\n')
    (tree / "kperf-runner.env").write_text("".join(lines))
    shutil.copytree(agent_dir, tree / "kperf_runner", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    image = seed_dir / "seed.img"
    image.unlink(missing_ok=True)
    subprocess.run(["truncate", "-s", "64M", str(image)], check=True)
    _run(["mkfs.ext4", "-q", "-F", "-L", SEED_LABEL, "-d", str(tree), str(image)], "mkfs.ext4 (seed disk)")
    return image


@dataclass
class Machine:
    proc: subprocess.Popen[bytes]
    console: Path
    qmp: Path
    started: float

    def console_text(self) -> str:
        try:
            return self.console.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_console(self, needle: str, timeout: float, after: int = 0) -> int:
        """Wait for `needle` on the console past offset `after`; returns the offset just past it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.console_text()
            at = text.find(needle, after)
            if at >= 0:
                return at + len(needle)
            if not self.alive():
                raise AssertionError(f"QEMU exited ({self.proc.returncode}) before {needle!r} on the console")
            time.sleep(1)
        raise AssertionError(f"{needle!r} not on the console after {timeout:.0f} s")

    def reset(self) -> None:
        """Press the machine's reset button (QMP system_reset): its RAM, and so pstore's records, survive."""
        _qmp(self.qmp, "system_reset")

    def stop(self, timeout: float = 20) -> None:
        """Quit QEMU through its monitor (the overlay is thrown away: no guest shutdown needed)."""
        if not self.alive():
            return
        try:
            _qmp(self.qmp, "quit")
            self.proc.wait(timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _qmp(path: Path, command: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(path))
        reader = sock.makefile("rb")
        reader.readline()  # greeting
        for name in ("qmp_capabilities", command):
            sock.sendall(json.dumps({"execute": name}).encode() + b"\n")
            reader.readline()


def qemu_command(image: DebianImage, overlay: Path, seed: Path, console: Path, qmp: Path) -> list[str]:
    return [
        "qemu-system-x86_64",
        # No VGA, floppy, CD-ROM or parallel port: less for the TCG guest to probe at every boot.
        "-nodefaults",
        "-machine",
        "pc,accel=tcg",
        "-cpu",
        "max",
        "-m",
        "1024",
        "-smp",
        "2",
        "-kernel",
        str(image.kernel),
        "-initrd",
        str(image.initrd),
        "-append",
        MACHINE_CMDLINE,
        "-drive",
        f"file={overlay},format=qcow2,if=virtio,cache=unsafe",
        "-drive",
        f"file={seed},format=raw,if=virtio,readonly=on",
        "-netdev",
        "user,id=net0",
        "-device",
        "virtio-net-pci,netdev=net0",
        "-device",
        "virtio-rng-pci",
        # The machine's hardware watchdog; when it fires, the machine resets
        # (and, with no -no-reboot, comes back to the Debian kernel).
        "-device",
        "i6300esb",
        "-action",
        "watchdog=reset",
        "-display",
        "none",
        "-monitor",
        "none",
        "-serial",
        f"file:{console}",
        "-qmp",
        f"unix:{qmp},server=on,wait=off",
    ]


@contextmanager
def running_machine(image: DebianImage, workdir: Path, env: dict[str, str]) -> Iterator[Machine]:
    """Boot the image with `env` as /etc/kperf-runner.env; QEMU quits when the block ends."""
    workdir.mkdir(parents=True, exist_ok=True)
    overlay = workdir / "overlay.qcow2"
    overlay.unlink(missing_ok=True)
    _run(
        ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(image.root), str(overlay)],
        "qemu-img create (overlay)",
    )
    seed = write_seed(workdir / "seed", env)
    console = workdir / "console.log"
    console.unlink(missing_ok=True)
    # A unix socket path must stay under ~108 bytes: keep it short.
    qmp = Path(f"/tmp/kperf-qmp-{os.getpid()}-{id(workdir)}.sock")
    qmp.unlink(missing_ok=True)
    with (workdir / "qemu.log").open("wb") as qemu_log:
        proc = subprocess.Popen(
            qemu_command(image, overlay, seed, console, qmp), stdout=qemu_log, stderr=subprocess.STDOUT
        )
    machine = Machine(proc, console, qmp, time.monotonic())
    try:
        yield machine
    finally:
        machine.stop()
        qmp.unlink(missing_ok=True)


def _prepare(argv: list[str]) -> int:
    """`python -m kperf_testing.baremetal prepare CACHE`: build the image ahead of the test (conftest.py)."""
    if len(argv) != 2 or argv[0] != "prepare":
        print("usage: python -m kperf_testing.baremetal prepare CACHE_DIR", file=sys.stderr)
        return 2

    def stop(signum: int, _frame: object) -> None:
        # SystemExit unwinds through ensure_debian_image, which removes its
        # scratch tree and (in subprocess.run) kills debootstrap.
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        ensure_debian_image(Path(argv[1]), log=lambda line: print(line, flush=True))
    except ImageError as error:
        print(f"not prepared, the test will say why: {error}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_prepare(sys.argv[1:]))
