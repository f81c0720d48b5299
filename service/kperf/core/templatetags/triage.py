"""{% triage_panel %}: a regression's triage state, note, history and form, on any page that shows it."""

from __future__ import annotations

from typing import Any

from django import template
from django.contrib.messages import get_messages

from kperf.core import triage
from kperf.core.models import Submission, TrackedBranch, Triage

register = template.Library()


def _errors(request: Any, rows: list[Triage]) -> dict[int, list[str]]:
    """Messages the triage form left for these rows (reading them consumes every message of the request)."""
    wanted = {f"triage-{r.pk}": r.pk for r in rows}
    out: dict[int, list[str]] = {}
    for m in get_messages(request):
        for tag in m.extra_tags.split():
            if tag in wanted:
                out.setdefault(wanted[tag], []).append(str(m))
    return out


@register.inclusion_tag("kperf/_triage.html", takes_context=True)
def triage_panel(context: template.Context, target: Submission | TrackedBranch) -> dict[str, Any]:
    """The triage of a submission, or of every regression change point of a tracked branch."""
    request = context["request"]
    if isinstance(target, Submission):
        rows = list(Triage.objects.filter(submission=target).prefetch_related("events__by"))
    else:
        rows = list(
            Triage.objects.filter(branch=target)
            .select_related("change_point")
            .prefetch_related("events__by")
            .order_by("-created", "-id")
        )
    errors = _errors(request, rows)
    items = [{**triage.triage_dict(r, request.user), "errors": errors.get(r.pk, [])} for r in rows]
    return {
        "items": items,
        "is_branch": isinstance(target, TrackedBranch),
        "csrf_token": context.get("csrf_token"),
        "states": [(v, label) for v, label in Triage.State.choices if v in triage.SETTABLE],
    }
