"""What a submission may ask of the boot: extra kernel command line words and a THP mode.

The words are appended last to the command line the runner gives the test
kernel (docs/runner-protocol.md, "claim"), so a later word wins over kperf's
own. Words kperf itself relies on are refused: without them the runner
loses the console it reads results from, the init that runs the benchmark,
or the way back from a crashed kernel. Only the people's paths (API, web
form, CLI) are checked here; the model stores what it is given, so a test
or an operator can still boot a kernel that panics on purpose.
"""

from __future__ import annotations

import re

from kperf.core.models.submissions import BOOT_PARAMS_MAX_LENGTH as MAX_LENGTH
from kperf.core.models.submissions import Thp


class BootParamsError(ValueError):
    """Bad boot parameters or THP mode; the message says what was wrong and what to do."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


# (prefix, why kperf keeps it): a word equal to the prefix without its "=",
# or starting with the prefix, is refused.
OWNED = (
    ("console=", "the runner reads the benchmark's results from the console it sets"),
    ("init=", "kperf's own init runs the benchmark"),
    ("rdinit=", "kperf's own init in the initramfs runs the benchmark"),
    ("root=", "the kernel under test runs from kperf's initramfs, not from a disk"),
    ("panic=", "the runner sets how a panicking kernel comes back to it"),
    ("memmap=", "a bare-metal runner reserves memory for ramoops with it"),
    ("ramoops.", "a bare-metal runner reads a crashed kernel's console through ramoops"),
    ("kperf.", "the kperf.* words are how the runner talks to its init"),
    ("transparent_hugepage=", "the THP mode is the thp field (always, madvise or never), which kperf records"),
)

# Printable ASCII without quotes, backslash or whitespace: the kernel's own
# parser gives quotes a meaning, and a runner passes the line through
# kexec's --command-line and QEMU's -append unquoted.
_WORD = re.compile(r"[!#-&(-\[\]-~]+")


def clean_boot_params(text: str) -> str:
    """The words of `text`, single-space separated; BootParamsError if one cannot be used."""
    if not isinstance(text, str):
        raise BootParamsError("boot_params must be text: kernel command line words separated by spaces", "boot_params")
    if len(text) > MAX_LENGTH:
        raise BootParamsError(
            f"boot_params is {len(text)} characters; at most {MAX_LENGTH} are taken: leave out what the "
            "comparison does not need",
            "boot_params",
        )
    for char in text:
        if char in "\n\r":
            raise BootParamsError(
                "boot_params must be one line: put every word on it, separated by spaces", "boot_params"
            )
        if char in "\"'`":
            raise BootParamsError(
                f"boot_params may not hold quotes ({char}): kperf passes the words unquoted, so give values "
                "without spaces and without quotes",
                "boot_params",
            )
    words = text.split()
    for word in words:
        if not _WORD.fullmatch(word):
            bad = next(c for c in word if not _WORD.fullmatch(c))
            raise BootParamsError(
                f"boot_params word {word!r} holds {bad!r}: only printable ASCII without quotes or backslashes "
                "is taken; write the word as the kernel's documentation spells it",
                "boot_params",
            )
        for prefix, why in OWNED:
            if word.startswith(prefix) or word == prefix.rstrip("=."):
                raise BootParamsError(
                    f"boot_params word {word!r} is kperf's own: {why}. Leave it out; the other words are kept",
                    "boot_params",
                )
    return " ".join(words)


def clean_thp(mode: str) -> str:
    if mode not in Thp.values:
        choices = ", ".join(v for v in Thp.values if v)
        raise BootParamsError(f"thp must be one of {choices}, or empty for the kernel's default, not {mode!r}", "thp")
    return str(mode)
