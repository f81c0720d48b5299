from __future__ import annotations

from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "kperf.core"
    label = "core"
    verbose_name = "kperf"

    def ready(self) -> None:
        # Load the Celery app whenever Django starts, so that shared tasks
        # bind to it (and to the configured broker) rather than to Celery's
        # default app.
        import kperf.celery

        # Connects the history rows of rows created in their first status (kperf.core.lifecycle.states).
        import kperf.core.lifecycle.states  # noqa: F401
