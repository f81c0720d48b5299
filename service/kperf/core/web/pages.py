"""Web pages: thin views over the same domain functions the API uses.

What a user may see is decided by kperf.core.access, as for the API; what
they may not see is a 404, as if it did not exist."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from kperf.core import access
from kperf.core.builds import archive, artifacts
from kperf.core.mail.recipients import RecipientError
from kperf.core.submissions import pipeline
from kperf.core.web import presenters
from kperf.core.web.submission_form import SubmissionForm

PAGE_COMMITS = 50


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
        # Parsed into the submission request, the API's schema: each refusal comes back next to its field.
        form = SubmissionForm(request.POST, request.FILES)
        if form.is_valid() and form.checked is not None:
            try:
                sub = pipeline.create_submission(request.user, form.checked)  # type: ignore[arg-type]
            except RecipientError as e:
                # Nothing was stored; the form comes back filled in, to submit without those addresses.
                form.add_error("mail_to", e.message)
            except artifacts.ArtifactUnavailable as e:
                form.add_error("mbox", f"the mbox could not be stored, nothing was submitted: {e}; try again later")
            else:
                return redirect("submission-detail", sub_id=sub.pk)
    else:
        form = SubmissionForm(initial=SubmissionForm.first_values())
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
