"""The Celery application: three queues, explicit routes (see settings)."""

from __future__ import annotations

import os

from celery import Celery
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kperf.settings")

app = Celery("kperf")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = tuple(Queue(name, routing_key=name) for name in ("default", "builds", "analysis"))
app.autodiscover_tasks(["kperf.core"])
