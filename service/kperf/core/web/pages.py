"""Web pages: thin views over the same domain functions the API uses.

What a user may see is decided by kperf.core.access, as for the API; what
they may not see is a 404, as if it did not exist."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from kperf.core import access, benchmarks
from kperf.core.builds import archive, artifacts
from kperf.core.mail.recipients import RecipientError
from kperf.core.models.submissions import BOOT_PARAMS_MAX_LENGTH, Thp
from kperf.core.submissions import pipeline
from kperf.core.web import presenters
from kperf_kbuild.driver import SUPPORTED_ARCHES
from kperf_kbuild.profiles import PROFILES

PAGE_COMMITS = 50


class SubmissionForm(forms.Form):
    tree = forms.CharField(
        label="Tree URL",
        max_length=1000,
        required=False,
        help_text="https://, or what else the service allows (a patch series: empty for the service's default tree)",
    )
    branch = forms.CharField(label="Branch (head)", max_length=255, required=False)
    mbox = forms.FileField(
        label="or a patch series (mbox)",
        required=False,
        help_text="the .mbx file `b4 am` writes, or `git format-patch` output; applied on the base with git am",
    )
    mail_to = forms.CharField(
        label="Also mail the result to",
        max_length=2000,
        required=False,
        help_text="e-mail addresses, separated by commas (a series' answer goes in reply to its cover letter); "
        "each one confirmed on the Addresses page (/addresses) or allowed by this service",
    )
    base = forms.CharField(label="Base", max_length=255, help_text="branch, tag or sha to compare against")
    benchmarks = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, choices=[])
    grids = forms.MultipleChoiceField(
        label="Grids",
        widget=forms.CheckboxSelectMultiple,
        choices=[],
        help_text="each benchmark runs the grids ticked that it has, a comparison per grid (docs/benchmarks.md)",
    )
    profile = forms.CharField(
        label="Configuration profile",
        required=False,
        widget=forms.Select,
        help_text="the configuration both kernels are built with (docs/kernels.md): tiny (fast), mm (memcg, swap "
        "on zram, NUMA, MGLRU) or distro (the distribution's); empty: each machine class's own",
    )
    arches = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, choices=[(a, a) for a in SUPPORTED_ARCHES])
    min_effect_pct = forms.FloatField(
        label="Practical threshold (%)",
        required=False,
        help_text="a smaller change is shown, never called a regression; "
        "empty: 0.5 on the instruction clock, 3 on the wall clock",
    )
    boot_params = forms.CharField(
        label="Boot parameters",
        required=False,
        help_text="kernel command line words added last to every boot of both kernels, e.g. mitigations=off "
        f"(at most {BOOT_PARAMS_MAX_LENGTH} characters)",
    )
    thp = forms.ChoiceField(label="Transparent huge pages", required=False, choices=Thp.choices)

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        names = benchmarks.known()
        self.fields["benchmarks"].choices = [(n, n) for n in names] + [("all", "all")]  # type: ignore[attr-defined]
        self.fields["grids"].choices = [(g, g) for g in benchmarks.grid_names()]  # type: ignore[attr-defined]
        self.fields["profile"].widget.choices = [("", "each machine class's own"), *((p, p) for p in PROFILES)]


@login_required
def submission_list(request: HttpRequest) -> HttpResponse:
    # The user's own submissions; staff see everyone's (?owner=NAME for one user's).
    subs = access.visible_submissions(request.user).select_related("tree", "owner")
    if owner := request.GET.get("owner"):
        subs = subs.filter(owner__username=owner)
    return render(request, "kperf/submission_list.html", {"submissions": subs[:100]})


@login_required
def submission_new(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        form = SubmissionForm(request.POST, request.FILES)
        if form.is_valid():
            upload = form.cleaned_data["mbox"]
            req = pipeline.SubmissionRequest(
                tree_url=form.cleaned_data["tree"],
                head_ref=form.cleaned_data["branch"],
                base_ref=form.cleaned_data["base"],
                benchmarks=form.cleaned_data["benchmarks"],
                grids=form.cleaned_data["grids"],
                arches=form.cleaned_data["arches"],
                min_effect_pct=form.cleaned_data["min_effect_pct"],
                boot_params=form.cleaned_data["boot_params"],
                thp=form.cleaned_data["thp"],
                profile=form.cleaned_data["profile"],
                mbox=upload.read(settings.KPERF_MAX_MBOX_BYTES + 1) if upload else None,
                mail_to=[a for a in form.cleaned_data["mail_to"].replace(",", " ").split() if a],
            )
            try:
                sub = pipeline.create_submission(request.user, req)  # type: ignore[arg-type]
            except pipeline.SubmissionError as e:
                form.add_error(e.field if e.field in form.fields else None, str(e))
            except RecipientError as e:
                # Nothing was stored; the form comes back filled in, to submit without those addresses.
                form.add_error("mail_to", e.message)
            except artifacts.ArtifactUnavailable as e:
                form.add_error("mbox", f"the mbox could not be stored, nothing was submitted: {e}; try again later")
            else:
                return redirect("submission-detail", sub_id=sub.pk)
    else:
        form = SubmissionForm(
            # The base the docs use (docs/quickstart.md, docs/submitting.md): a
            # release tag names one kernel in any tree; a `master` branch moves or is absent.
            initial={"benchmarks": ["spawn"], "grids": ["quick"], "arches": ["x86_64"], "base": "v6.1"}
        )
    return render(request, "kperf/submission_new.html", {"form": form})


@login_required
def submission_detail(request: HttpRequest, sub_id: int) -> HttpResponse:
    sub = get_object_or_404(access.visible_submissions(request.user).select_related("tree", "owner"), pk=sub_id)
    return render(request, "kperf/submission_detail.html", {"sub": sub, "d": presenters.submission_detail(sub)})


def _text(body: str, status: int = 200) -> HttpResponse:
    return HttpResponse(body, content_type="text/plain; charset=utf-8", status=status)


@login_required
def build_log(request: HttpRequest, build_id: int) -> HttpResponse:
    build = get_object_or_404(access.visible_builds(request.user), pk=build_id)
    meta = build.artifacts.get("build-log")
    if meta:
        try:
            return _text(artifacts.read_checked(meta, f"the log of build {build_id}").decode(errors="replace"))
        except artifacts.ArtifactUnavailable as e:
            # The end of the log is in the database: show it, and say why the rest is missing.
            return _text(f"[{e}]\n\n{build.log_tail}", status=503)
    return _text(build.log_tail or f"build {build_id} has no log yet (status: {build.status})")


@login_required
def job_console(request: HttpRequest, job_id: int) -> HttpResponse:
    job = get_object_or_404(access.visible_jobs(request.user), pk=job_id)
    try:
        console = archive.console_log(job)
    except artifacts.ArtifactUnavailable as e:
        return _text(f"{e}; try again later", status=503)
    return _text(console or f"job {job_id} has no console output yet (status: {job.status})")


@login_required
def branch_list(request: HttpRequest) -> HttpResponse:
    branches = access.visible_branches(request.user).select_related("tree", "owner")
    return render(request, "kperf/branch_list.html", {"branches": branches})


@login_required
def branch_detail(request: HttpRequest, branch_id: int) -> HttpResponse:
    branch = get_object_or_404(access.visible_branches(request.user).select_related("tree", "owner"), pk=branch_id)
    # The newest commits unless more are asked for: a long branch's every row
    # is most of the page's time and length.
    try:
        shown = min(max(int(request.GET.get("commits", PAGE_COMMITS)), 1), presenters.MAX_BRANCH_COMMITS)
    except ValueError:
        shown = PAGE_COMMITS
    detail = presenters.branch_detail(branch, commits_limit=shown)
    total = branch.commits.count()
    more = min(total, presenters.MAX_BRANCH_COMMITS) if total > shown else None
    return render(request, "kperf/branch_detail.html", {"b": branch, "d": detail, "total": total, "more": more})
