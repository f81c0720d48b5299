"""Mail bodies from templates (templates/kperf/mail/*.txt), so their wording changes without code.

Plain text: nothing is HTML-escaped (an address's `<` or a subject's `&` stay
as written). Python still computes what needs computing (which addresses,
the layout of a table wrapped at 80 columns); the sentences around those
values live in the template. Django's template language keeps a template's
line breaks, so the templates are written line for line as the mail reads.
"""

from __future__ import annotations

from typing import Any

from django.template.loader import render_to_string


def render(template: str, /, **context: Any) -> str:
    """The body of mail `template` (templates/kperf/mail/<template>.txt) with `context`."""
    # A template file ends in a newline after its last tag; a body ends in exactly one.
    return render_to_string(f"kperf/mail/{template}.txt", context).rstrip("\n") + "\n"
