"""`make up`'s local accounts and class: the vCPUs its guests boot with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import call_command

from kperf.core.models import MachineClass, Runner

pytestmark = pytest.mark.django_db


def test_make_up_sets_the_local_class_s_vcpus_only_when_asked(tmp_path: Path) -> None:
    creds = tmp_path / "credentials.json"

    def bootstrap(*extra: str) -> dict[str, object]:
        call_command("bootstrap_local", "--credentials-file", str(creds), "--runners", "2", *extra)
        loaded: dict[str, object] = json.loads(creds.read_text())
        return loaded

    first = bootstrap("--vcpus", "2")
    mclass = MachineClass.objects.get(name=first["machine_class"])
    assert mclass.vcpus == 2
    assert set(Runner.objects.filter(machine_class=mclass).values_list("name", flat=True)) == {
        "local-qemu",
        "local-qemu-2",
    }
    # Started again without the option: the class keeps what it was given.
    bootstrap()
    assert MachineClass.objects.get(pk=mclass.pk).vcpus == 2
    bootstrap("--vcpus", "0")
    assert MachineClass.objects.get(pk=mclass.pk).vcpus == 0
