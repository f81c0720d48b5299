"""The Celery application: three queues, explicit routes (see settings)."""

from __future__ import annotations

import os
import warnings

from celery import Celery
from celery.exceptions import SecurityWarning
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kperf.settings")

# A worker run as root, or by a member of sudo or wheel, prints ten lines
# about the danger of unpickling messages with those rights. kperf's workers
# accept JSON only (Celery's default accept_content), which unpickles
# nothing; `kperf-up` says in one line what running as root does mean here.
warnings.filterwarnings(
    "ignore", message="You're running the worker with superuser privileges", category=SecurityWarning
)

app = Celery("kperf")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = tuple(Queue(name, routing_key=name) for name in ("default", "builds", "analysis"))
app.autodiscover_tasks(["kperf.core"])
