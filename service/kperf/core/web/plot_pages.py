"""The pictures as SVG documents (image/svg+xml), one per request.

The pages embed them with <img loading="lazy">, inside <details> where there
can be many: a submission of 120 metrics costs nothing for plots until a
reader opens them, and then only the pictures scrolled to. Who may see a
picture is decided as for its page (kperf.core.access); the series is
chosen by query parameters, since metric names are mmtests' and not
URL-shaped.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404

from kperf.core import access
from kperf.core.web import plot_data, plots
from kperf.core.web.request_guard import whole_number


def _svg(body: str) -> HttpResponse:
    resp = HttpResponse(body, content_type="image/svg+xml; charset=utf-8")
    # Opened on its own, the document may style itself and do nothing else.
    resp["Content-Security-Policy"] = "default-src 'none'; style-src 'unsafe-inline'"
    return resp


def _params(request: HttpRequest, *names: str) -> list[str]:
    values = [request.GET.get(n, "") for n in names]
    if not all(values):
        raise Http404(f"a plot needs {', '.join(names)}")
    return values


@login_required
def submission_metric(request: HttpRequest, sub_id: int) -> HttpResponse:
    """One metric of a comparison: ?class=&benchmark=&clock=&metric= and, of several grids, &grid=."""
    sub = get_object_or_404(access.visible_submissions(request.user), pk=sub_id)
    mclass, bench, clock, metric = _params(request, "class", "benchmark", "clock", "metric")
    comp = plot_data.find_comparison(sub, mclass, bench, clock, request.GET.get("grid", ""))
    m = comp.metrics.filter(metric=metric).first() if comp else None
    if comp is None or m is None:
        raise Http404("no such metric in this submission's comparisons")
    return _svg(plots.metric_svg(plot_data.metric_plot(comp, m)))


@login_required
def submission_shape(request: HttpRequest, sub_id: int) -> HttpResponse:
    """A comparison's sweep as one picture (spawn: forks/s against extra VMAs): ?class=&benchmark=&clock=
    and, of several grids, &grid=."""
    sub = get_object_or_404(access.visible_submissions(request.user), pk=sub_id)
    mclass, bench, clock = _params(request, "class", "benchmark", "clock")
    comp = plot_data.find_comparison(sub, mclass, bench, clock, request.GET.get("grid", ""))
    shape = plot_data.shape_plot(comp) if comp else None
    if shape is None:
        raise Http404("this comparison has no sweep to draw")
    return _svg(plots.shape_svg(shape))


@login_required
def branch_series(request: HttpRequest, branch_id: int) -> HttpResponse:
    """One metric's series of a tracked branch: ?class=&benchmark=&clock=&metric= (class by id)."""
    branch = get_object_or_404(access.visible_branches(request.user), pk=branch_id)
    mclass, bench, clock, metric = _params(request, "class", "benchmark", "clock", "metric")
    class_id = whole_number(mclass)
    if class_id is None:
        raise Http404("class is a machine class id")
    return _svg(plots.series_svg(plot_data.series_plot(branch, class_id, bench, clock, metric)))
