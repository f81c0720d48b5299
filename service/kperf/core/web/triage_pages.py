"""The triage form on the submission and branch pages: a plain POST with the CSRF token, no JavaScript.

The same rules as the API (kperf.core.web.api.triage): a regression the user
may not read is a 404, one they may read but not decide on is a 403, and
bad input goes back to the page with what was wrong, nothing changed.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from kperf.core import triage


@login_required
@require_POST
def change(request: HttpRequest, triage_id: int) -> HttpResponse:
    row = get_object_or_404(triage.visible(request.user), pk=triage_id)
    try:
        triage.triage(
            row,
            request.user,
            request.POST.get("state", ""),
            request.POST.get("note", ""),
            request.POST.get("fixed_by", ""),
            via=triage.Via.WEB,
        )
    except triage.TriageForbidden as e:
        return HttpResponse(str(e), status=403, content_type="text/plain; charset=utf-8")
    except triage.TriageError as e:
        # Shown above the form it came from (kperf/_triage.html).
        messages.error(request, f"not changed: {e}", extra_tags=f"triage-{row.pk}")
    return redirect(triage.page_path(row))
