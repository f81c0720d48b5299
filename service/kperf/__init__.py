"""kperf: continuous performance-regression testing for Linux kernel work.

Nothing is imported here: `kperf.stats` must import without Django or
Celery (the statistics are a library of their own). The Celery app is
loaded when Django starts (kperf.core.apps), and `celery -A kperf` finds
it in kperf.celery by itself.
"""

__version__ = "0.1.0"
