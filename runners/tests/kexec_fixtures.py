"""Shared test scenarios, moved out of test_kexec_backend.py so no test module imports another."""

from __future__ import annotations

from kperf_runner.backends.kexec import Ramoops
from kperf_runner.benchmarks import get_benchmark

RAMOOPS = Ramoops(0x30000000, 0x1000000)


SPAWN_PARAMS = {"duration": 0.05, "iterations": 2, "extra_vmas": [0, 10]}


def _spawn_commands() -> list[list[str]]:
    bench = get_benchmark("spawn")
    return bench.command(bench.validate(SPAWN_PARAMS), "/kperf/bin")


NONCE = "5f0e3c2a9b7d4e1f8a6c0b2d4e6f8a0c"


def _with_nonce(transcript: bytes, nonce: str = NONCE) -> bytes:
    """The transcript as init writes it on a kernel booted with kperf.boot=<nonce> (the host's has none)."""
    lines = transcript.decode().splitlines(keepends=True)
    return "".join(
        line.rstrip("\n") + f" kperf.boot={nonce}\n" if line.startswith("KPERF-ENV kernel_cmdline=") else line
        for line in lines
    ).encode()
