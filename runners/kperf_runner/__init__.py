"""kperf runner agent: pulls jobs, boots kernels, runs memory-management benchmarks.

Standard library only, Python 3.9+: it installs on minimal bare-metal root
filesystems. It never imports the service; the service imports
`kperf_runner.benchmarks`, the single registry of benchmarks and metrics.
"""

__version__ = "0.1.0"
