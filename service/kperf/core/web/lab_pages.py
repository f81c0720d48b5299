"""The lab page: every runner's state, why and since when, and its calibrations (docs/calibration.md).

Signed-in users read it (they choose and judge runs by it); only staff
release or quarantine a runner, by a POST with the CSRF token, as the API
(kperf.core.web.api.lab) does.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from kperf.core import access
from kperf.core.lab import calibration, runner_health
from kperf.core.models import BuildMachine, KernelBuild, Runner


@login_required
def lab(request: HttpRequest) -> HttpResponse:
    runners = list(
        Runner.objects.select_related("machine_class", "machine_class__reference_build").order_by(
            "machine_class__name", "name"
        )
    )
    rows = [{"r": r, "series": calibration.series_table(r, limit=6)} for r in runners]
    building = {
        b.worker: b
        for b in KernelBuild.objects.filter(status=KernelBuild.Status.BUILDING, worker__startswith="builder:")
    }
    builders = [{"m": m, "build": building.get(m.worker)} for m in BuildMachine.objects.order_by("name")]
    context = {"rows": rows, "builders": builders, "staff": access.is_staff(request.user)}
    return render(request, "kperf/lab.html", context)


def _forbidden(what: str) -> HttpResponse:
    return HttpResponse(
        f"only an admin may {what} a runner: ask an admin", status=403, content_type="text/plain; charset=utf-8"
    )


@login_required
@require_POST
def release(request: HttpRequest, name: str) -> HttpResponse:
    if not access.is_staff(request.user):
        return _forbidden("release")
    try:
        calibration.release_by_name(
            name, request.user, request.POST.get("note", "")[:2000], relearn=bool(request.POST.get("relearn"))
        )
    except runner_health.NoSuchRunner as e:
        return HttpResponse(str(e), status=404, content_type="text/plain; charset=utf-8")
    return redirect("lab")


@login_required
@require_POST
def quarantine(request: HttpRequest, name: str) -> HttpResponse:
    if not access.is_staff(request.user):
        return _forbidden("quarantine")
    try:
        runner_health.quarantine_by_name(name, request.user, request.POST.get("note", "")[:2000])
    except runner_health.NoSuchRunner as e:
        return HttpResponse(str(e), status=404, content_type="text/plain; charset=utf-8")
    return redirect("lab")
