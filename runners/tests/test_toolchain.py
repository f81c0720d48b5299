"""Static binaries per arch, cached by source, compiler and arch."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from kperf_runner import toolchain
from kperf_runner.toolchain import ToolchainError, compile_static, host_arch

ELF_MACHINE = {"x86_64": 62, "arm64": 183}


def _elf(path: Path) -> tuple[int, bool]:
    """(e_machine, statically linked) of an ELF file."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF"
    (machine,) = struct.unpack_from("<H", data, 18)
    return machine, b"/ld-linux" not in data and b"ld-linux-" not in data[:4096]


def test_native_binaries_are_static_and_cached(runner_state: Path) -> None:
    first = compile_static("spawn.c", host_arch(), runner_state)
    assert _elf(first) == (ELF_MACHINE[host_arch()], True)
    mtime = first.stat().st_mtime_ns
    assert compile_static("spawn.c", host_arch(), runner_state) == first
    assert first.stat().st_mtime_ns == mtime


@pytest.mark.parametrize("arch", [arch for arch in ELF_MACHINE if arch != host_arch()])
def test_cross_binaries_are_built_for_their_arch(runner_state: Path, arch: str) -> None:
    try:
        binary = compile_static("init.c", arch, runner_state)
    except ToolchainError as error:
        pytest.skip(str(error))
    assert _elf(binary) == (ELF_MACHINE[arch], True)


def test_an_edited_source_gets_a_new_binary(
    runner_state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    csrc = tmp_path / "csrc"
    csrc.mkdir()
    (csrc / "hello.c").write_text("int main(void) { return 0; }\n")
    monkeypatch.setattr(toolchain, "CSRC", csrc)
    first = compile_static("hello.c", host_arch(), runner_state)
    (csrc / "hello.c").write_text("int main(void) { return 1; }\n")
    second = compile_static("hello.c", host_arch(), runner_state)
    assert first != second and first.name == second.name == "hello"


def test_an_edited_shared_header_gets_a_new_binary(
    runner_state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    csrc = tmp_path / "csrc"
    csrc.mkdir()
    (csrc / "kperf_bench.h").write_text("#define ANSWER 0\n")
    (csrc / "hello.c").write_text('#include "kperf_bench.h"\nint main(void) { return ANSWER; }\n')
    monkeypatch.setattr(toolchain, "CSRC", csrc)
    first = compile_static("hello.c", host_arch(), runner_state)
    (csrc / "kperf_bench.h").write_text("#define ANSWER 1\n")
    second = compile_static("hello.c", host_arch(), runner_state)
    assert first != second
    assert subprocess.run([str(second)], check=False).returncode == 1


def test_a_missing_cross_compiler_names_the_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    foreign = "arm64" if host_arch() == "x86_64" else "x86_64"
    monkeypatch.setattr(toolchain, "_compilers", {})
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    with pytest.raises(ToolchainError, match=r"no C compiler for .* apt-get install gcc-"):
        toolchain.find_compiler(foreign)


def test_a_compile_error_is_reported_with_the_compiler_output(
    runner_state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    csrc = tmp_path / "csrc"
    csrc.mkdir()
    (csrc / "broken.c").write_text("int main(void) { return nope; }\n")
    monkeypatch.setattr(toolchain, "CSRC", csrc)
    with pytest.raises(
        ToolchainError,
        match=r"(?s)compiling broken.c for .* failed:\n.*nope. undeclared",
    ):
        compile_static("broken.c", host_arch(), runner_state)


def test_unknown_arches_are_refused() -> None:
    with pytest.raises(ToolchainError, match="unknown arch 'riscv64'; kperf knows arm64, x86_64"):
        toolchain.normalize_arch("riscv64")


@pytest.mark.parametrize("source", sorted(p.name for p in toolchain.CSRC.glob("*.c")))
def test_the_c_sources_compile_without_warnings(source: str) -> None:
    compiler = toolchain.find_compiler(host_arch())
    flags = ["-Wformat=2", "-Wshadow", "-Werror", "-fsyntax-only"]
    run = subprocess.run(
        [compiler.path, *toolchain.CFLAGS, *flags, str(toolchain.CSRC / source)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
