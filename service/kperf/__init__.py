"""kperf: continuous performance-regression testing for Linux kernel work."""

# Load the Celery app whenever Django starts, so that shared tasks bind to it
# (and to the configured broker) rather than to Celery's default app.
from kperf.celery import app as celery_app

__all__ = ["celery_app"]
__version__ = "0.1.0"
