"""kperf: continuous performance-regression testing for Linux kernel work."""

__version__ = "0.1.0"
