"""The cached Debian runner image (kperf_testing.baremetal): built once, never half.

The real build (debootstrap, minutes) runs in tests/test_kexec_runner.py;
here the build steps are replaced to check the cache around them: an
interrupted build leaves nothing that counts as done, the next run builds
again, and a finished image is reused and replaces the ones of older inputs.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from kperf_testing import baremetal


@pytest.fixture
def fake_build(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    calls = {"bootstrap": 0, "build": 0, "fail": 0}
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(baremetal, "missing_host_tools", lambda: [])

    def bootstrap(base: Path, log: object) -> Path:
        calls["bootstrap"] += 1
        tarball = base / f"debootstrap-{baremetal.bootstrap_key()}.tar"
        tarball.write_bytes(b"tar")
        return tarball

    def build(scratch: Path, tarball: Path, key: str) -> None:
        calls["build"] += 1
        for name in ("root.raw", "vmlinuz", "initrd.img"):
            (scratch / name).write_bytes(b"x")
        if calls["fail"]:
            calls["fail"] -= 1
            raise KeyboardInterrupt  # killed before the manifest was written
        (scratch / "image.json").write_text(
            f'{{"key": "{key}", "root": "root.raw", "kernel": "vmlinuz", "initrd": "initrd.img"}}'
        )

    monkeypatch.setattr(baremetal, "_bootstrap_tarball", bootstrap)
    monkeypatch.setattr(baremetal, "_build", build)
    return calls


def test_an_interrupted_build_is_not_an_image_and_the_next_run_builds_it(
    tmp_path: Path, fake_build: dict[str, int]
) -> None:
    fake_build["fail"] = 1
    with pytest.raises(KeyboardInterrupt):
        baremetal.ensure_debian_image(tmp_path, log=lambda _: None)
    base = tmp_path / "baremetal"
    assert not (base / baremetal.image_key()).exists()
    assert not list(base.glob("*.tmp-*")), "the scratch directory of the interrupted build is left"

    image = baremetal.ensure_debian_image(tmp_path, log=lambda _: None)
    assert image.root == base / baremetal.image_key() / "root.raw" and image.key == baremetal.image_key()
    assert fake_build["build"] == 2
    # Done once: a later run (or a concurrent one, after the lock) reuses it.
    assert baremetal.ensure_debian_image(tmp_path, log=lambda _: None) == image
    assert fake_build["build"] == 2


def test_concurrent_runs_build_once(tmp_path: Path, fake_build: dict[str, int]) -> None:
    images = []

    def run() -> None:
        images.append(baremetal.ensure_debian_image(tmp_path, log=lambda _: None))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(images) == 4 and len(set(images)) == 1
    assert fake_build["build"] == 1


def test_a_new_image_replaces_those_of_older_inputs(tmp_path: Path, fake_build: dict[str, int]) -> None:
    base = tmp_path / "baremetal"
    old = base / "0123456789abcdef"
    old.mkdir(parents=True)
    (old / "image.json").write_text("{}")
    (base / "debootstrap-fedcba9876543210.tar").write_bytes(b"old")
    unfinished = base / "aaaaaaaaaaaaaaaa.tmp-1"  # someone else's build under way: not ours to remove
    unfinished.mkdir()
    image = baremetal.ensure_debian_image(tmp_path, log=lambda _: None)
    assert not old.exists() and not (base / "debootstrap-fedcba9876543210.tar").exists()
    assert unfinished.exists() and image.root.is_file()


def test_the_key_follows_every_input(monkeypatch: pytest.MonkeyPatch) -> None:
    key, bootstrap = baremetal.image_key(), baremetal.bootstrap_key()
    monkeypatch.setitem(baremetal.CONFIG_FILES, "etc/hostname", "other\n")
    assert baremetal.image_key() != key and baremetal.bootstrap_key() == bootstrap
    monkeypatch.undo()
    monkeypatch.setattr(baremetal, "PACKAGES", (*baremetal.PACKAGES, "strace"))
    assert baremetal.image_key() != key and baremetal.bootstrap_key() != bootstrap
