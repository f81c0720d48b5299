"""The submission form (/submissions/new), rendered from the submission request's schema.

Its fields, their order, labels and help texts are SubmissionRequest's
(kperf.core.submissions.request); this module only picks each one's widget and
choices. The form checks nothing itself: is_valid() parses the POST data into
SubmissionRequest, the schema the API's body is too, and puts each error next
to the field its location names, so the form and the API refuse the same input
in the same words.
"""

from __future__ import annotations

import types
from typing import Any, Union, get_args, get_origin

import pydantic
from django import forms
from django.conf import settings
from django.forms.utils import ErrorDict
from django.utils.datastructures import MultiValueDict
from pydantic.fields import FieldInfo

from kperf.core import benchmarks
from kperf.core.models.submissions import Thp
from kperf.core.submissions.request import SubmissionRequest
from kperf_kbuild.driver import SUPPORTED_ARCHES
from kperf_kbuild.profiles import PROFILES

# API spellings the form does not show: its grids are ticked, one or several.
NOT_SHOWN = frozenset({"grid"})
# What a new form shows besides the schema's defaults: quick ticked (what no
# grid means), and the base the docs use (docs/quickstart.md,
# docs/submitting.md): a release tag names one kernel in any tree, where a
# `master` branch moves or is absent.
FIRST_VALUES: dict[str, Any] = {"grids": ["quick"], "base": "v6.1"}


def _choices() -> dict[str, list[tuple[str, str]]]:
    """The choices of the fields that have them, as this service has them now."""
    return {
        "benchmarks": [(n, n) for n in benchmarks.known()] + [("all", "all")],
        "grids": [(g, g) for g in benchmarks.grid_names()],
        "profile": [("", "each machine class's own"), *((p, p) for p in PROFILES)],
        "arches": [(a, a) for a in SUPPORTED_ARCHES],
        "thp": [(str(value), str(label)) for value, label in Thp.choices],
    }


def _kind(info: FieldInfo) -> type:
    """The type a field holds, None left aside: str, bytes, float or list."""
    annotation = info.annotation
    if get_origin(annotation) in (Union, types.UnionType):
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    kind = get_origin(annotation) or annotation
    assert isinstance(kind, type), info
    return kind


def _form_field(info: FieldInfo, kind: type, choices: list[tuple[str, str]] | None) -> forms.Field:
    # `required` only marks the input for the browser: the schema decides what is missing.
    common: dict[str, Any] = {"label": info.title, "help_text": info.description or "", "required": info.is_required()}
    if choices is not None and kind is list:
        return forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, choices=choices, **common)
    if choices is not None:
        return forms.ChoiceField(choices=choices, **common)
    if kind is bytes:
        return forms.FileField(**common)
    if kind is float:
        return forms.FloatField(**common)
    if kind is list:
        # A list without choices (addresses) is typed as one text.
        common["help_text"] += " (separated by commas)"
    return forms.CharField(**common)


class SubmissionForm(forms.Form):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = _choices()
        self._kinds: dict[str, type] = {}
        for name, info in SubmissionRequest.model_fields.items():
            if name not in NOT_SHOWN:
                self._kinds[name] = _kind(info)
                self.fields[name] = _form_field(info, self._kinds[name], choices.get(name))
        self.checked: SubmissionRequest | None = None

    @staticmethod
    def first_values() -> dict[str, Any]:
        """What a new form shows: the schema's defaults, and FIRST_VALUES."""
        shown = SubmissionRequest.model_fields.items()
        defaults = {n: f.get_default(call_default_factory=True) for n, f in shown if not f.is_required()}
        return {n: v for n, v in defaults.items() if v not in (None, "", []) and n not in NOT_SHOWN} | FIRST_VALUES

    def full_clean(self) -> None:
        # The schema is the one check, the API's too: Django's form fields here only render.
        self._errors = ErrorDict(renderer=self.renderer)
        self.cleaned_data: dict[str, Any] = {}
        self.checked = None
        if not self.is_bound:
            return
        try:
            self.checked = SubmissionRequest.model_validate(self.schema_data())
        except pydantic.ValidationError as e:
            for err in e.errors():
                where = err["loc"][0] if err["loc"] else None
                self.add_error(where if isinstance(where, str) and where in self.fields else None, err["msg"])

    def schema_data(self) -> dict[str, Any]:
        """The POST data as the schema reads it: what is ticked as a list, a file as its bytes, a number left
        empty as not given, and addresses typed in one text as a list."""
        data: dict[str, Any] = {}
        for name, kind in self._kinds.items():
            if kind is bytes:
                upload = self.files.get(name)
                if upload:
                    # One byte over the limit is enough for the schema to refuse it as too large.
                    data[name] = upload.read(settings.KPERF_MAX_MBOX_BYTES + 1)
            elif isinstance(self.fields[name], forms.MultipleChoiceField):
                ticked = self.data.getlist(name) if isinstance(self.data, MultiValueDict) else self.data.get(name, [])
                data[name] = ticked
            elif name in self.data:
                value = self.data[name]
                if kind is list:
                    data[name] = value.replace(",", " ").split()
                elif value or kind is str:
                    data[name] = value
        return data
