"""Django settings for kperf, driven by environment variables (docs/operations.md)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import dj_database_url
import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured

from kperf import storage_settings
from kperf.conf import (
    SECRET_KEY_RECIPE,
    env_bool,
    env_build_noise_records,
    env_float,
    env_int,
    env_list,
    env_path,
    env_percentages,
    env_str,
    secret_key_problem,
)
from kperf.core.builds import tree_urls
from kperf.core.lifecycle.task_names import Task
from kperf.folders import private_dir, private_dirs
from kperf.stats.abtest import DEFAULT_MIN_EFFECT_PCT_BY_BENCHMARK

# Django's generic classes (ModelAdmin[Model], QuerySet[Model]) subscriptable at run time, as
# their types are written for the checker.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent
REPO_ROOT = BASE_DIR.parent.parent

# Everything kperf keeps on disk (mirrors, builds, artifacts, embedded database)
# lives under KPERF_HOME unless a narrower variable says otherwise.
KPERF_HOME = env_path("KPERF_HOME", REPO_ROOT / ".kperf")

DEBUG = env_bool("KPERF_DEBUG", False)
# Sessions, CSRF tokens and password-reset links are only as secret as this
# key: a key anyone can read in this repository (this file's old default,
# docker-compose's old fallback) is no key, so production refuses to start
# with one. `kperf-up` makes a random key once and keeps it in KPERF_HOME.
_DEVELOPMENT_SECRET_KEY = "kperf-development-key-change-me-in-production"
_WHERE_KEYS_LIVE = "(`make up` keeps one in KPERF_HOME/secret_key; docker-compose reads it from .env)"
SECRET_KEY = env_str("KPERF_SECRET_KEY", "")
if SECRET_KEY.strip() in ("", _DEVELOPMENT_SECRET_KEY, "change-me"):
    if not DEBUG:
        raise ImproperlyConfigured(
            f"KPERF_SECRET_KEY is unset or a published default: set it to a long random value, e.g. "
            f"`{SECRET_KEY_RECIPE}` {_WHERE_KEYS_LIVE}; KPERF_DEBUG=1 allows a development key"
        )
    SECRET_KEY = _DEVELOPMENT_SECRET_KEY
elif (_key_problem := secret_key_problem(SECRET_KEY)) is not None:
    # A short or repetitive key can be guessed, and with it every session
    # forged; refused in debug mode too, where leaving it unset is the way
    # to get a development key.
    raise ImproperlyConfigured(
        f"KPERF_SECRET_KEY is too weak: it {_key_problem}. Set it to a long random value, e.g. "
        f"`{SECRET_KEY_RECIPE}` {_WHERE_KEYS_LIVE}"
    )
ALLOWED_HOSTS = env_list("KPERF_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("KPERF_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_beat",
    # Failed logins throttled per user name and per client address (docs/operations.md).
    "axes",
    "kperf.core",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Turns the API's non-JSON 4xx and 5xx answers, from anything below it, into JSON.
    "kperf.core.web.api.middleware.ApiErrorsMiddleware",
    # Before anything reads them: refuses NUL bytes anywhere in a request
    # (PostgreSQL cannot hold them) and a query or form Django cannot read.
    "kperf.core.web.request_guard.RequestGuardMiddleware",
    # A page whose view found the database unreachable gets a plain 503 page.
    "kperf.core.web.request_guard.DatabaseUnavailableMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Names the request (its user, or the runner or build machine of its token) in the status history.
    "kperf.core.web.actors.ActorMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes requires: it answers a locked-out login attempt.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "kperf.urls"
WSGI_APPLICATION = "kperf.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# DATABASE_URL is required here: `kperf-up` and the test suite start an
# embedded PostgreSQL and set it when the operator did not.
DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/kperf"),
        # Connections are kept between requests: opening one costs the
        # database a process and the request several milliseconds, which a
        # lab of runners claiming at once pays on every call. The health
        # check replaces a connection a database restart broke.
        conn_max_age=env_int("KPERF_DB_CONN_MAX_AGE", 60, minimum=0),
        conn_health_checks=True,
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
# Every login (web form, admin, POST /api/v1/auth/token) goes through the
# throttle before the password is checked.
AUTHENTICATION_BACKENDS = [
    "kperf.core.web.throttle.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("KPERF_LOGIN_FAILURE_LIMIT", 10, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("KPERF_LOGIN_COOLOFF_MINUTES", 15, minimum=1))
# Either one locks: many passwords tried on one user name from anywhere, or
# many user names tried from one address.
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "kperf.core.web.throttle.lockout_response"
# The user name cut to what axes can store: a longer one was a 500, uncounted.
AXES_USERNAME_CALLABLE = "kperf.core.web.throttle.attempted_username"
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = KPERF_HOME / "static"
# Readable by kperf alone: the home holds every submitted tree (kperf.folders).
private_dir(KPERF_HOME)
# WhiteNoise warns on every request when the directory is missing.
private_dir(STATIC_ROOT)

# Uploads from runners carry console logs and raw benchmark output; cap them so
# a runner gone wrong cannot fill the database (docs/runner-protocol.md).
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("KPERF_MAX_UPLOAD_BYTES", 16 * 1024 * 1024, minimum=1024)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
        "null": {"class": "logging.NullHandler"},
    },
    # The root logger gets a handler that drops records, so a library that
    # calls logging.basicConfig() (the web server does) adds no second
    # handler printing every kperf line again; kperf's own loggers print.
    "root": {"handlers": ["null"]},
    "loggers": {
        # Every logger is named after its module: kperf.* is the service, kperf_kbuild.* the
        # kernel builder a worker runs in-process.
        "kperf": {"handlers": ["console"], "level": env_str("KPERF_LOG_LEVEL", "INFO")},
        "kperf_kbuild": {"handlers": ["console"], "level": env_str("KPERF_LOG_LEVEL", "INFO")},
        # Unhandled exceptions in web pages, with their tracebacks (the API's
        # are logged by kperf.core.web.api); Django's default sends them nowhere
        # when DEBUG is off.
        "django.request": {"handlers": ["console"], "level": "ERROR"},
        # The web server's own warnings (queue depth, refused connections).
        "waitress": {"handlers": ["console"], "level": "INFO"},
    },
}

# --- Celery -----------------------------------------------------------------
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
# A worker that dies mid-task must not lose it: acknowledge only when done.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ROUTES = {
    Task.BUILD_KERNEL: {"queue": "builds"},
    Task.ANALYSE_SUBMISSION: {"queue": "analysis"},
    # An interim look is statistics as the analysis is: on its queue, not in the advance.
    Task.LOOK_SUBMISSION: {"queue": "analysis"},
    Task.ANALYSE_BRANCH_COMMIT: {"queue": "analysis"},
    Task.REANALYSE_BRANCH: {"queue": "analysis"},
    Task.SUMMARISE_JOB: {"queue": "analysis"},
}
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A broker that goes away is waited for, however long: workers come back by
# themselves (docs/operations.md, "Recovery").
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# A running task (a kernel build) keeps running through a broker outage; if
# its message is redelivered meanwhile, the build's lease turns the second
# delivery away.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# Publishing waits at most this long for a dead broker (seconds); what could
# not be sent is re-sent by the sweeper.
# (Redis only: the SQLAlchemy transport `make up` uses hands its options to
# SQLAlchemy's create_engine.)
CELERY_BROKER_TRANSPORT_OPTIONS = (
    {"socket_connect_timeout": 3, "socket_timeout": 10} if CELERY_BROKER_URL.startswith("redis") else {}
)
# The SQLAlchemy transport (`make up`'s queues in PostgreSQL) has no push: a
# worker looks for a task every this many seconds, kombu's default being 1 s.
# Every hop of a submission (build, queueing its boots, each look's analysis)
# waited half of that on average; a tenth of a second is a few cheap indexed
# reads a second per worker (kperf.celery sets it; docs/operations.md).
KPERF_BROKER_POLL_SECONDS = env_float("KPERF_BROKER_POLL_SECONDS", 0.1)
if not 0.01 <= KPERF_BROKER_POLL_SECONDS <= 10:
    raise ImproperlyConfigured(
        f"KPERF_BROKER_POLL_SECONDS={KPERF_BROKER_POLL_SECONDS} is outside 0.01 to 10 seconds: "
        "set a number of seconds in that range"
    )
# kombu's Redis transport with the fix that keeps a worker alive when Redis
# restarts under it (kperf.celery.RedisChannel). redis:// only: for rediss://
# the scheme itself turns TLS on, which naming a transport would lose.
if CELERY_BROKER_URL.startswith("redis://"):
    CELERY_BROKER_TRANSPORT = "kperf.celery:RedisTransport"
CELERY_TASK_ALWAYS_EAGER = env_bool("KPERF_TASKS_EAGER", False)

# --- kperf ------------------------------------------------------------------
KPERF_MIRROR_ROOT = env_path("KPERF_MIRROR_ROOT", KPERF_HOME / "mirrors")
KPERF_BUILD_ROOT = env_path("KPERF_BUILD_ROOT", KPERF_HOME / "builds")
KPERF_ARTIFACT_ROOT = env_path("KPERF_ARTIFACT_ROOT", KPERF_HOME / "artifacts")
# Made now, readable by kperf alone, rather than with whatever umask the first
# process to write there has (git, the build driver, the storage).
private_dirs(KPERF_HOME, KPERF_MIRROR_ROOT, KPERF_BUILD_ROOT, KPERF_ARTIFACT_ROOT)
# Build artifacts and archived outputs go through the storage named
# "artifacts": KPERF_ARTIFACT_ROOT, or an S3-compatible bucket when
# KPERF_S3_BUCKET is set (docs/operations.md, "Storage").
STORAGES = storage_settings.storages(KPERF_ARTIFACT_ROOT)
KPERF_CCACHE_DIR = env_path("KPERF_CCACHE_DIR", Path.home() / ".cache" / "kperf" / "ccache")
KPERF_BUILD_JOBS = env_int("KPERF_BUILD_JOBS", 0, minimum=0)
# Disk the warm build trees under KPERF_BUILD_ROOT/trees may take (checkouts
# and object trees kept so the next nearby commit builds incrementally);
# least recently used trees beyond it are deleted. 0 keeps none. The
# default (kperf_kbuild.trees.DEFAULT_BUDGET_BYTES, 20 GiB) keeps several
# 6.1 trees per arch and config.
KPERF_BUILD_TREES_BUDGET_BYTES = env_int("KPERF_BUILD_TREES_BUDGET_BYTES", 20 * 1024**3, minimum=0)
# Local-path trees are handy on a developer's machine and in tests, but let
# anyone who may submit read the server's disk: off unless asked for
# (`kperf-up` turns them on for the local user).
KPERF_ALLOW_LOCAL_TREES = env_bool("KPERF_ALLOW_LOCAL_TREES", False)
# Where a submitted tree may be fetched from (docs/operations.md, "Tree
# URLs"): a fetch opens a connection wherever the URL says, so only these
# schemes (ssh:// would use the server's own keys), and only the hosts listed
# here or, with the entry `*`, hosts whose every address is public. A listed
# host (name, *.domain or address, optionally :port) may be internal: a lab's
# own git server. Parsed now so that a typo stops the service at start.
KPERF_TREE_SCHEMES = tree_urls.parse_schemes("KPERF_TREE_SCHEMES", env_list("KPERF_TREE_SCHEMES", ["https"]))
KPERF_TREE_HOSTS = env_list("KPERF_TREE_HOSTS", [tree_urls.ANY_PUBLIC_HOST])
tree_urls.parse_hosts("KPERF_TREE_HOSTS", KPERF_TREE_HOSTS)
KPERF_GIT_TIMEOUT = env_int("KPERF_GIT_TIMEOUT", 1800, minimum=10)
# Patch series (docs/submitting.md): the largest mbox kperf takes (a big
# series is well under a megabyte), and the tree a submission without one
# applies on (a release tag such as v6.1 names the same kernel there).
KPERF_MAX_MBOX_BYTES = env_int("KPERF_MAX_MBOX_BYTES", 4 * 1024 * 1024, minimum=1024)
# Workers that may try to apply a series before its submission fails as the
# infrastructure's fault (a full disk, a killed worker, the storage down).
KPERF_SERIES_APPLY_ATTEMPTS = env_int("KPERF_SERIES_APPLY_ATTEMPTS", 3, minimum=1)
KPERF_DEFAULT_TREE = env_str("KPERF_DEFAULT_TREE", "https://git.kernel.org/pub/scm/linux/kernel/git/torvalds/linux.git")
KPERF_LEASE_SECONDS = env_int("KPERF_LEASE_SECONDS", 900, minimum=30)
KPERF_JOB_MAX_ATTEMPTS = env_int("KPERF_JOB_MAX_ATTEMPTS", 3, minimum=1)
KPERF_RUNNER_POLL_SECONDS = env_int("KPERF_RUNNER_POLL_SECONDS", 5, minimum=1)
KPERF_ALPHA = env_float("KPERF_ALPHA", 0.05)
# The practical threshold: below this change (in %) nothing is called a
# regression, whatever the statistics say; it is shown as a change. One
# default per clock (docs/statistics.md, "The practical threshold"): on the
# wall clock, boot-to-boot noise makes 3% the smallest change worth a
# verdict; on the instruction clock two boots agree to 0.01-0.3%, so the
# threshold sits at half the 1% the service promises to catch. A submission
# or tracked branch may set its own; per-metric prefixes override both
# (kperf.core.benchmarks.min_effect_pct).
KPERF_MIN_EFFECT_PCT = env_float("KPERF_MIN_EFFECT_PCT", 3.0)
KPERF_MIN_EFFECT_PCT_INSTRUCTIONS = env_float("KPERF_MIN_EFFECT_PCT_INSTRUCTIONS", 0.5)
# Lower instruction-clock defaults for the benchmarks whose unrelated changes
# the perturbed-build bench never flagged at them, as "bench=pct,...";
# "none" gives every benchmark KPERF_MIN_EFFECT_PCT_INSTRUCTIONS.
KPERF_MIN_EFFECT_PCT_INSTRUCTIONS_BY_BENCHMARK = env_percentages(
    "KPERF_MIN_EFFECT_PCT_INSTRUCTIONS_BY_BENCHMARK", DEFAULT_MIN_EFFECT_PCT_BY_BENCHMARK["instructions"]
)
# A lab's own perturbed-build records (bench/build_noise.py --json), used for
# the between-build part under the instruction clock where a machine class
# has learned none from tracked branches: "/path.json" for every class, or
# "class=/path.json,..." (docs/statistics.md, "What an interval includes").
# Unset: the figures the project measured (kperf.stats.builds.MEASURED_BUILD_SD).
KPERF_BUILD_NOISE_RECORDS = env_build_noise_records("KPERF_BUILD_NOISE_RECORDS")
# Sequential testing: a comparison that is inconclusive after the grid's K
# boots per side gets K more, up to this many times K in all.
KPERF_BOOT_BUDGET_FACTOR = env_int("KPERF_BOOT_BUDGET_FACTOR", 2, minimum=1)
# Boots per side of a first look under QEMU's instruction clock, whose boots repeat
# one another (kperf.core.benchmarks.boots_per_side).
KPERF_INSTRUCTION_CLOCK_BOOTS = env_int("KPERF_INSTRUCTION_CLOCK_BOOTS", 2, minimum=1)
# Extra base boots the first submission of a machine shape nobody has measured yet gets on the
# instruction clock, so the lab learns that shape's boot spread (profile, vCPUs, NUMA nodes, grid)
# from them; 0: learn it from ordinary base boots only (kperf.core.submissions.shape_spread,
# docs/statistics.md, "Each shape's own boot spread").
KPERF_SHAPE_SPREAD_BOOTS = env_int("KPERF_SHAPE_SPREAD_BOOTS", 4, minimum=0)
# Guest instructions QEMU's TCG executes a host second under -icount, the slow
# end of what was measured (docs/benchmarks.md, "Grids on the instruction
# clock"), and the host seconds a boot's commands may take there: a grid that
# would take longer is refused at submission with the reason.
KPERF_INSTRUCTION_CLOCK_RATE = env_float("KPERF_INSTRUCTION_CLOCK_RATE", 6e7)
KPERF_INSTRUCTION_CLOCK_BOOT_BUDGET = env_float("KPERF_INSTRUCTION_CLOCK_BOOT_BUDGET", 1200.0)
# Base boots of the same build, machine class, benchmark, grid and clock are
# measured once and shared by every submission that needs them, if they were
# measured at most this many seconds ago by a runner that has not changed
# since (queued or running ones always qualify); 0 turns sharing off
# (docs/submitting.md, "Shared base boots").
KPERF_BASE_SHARE_WINDOW_SECONDS = env_int("KPERF_BASE_SHARE_WINDOW_SECONDS", 6 * 3600, minimum=0)
# Only on the instruction clock, whose boots repeat whatever the host does
# and whenever they run. A wall-clock boot measured earlier carries that
# moment's load: set against head boots measured now it makes a false change
# (+135% on a loaded class, 15 minutes apart), so by default every
# wall-clock submission measures its own base, interleaved with its head.
# On for a wall-clock lab whose machines are known not to drift.
KPERF_BASE_SHARE_WALL_CLOCK = env_bool("KPERF_BASE_SHARE_WALL_CLOCK", False)
# Moderate each comparison's boot variance towards the noise learned from
# earlier runs on the same machine class (docs/statistics.md, "Learned noise").
KPERF_LEARNED_NOISE = env_bool("KPERF_LEARNED_NOISE", True)
# Under the instruction clock, add the between-build component learned from
# tracked branches' histories to every comparison (docs/statistics.md, "The
# between-build component").
KPERF_LEARNED_BUILD_NOISE = env_bool("KPERF_LEARNED_BUILD_NOISE", True)
# Tracked branches: choose the change-point scan window (and its threshold)
# from how fast each metric's level wanders on the machine class (docs/statistics.md).
KPERF_LEARNED_DRIFT = env_bool("KPERF_LEARNED_DRIFT", True)
# --- Recovery (docs/operations.md, "Recovery") -------------------------------
# Every task's time limit in seconds (builds and analyses have their own);
# temporary database errors are retried this many times with backoff.
KPERF_TASK_TIME_LIMIT = env_int("KPERF_TASK_TIME_LIMIT", 600, minimum=10)
KPERF_TASK_MAX_RETRIES = env_int("KPERF_TASK_MAX_RETRIES", 8, minimum=0)
KPERF_BUILD_TIME_LIMIT = env_int("KPERF_BUILD_TIME_LIMIT", 3 * 3600, minimum=60)
KPERF_ANALYSIS_TIME_LIMIT = env_int("KPERF_ANALYSIS_TIME_LIMIT", 1800, minimum=10)
# A build's worker extends its lease every quarter of this; a build whose
# lease ran out lost its worker and is tried again, at most
# KPERF_BUILD_MAX_ATTEMPTS times, waiting RETRY_SECONDS x 2^(attempt-1).
KPERF_BUILD_LEASE_SECONDS = env_int("KPERF_BUILD_LEASE_SECONDS", 120, minimum=4)
KPERF_BUILD_MAX_ATTEMPTS = env_int("KPERF_BUILD_MAX_ATTEMPTS", 3, minimum=1)
KPERF_BUILD_RETRY_SECONDS = env_float("KPERF_BUILD_RETRY_SECONDS", 30.0)
KPERF_BUILD_RETRY_MAX_SECONDS = env_float("KPERF_BUILD_RETRY_MAX_SECONDS", 600.0)
# Who builds (docs/builders.md): "local", Celery workers on the builds queue
# (what `make up` runs; they hold the database and broker credentials), or
# "remote", build machines running `kperf-builder` that pull builds over
# HTTP with a token of their own and no other secret (docker-compose).
KPERF_BUILDERS = env_str("KPERF_BUILDERS", "local").strip() or "local"
if KPERF_BUILDERS not in ("local", "remote"):
    raise ImproperlyConfigured(f"KPERF_BUILDERS={KPERF_BUILDERS!r}: use 'local' (Celery build workers) or 'remote'")
# How long a build machine waits between claims when nothing is queued, and
# what one build's uploaded files may take on the web server's disk before
# they are in the artifact storage.
KPERF_BUILDER_POLL_SECONDS = env_int("KPERF_BUILDER_POLL_SECONDS", 5, minimum=1)
KPERF_BUILDER_MAX_UPLOAD_BYTES = env_int("KPERF_BUILDER_MAX_UPLOAD_BYTES", 4 * 1024**3, minimum=1024**2)
# The sweeper runs every REDRIVE_SECONDS and re-drives any submission,
# tracked commit or build that has not moved for REDRIVE_AFTER_SECONDS.
KPERF_REDRIVE_SECONDS = env_int("KPERF_REDRIVE_SECONDS", 30, minimum=1)
KPERF_REDRIVE_AFTER_SECONDS = env_int("KPERF_REDRIVE_AFTER_SECONDS", 300, minimum=1)
# An analysing submission or tracked commit that no worker is analysing (its
# analysis lock is free: kperf.core.lifecycle.owners.analysis_running) and that has not
# moved for this long lost its analysis, and the sweeper sends it again: with
# REDRIVE_SECONDS, at most a minute after its worker died.
KPERF_ANALYSIS_LOST_AFTER_SECONDS = env_int("KPERF_ANALYSIS_LOST_AFTER_SECONDS", 30, minimum=1)
KPERF_CONSOLE_LOG_MAX_BYTES = env_int("KPERF_CONSOLE_LOG_MAX_BYTES", 2 * 1024 * 1024, minimum=1024)
# --- Calibration and quarantine (docs/calibration.md) ------------------------
# Every runner of a class with a reference build calibrates this often (0: never
# queued by the schedule); the beat task looks for what is due every CHECK_SECONDS.
KPERF_CALIBRATION_EVERY_HOURS = env_float("KPERF_CALIBRATION_EVERY_HOURS", 24.0)
KPERF_CALIBRATION_CHECK_SECONDS = env_int("KPERF_CALIBRATION_CHECK_SECONDS", 600, minimum=10)
# A calibration drifted when a metric's median moved more than K times the
# runner's learned noise AND more than FLOOR_PCT percent, against its last
# WINDOW good calibrations; nothing is judged before MIN_HISTORY of them.
KPERF_CALIBRATION_K = env_float("KPERF_CALIBRATION_K", 4.0)
KPERF_CALIBRATION_FLOOR_PCT = env_float("KPERF_CALIBRATION_FLOOR_PCT", 5.0)
KPERF_CALIBRATION_MIN_HISTORY = env_int("KPERF_CALIBRATION_MIN_HISTORY", 3, minimum=2)
KPERF_CALIBRATION_WINDOW = env_int("KPERF_CALIBRATION_WINDOW", 10, minimum=2)
# --- Alerts by email (docs/alerts.md) ----------------------------------------
# No SMTP host, no mail: alerts are still written to the outbox (and shown in
# the admin) so nothing is lost, and go out once a host is configured.
EMAIL_HOST = env_str("KPERF_SMTP_HOST", "")
EMAIL_PORT = env_int("KPERF_SMTP_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("KPERF_SMTP_USER", "")
EMAIL_HOST_PASSWORD = env_str("KPERF_SMTP_PASSWORD", "")
EMAIL_USE_TLS = env_bool("KPERF_SMTP_STARTTLS", False)
EMAIL_USE_SSL = env_bool("KPERF_SMTP_SSL", False)
EMAIL_TIMEOUT = env_int("KPERF_SMTP_TIMEOUT", 30, minimum=1)
DEFAULT_FROM_EMAIL = env_str("KPERF_MAIL_FROM", "kperf <kperf@localhost>")
# Links in mails point here.
KPERF_BASE_URL = env_str("KPERF_BASE_URL", "http://127.0.0.1:8000").rstrip("/")
KPERF_ALERT_MAX_ATTEMPTS = env_int("KPERF_ALERT_MAX_ATTEMPTS", 10, minimum=1)
# --- Triage by replying to an alert (docs/triage.md, "By mail") ----------------
# Alerts of regressions carry Reply-To: <local>+<token>@<domain>; no domain, no
# Reply-To and nothing is read.
KPERF_MAIL_DOMAIN = env_str("KPERF_MAIL_DOMAIN", "").strip().lower()
KPERF_MAIL_LOCAL_PART = env_str("KPERF_MAIL_LOCAL_PART", "kperf").strip().lower()
# A token stops working this long after its alert was written.
KPERF_MAIL_REPLY_DAYS = env_int("KPERF_MAIL_REPLY_DAYS", 90, minimum=1)
# A reply is a line and a quote; a bigger mail is answered "too large" unread.
KPERF_MAIL_MAX_BYTES = env_int("KPERF_MAIL_MAX_BYTES", 256 * 1024, minimum=4096)
# At most this many answers to one address a day: two robots cannot loop for long.
KPERF_MAIL_ANSWERS_PER_DAY = env_int("KPERF_MAIL_ANSWERS_PER_DAY", 10, minimum=1)
# The SMTP listener (`kperf-manage mail_listener`, `kperf-up --mail-listener`).
KPERF_MAIL_LISTEN_HOST = env_str("KPERF_MAIL_LISTEN_HOST", "127.0.0.1")
KPERF_MAIL_LISTEN_PORT = env_int("KPERF_MAIL_LISTEN_PORT", 8025, minimum=1)
# A laptop's local mailbox (`make up`): the listener also stores every mail
# not for a reply address in this Maildir (loopback only; docs/alerts.md).
KPERF_MAIL_LOCAL_MAILDIR = env_str("KPERF_MAIL_LOCAL_MAILDIR", "")
# Or a mailbox polled over IMAP (`kperf-manage poll_mailbox`, the beat task when the host is set).
KPERF_IMAP_HOST = env_str("KPERF_IMAP_HOST", "")
KPERF_IMAP_PORT = env_int("KPERF_IMAP_PORT", 993, minimum=1)
KPERF_IMAP_SSL = env_bool("KPERF_IMAP_SSL", True)
KPERF_IMAP_STARTTLS = env_bool("KPERF_IMAP_STARTTLS", False)
KPERF_IMAP_USER = env_str("KPERF_IMAP_USER", "")
KPERF_IMAP_PASSWORD = env_str("KPERF_IMAP_PASSWORD", "")
KPERF_IMAP_MAILBOX = env_str("KPERF_IMAP_MAILBOX", "INBOX")
KPERF_IMAP_POLL_SECONDS = env_int("KPERF_IMAP_POLL_SECONDS", 60, minimum=10)
# Who wrote a reply is what the receiving MTA's Authentication-Results header
# says (DMARC, or DKIM aligned with From), and only the headers of these
# authserv-ids count: anyone can add one of their own to a mail. None set:
# every reply is refused, unless the operator accepts unauthenticated replies
# (a closed setup, where only a trusted MTA can reach the listener).
KPERF_MAIL_AUTHSERV_IDS = [i.lower() for i in env_list("KPERF_MAIL_AUTHSERV_ID", [])]
KPERF_MAIL_ACCEPT_UNAUTHENTICATED = env_bool("KPERF_MAIL_ACCEPT_UNAUTHENTICATED", False)
# --- Who kperf mails besides the user (docs/submitting.md, "Who gets the result mail") ---
# Addresses (`list@example.org`) or whole domains (`kvack.org`) any user may
# have results mailed to without confirming them: the lab's mailing lists.
KPERF_MAIL_ALLOWED_RECIPIENTS = [a.lower() for a in env_list("KPERF_MAIL_ALLOWED_RECIPIENTS", [])]
# Mails asking an address to confirm, per user a day; each goes to an address kperf does not know yet.
KPERF_MAIL_CONFIRMATIONS_PER_DAY = env_int("KPERF_MAIL_CONFIRMATIONS_PER_DAY", 10, minimum=0)
# How long a confirmation link works.
KPERF_MAIL_CONFIRM_DAYS = env_int("KPERF_MAIL_CONFIRM_DAYS", 7, minimum=1)
# Recipients besides the user's own address, per user a day: counted when a
# submission names them and again when the mail goes out.
KPERF_MAIL_EXTRA_RECIPIENTS_PER_DAY = env_int("KPERF_MAIL_EXTRA_RECIPIENTS_PER_DAY", 20, minimum=0)

# Periodic work; django-celery-beat copies these into its tables at start, where
# operators can change the intervals in the admin.
CELERY_BEAT_SCHEDULE = {
    "expire-leases": {"task": Task.EXPIRE_LEASES, "schedule": float(env_int("KPERF_LEASE_CHECK_SECONDS", 30))},
    # Work whose message was lost or whose worker died (kperf.core.tasks.sweeper).
    "redrive": {"task": Task.REDRIVE, "schedule": float(KPERF_REDRIVE_SECONDS)},
    # Alerts that could not be sent (SMTP down, no host yet) are retried.
    "send-alerts": {"task": Task.SEND_ALERTS, "schedule": float(env_int("KPERF_ALERT_RETRY_SECONDS", 120))},
    # Replies to alerts waiting in an IMAP mailbox (docs/triage.md); a no-op without KPERF_IMAP_HOST.
    "poll-mailbox": {"task": Task.POLL_MAILBOX, "schedule": float(KPERF_IMAP_POLL_SECONDS)},
    # Runners whose calibration is due get a calibration job (kperf.core.lab.calibration).
    "queue-calibrations": {"task": Task.QUEUE_CALIBRATIONS, "schedule": float(KPERF_CALIBRATION_CHECK_SECONDS)},
    # How often tracked branches are fetched to see whether they moved.
    "poll-tracked-branches": {
        "task": Task.POLL_TRACKED_BRANCHES,
        "schedule": float(env_int("KPERF_TRACK_POLL_SECONDS", 300, minimum=10)),
    },
}
