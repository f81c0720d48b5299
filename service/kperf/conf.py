"""Typed readers for settings that come from the environment.

Each one fails loudly, naming the variable and what it should look like,
because a silently ignored typo in a lab's configuration costs a day.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from django.core.checks.security.base import SECRET_KEY_INSECURE_PREFIX, SECRET_KEY_MIN_LENGTH

from kperf.stats.boot_spread import spread_of_record
from kperf.stats.builds import MeasuredBuildNoise, build_noise_from_record


class ConfigError(ValueError):
    pass


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean: use 1/0, true/false, yes/no or on/off")


def env_int(name: str, default: int, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a whole number") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}={value} is below the minimum of {minimum}")
    return value


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_percentages(name: str, default: dict[str, float]) -> dict[str, float]:
    """ "spawn=0.25,aim9=0.25" as {"spawn": 0.25, "aim9": 0.25}; "none" is {}."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return dict(default)
    if raw.strip().lower() == "none":
        return {}
    out: dict[str, float] = {}
    for item in raw.split(","):
        key, sep, value = item.strip().partition("=")
        try:
            pct = float(value)
        except ValueError:
            pct = -1.0
        if not sep or not key.strip() or pct < 0:
            raise ConfigError(f"{name}: {item.strip()!r} is not name=percent (e.g. spawn=0.25), or use none")
        out[key.strip()] = pct
    return out


def env_path(name: str, default: Path) -> Path:
    raw = os.environ.get(name)
    return Path(raw).expanduser().resolve() if raw else default


def env_build_noise_records(name: str) -> dict[str, MeasuredBuildNoise]:
    """A lab's own perturbed-build records (bench/build_noise.py --json), read and checked now.

    "/path/record.json" is for every machine class ("*"); "qemu-arm64=/a.json,qemu-x86_64=/b.json"
    per class; both forms may mix ("/all.json,qemu-arm64=/a.json"). Unset or empty: none.
    """
    raw = os.environ.get(name, "").strip()
    out: dict[str, MeasuredBuildNoise] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        mclass, sep, where = item.partition("=")
        mclass, where = (mclass.strip(), where.strip()) if sep else ("*", item)
        if not mclass or not where:
            raise ConfigError(f"{name}: {item!r} is not a path or machine-class=path")
        path = Path(where).expanduser().resolve()
        try:
            record = json.loads(path.read_text())
        except OSError as exc:
            raise ConfigError(f"{name}: cannot read {path}: {exc.strerror or exc}") from None
        except ValueError as exc:
            hint = "give a bench/build_noise.py --json record"
            raise ConfigError(f"{name}: {path} is not JSON ({exc}); {hint}") from None
        try:
            out[mclass] = with_boot_spread(build_noise_from_record(record, path.name), record, path.name)
        except ValueError as exc:
            raise ConfigError(f"{name}: {exc}") from None
    return out


def with_boot_spread(noise: MeasuredBuildNoise, record: dict[str, Any], name: str) -> MeasuredBuildNoise:
    """A record made with --seeded also gives each metric's boot spread, for its profile (named in
    its header, "the mm profile"); the service prefers it to the project's phase bench
    (kperf.core.submissions.priors)."""
    header = str(record.get("header", ""))
    if "seeded phase" not in header:
        return noise
    profile = re.search(r"\bthe (\w+) profile\b", header)
    if profile is None:
        raise ValueError(f"{name}: its header does not say which profile it measured ('the <name> profile')")
    return replace(noise, boot_spread=spread_of_record(record, name), profile=profile.group(1))


# How to make a key that passes secret_key_problem, for messages.
SECRET_KEY_RECIPE = "python3 -c 'import secrets; print(secrets.token_urlsafe(50))'"


# What a key must hold, by secret_key_bits: as much as a 128-bit random key.
SECRET_KEY_MIN_BITS = 128


def secret_key_bits(key: str) -> float:
    """A rough and deliberately low estimate of the randomness in a key, in bits.

    Each character is worth the Shannon entropy of the key's own mix of
    characters (a key of few different ones, or of one mostly, is worth
    little per character), and a character counts only where it starts a
    run of three the key has not had before, so a piece repeated to make
    up the length adds nothing: `abcde` ten times holds 7 new runs of
    2.3 bits, about 16 bits. secrets.token_urlsafe(50) holds about 370.
    """
    n = len(key)
    if n == 0:
        return 0.0
    per_character = -sum(c / n * math.log2(c / n) for c in Counter(key).values())
    new_runs = len({key[i : i + 3] for i in range(n - 2)}) + min(n, 2)
    return per_character * new_runs


def secret_key_problem(key: str) -> str | None:
    """What makes a secret key guessable, or None for a usable one.

    At least 50 characters (Django's own deploy check, security.W009), not
    one of the keys `startproject` writes, and at least SECRET_KEY_MIN_BITS
    of randomness by secret_key_bits: length alone passes `abcde` ten
    times. The message never repeats the key: it would end up in logs.
    """
    if len(key) < SECRET_KEY_MIN_LENGTH:
        return f"is {len(key)} characters long; it needs at least {SECRET_KEY_MIN_LENGTH}"
    if key.startswith(SECRET_KEY_INSECURE_PREFIX):
        return f"starts with {SECRET_KEY_INSECURE_PREFIX!r}, the mark of a key Django made for development"
    bits = secret_key_bits(key)
    if bits < SECRET_KEY_MIN_BITS:
        return (
            f"holds about {bits:.0f} bits of randomness (kperf's estimate: its characters' entropy, a repeated "
            f"piece counted once); it needs at least {SECRET_KEY_MIN_BITS}"
        )
    return None
