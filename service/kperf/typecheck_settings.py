"""kperf.settings as mypy's Django plugin loads them (mypy.ini).

The plugin imports the settings to learn the apps and models. Settings
refuse to load without a real secret key outside debug mode, and a type
checker has no business holding one, so it gets debug mode.
"""

from __future__ import annotations

import os

os.environ["KPERF_DEBUG"] = "1"

from kperf.settings import *  # noqa: F403
