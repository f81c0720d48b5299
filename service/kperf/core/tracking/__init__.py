"""Tracked branches: poll, build and measure new commits, find change points, bisect.

`branches` follows a branch and measures its commits; `change_points` runs
the detectors over its series; `bisection` adds the commits between two
measured ones until the culprit is found; `rebuild` recomputes every summary
from the raw samples.
"""
