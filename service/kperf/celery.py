"""The Celery application: three queues, explicit routes (see settings)."""

from __future__ import annotations

import os
import warnings
from typing import Any, cast

import redis.exceptions
from celery import Celery
from celery.exceptions import SecurityWarning
from django.conf import settings
from kombu import Queue
from kombu.transport import redis as kombu_redis
from kombu.transport import sqlalchemy as kombu_sqla

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kperf.settings")

# A worker run as root, or by a member of sudo or wheel, prints ten lines
# about the danger of unpickling messages with those rights. kperf's workers
# accept JSON only (Celery's default accept_content), which unpickles
# nothing; `kperf-up` says in one line what running as root does mean here.
warnings.filterwarnings(
    "ignore", message="You're running the worker with superuser privileges", category=SecurityWarning
)


class RedisChannel(kombu_redis.Channel):
    """kombu's Redis channel, telling a connection that is gone as a connection error.

    When a worker loses Redis, Celery (5.7, consumer.py,
    on_connection_error_after_connected) first calls `connection.collect()`,
    which closes the channels and then detaches the transport from its
    connection (kombu connection.py `_do_close_transport`: transport.client =
    None), and then `connection.close()`, which closes the default channel
    again. If the first close stopped half-way (its pending BRPOP read failed
    on the dead socket) the channel is still open; the second close drops its
    Redis pool and restores its unacknowledged messages, which makes a new
    pool from `self.connection.client`, now None: AttributeError "'NoneType'
    object has no attribute 'hostname'" in `_connparams`. That is not one of
    the transport's connection errors, so Celery calls it unrecoverable and
    the worker exits. A task acknowledged late on such a channel after the
    reconnection fails the same way. Raised as Redis's ConnectionError
    instead, every caller already copes: the close is given up (the messages
    stay in Redis's unacked set, restored after the visibility timeout, and
    kperf's sweeper re-drives their rows), a late ack is logged, and the
    worker reconnects.
    """

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if getattr(self.connection, "client", None) is None:
            raise redis.exceptions.ConnectionError("the broker connection of this channel was closed")
        params: dict[str, Any] = cast(Any, super())._connparams(asynchronous=asynchronous)
        return params


class RedisTransport(kombu_redis.Transport):
    """kombu's Redis transport with RedisChannel (settings: CELERY_BROKER_TRANSPORT)."""

    Channel = RedisChannel


# kombu's SQLAlchemy transport (the queues inside PostgreSQL, `make up`)
# polls for tasks, every second unless told. It hands every broker transport
# option to SQLAlchemy's create_engine, which refuses `polling_interval`, so
# the interval is set where the transport reads its default, in this process
# (settings.KPERF_BROKER_POLL_SECONDS). Other transports never read it.
kombu_sqla.Transport.polling_interval = settings.KPERF_BROKER_POLL_SECONDS

app = Celery("kperf")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = tuple(Queue(name, routing_key=name) for name in ("default", "builds", "analysis"))
app.autodiscover_tasks(["kperf.core"])
