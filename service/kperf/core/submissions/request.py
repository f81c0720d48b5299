"""The submission request: one schema for the REST API's body and the web form.

Each field a submission takes is declared once, here: its type, its default,
what it means (the OpenAPI document's description and the form's help text)
and its check. POST /api/v1/submissions takes this schema as its body
(kperf.core.web.api.submissions; `kperf submit` goes through it), and the form
at /submissions/new is rendered from it and parses its POST data into it
(kperf.core.web.submission_form). A SubmissionRequest is checked when it is
made, so kperf.core.submissions.pipeline.create_submission only stores one.

A refusal is a pydantic error located at the field at fault. A field's own
check is attached to the field, so pydantic puts the field's name in the
error's `loc`; a check of several fields (a branch or an mbox, the grids the
benchmarks have) raises at the field it blames (`refused`). The API answers
400 `invalid-submission` with that `field`, the form shows the message next to
that field: neither reads the message to find out which field it is about.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from django.conf import settings
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    PrivateAttr,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from kperf.core.builds import patch_series
from kperf.core.lab.boot_params import BootParamsError, clean_boot_params, clean_thp
from kperf.core.models.submissions import BOOT_PARAMS_MAX_LENGTH
from kperf.core.submissions import checks
from kperf.core.submissions.checks import SubmissionError

# The pydantic error type of a refusal: input of the right shape that kperf
# will not act on (the API answers it with 400 `invalid-submission`, not 422).
REFUSED = "invalid_submission"

T = TypeVar("T")


def refusal(detail: str) -> PydanticCustomError:
    # The detail goes in through the context, so braces in a quoted value are not taken for placeholders.
    return PydanticCustomError(REFUSED, "{detail}", {"detail": detail})


def refused(field: str, detail: str, value: Any = None) -> ValidationError:
    """A refusal located at `field`, for a check of several fields: raised from a model validator, pydantic
    keeps its location (below the model's own, for a model inside another)."""
    return ValidationError.from_exception_data(
        "SubmissionRequest", [InitErrorDetails(type=refusal(detail), loc=(field,), input=value)]
    )


def _checked(check: Callable[[T], T]) -> AfterValidator:
    """A field's own check: a SubmissionError it raises becomes a refusal that pydantic locates at the field."""

    def run(value: T) -> T:
        try:
            return check(value)
        except SubmissionError as e:
            raise refusal(str(e)) from None

    return AfterValidator(run)


def _one_or_many(value: Any) -> Any:
    # docs/benchmarks.md promises `"benchmarks": "all"`: one name as a plain
    # string means the list of that name (kperf.core.benchmarks.expand then
    # turns "all" into every benchmark). Anything else is left to the list's
    # own validation, so a number still answers 422 saying what was expected.
    return [value] if isinstance(value, str) else value


# A list of benchmark names, or one name as a string ("all", "spawn").
BenchmarkNames = Annotated[list[str], BeforeValidator(_one_or_many)]
# A list of grid names, or one as a string ("scaling").
GridNames = Annotated[list[str], BeforeValidator(_one_or_many)]


def _tree(url: str) -> str:
    # Left empty: the default tree for a series, refused for a branch (SubmissionRequest._across).
    return checks.validate_tree(url) if url else url


def _branch(ref: str) -> str:
    # Left empty: an mbox must be given instead (SubmissionRequest._across).
    return checks.validate_ref(ref, "branch") if ref else ref


def _base(ref: str) -> str:
    return checks.validate_ref(ref, "base")


def _mail_to(addresses: list[str]) -> list[str]:
    try:
        return patch_series.clean_mail_to(addresses)
    except patch_series.SeriesError as e:
        raise SubmissionError(str(e)) from None


def _boot_params(text: str) -> str:
    try:
        return clean_boot_params(text)
    except BootParamsError as e:
        raise SubmissionError(str(e)) from None


def _thp(mode: str) -> str:
    try:
        return clean_thp(mode)
    except BootParamsError as e:
        raise SubmissionError(str(e)) from None


# The mbox is text in a JSON body (its bytes in base64 as the API's mbox_b64) and a file in the form.
Mbox = Annotated[bytes | None, WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "null"}]})]


class SubmissionRequest(BaseModel):
    """What a submission asks for (docs/submitting.md); the form shows the fields in this order."""

    tree: Annotated[
        str,
        Field(
            title="Tree URL",
            description="the git tree: https://, or what else the service allows (docs/submitting.md, Tree URLs); "
            "empty for a patch series: the service's default tree (KPERF_DEFAULT_TREE)",
        ),
        _checked(_tree),
    ] = ""
    branch: Annotated[
        str,
        Field(title="Branch (head)", description="the branch, tag or commit sha to test; or give a patch series"),
        _checked(_branch),
    ] = ""
    mbox: Annotated[
        Mbox,
        Field(
            title="Patch series (mbox)",
            description="the .mbx file `b4 am` writes, or `git format-patch` output, applied on the base with "
            "git am (docs/submitting.md, Patch series)",
        ),
    ] = None
    mail_to: Annotated[
        list[str],
        Field(
            title="Also mail the result to",
            description="e-mail addresses besides yours (a series' answer goes in reply to its cover letter); "
            "each one confirmed on the Addresses page (POST /addresses) or allowed by this service",
        ),
        _checked(_mail_to),
    ] = []
    base: Annotated[str, Field(title="Base", description="branch, tag or sha to compare against"), _checked(_base)]
    benchmarks: Annotated[
        BenchmarkNames,
        Field(title="Benchmarks", description="benchmark names, or all for every one (docs/benchmarks.md)"),
        _checked(checks.validate_benchmarks),
    ] = ["spawn"]
    grid: Annotated[str, Field(title="Grid", description="one grid (or several as grids, not both)")] = ""
    grids: Annotated[
        GridNames,
        Field(
            title="Grids",
            description="each benchmark runs those of these grids it has, a comparison per grid "
            "(docs/benchmarks.md); none: quick",
        ),
    ] = []
    profile: Annotated[
        str,
        Field(
            title="Configuration profile",
            description="the configuration both kernels are built with (docs/kernels.md): tiny (fast), mm "
            "(memcg, swap on zram, NUMA, MGLRU) or distro (the distribution's); empty: each machine class's own",
        ),
        _checked(checks.validate_profile),
    ] = ""
    arches: Annotated[
        list[str],
        Field(title="Arches", description="the architectures to measure on, each one a machine class of this service"),
        _checked(checks.validate_arches),
    ] = ["x86_64"]
    min_effect_pct: Annotated[
        float | None,
        Field(
            title="Practical threshold (%)",
            description="0.05 to 50: a smaller change is shown, never called a regression; "
            "empty: 0.5 on the instruction clock, 3 on the wall clock",
        ),
        _checked(checks.validate_min_effect),
    ] = None
    boot_params: Annotated[
        str,
        Field(
            title="Boot parameters",
            description="kernel command line words added last to every boot of both kernels, e.g. mitigations=off "
            f"(at most {BOOT_PARAMS_MAX_LENGTH} characters; docs/submitting.md, Boot parameters and THP)",
        ),
        _checked(_boot_params),
    ] = ""
    thp: Annotated[
        str,
        Field(
            title="Transparent huge pages",
            description="always, madvise or never; empty for the kernel's default",
        ),
        _checked(_thp),
    ] = ""

    # The series read from the mbox, once it is checked.
    _series: patch_series.Series | None = PrivateAttr(default=None)

    @property
    def series(self) -> patch_series.Series | None:
        return self._series

    @property
    def head_ref(self) -> str:
        """What the head is called: the branch, or the series' label."""
        return self._series.label if self._series is not None else self.branch

    @model_validator(mode="after")
    def _across(self) -> SubmissionRequest:
        """The checks of several fields (once each field passed its own), each refusal located at the field
        it blames. The fields are left as they are stored: one grid becomes the list of grids."""
        if self.mbox is not None:
            if self.branch:
                raise refused("mbox", "give a branch or an mbox (a patch series), not both")
            try:
                self._series = patch_series.parse(self.mbox, settings.KPERF_MAX_MBOX_BYTES)
            except patch_series.SeriesError as e:
                raise refused("mbox", str(e)) from None
        elif not self.branch:
            raise refused("branch", "give a branch to test, or a patch series (an mbox) to apply on the base", "")
        if not self.tree:
            # A series is usually posted against mainline: the service's default tree.
            try:
                self.tree = checks.validate_tree(settings.KPERF_DEFAULT_TREE if self._series else "")
            except SubmissionError as e:
                raise refused("tree", str(e), "") from None
        try:
            runs = checks.validate_runs(self.benchmarks, self.grid, self.grids, self.arches, self.profile)
        except SubmissionError as e:
            raise refused(e.field, str(e), getattr(self, e.field)) from None
        self.grid, self.grids = "", runs.grids
        return self
