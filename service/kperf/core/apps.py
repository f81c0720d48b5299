from __future__ import annotations

from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "kperf.core"
    label = "core"
    verbose_name = "kperf"
