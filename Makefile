# kperf: `make up` runs the service on embedded defaults, `make test` runs every test.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed-stamp
PKGS := runners kernel-builds service testing

.PHONY: venv up test test-fast test-realistic lint typecheck check clean

$(STAMP): requirements.lock requirements-dev.txt service/pyproject.toml runners/pyproject.toml kernel-builds/pyproject.toml testing/pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "python3 is missing: apt-get install python3 python3-venv"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -c requirements.lock -r requirements-dev.txt $(addprefix -e ,$(PKGS))
	touch $@

venv: $(STAMP)

up: venv
	$(VENV)/bin/kperf-up

# One process by default: the fixture kernels are built beside the service
# tests from the start of the run (conftest.py, kperf_testing.prebuild).
# TEST_WORKERS=2 runs two pytest-xdist workers, each taking whole modules,
# longest first (kperf_testing.xdist_schedule); on two cores the kernel tests
# then slow each other as much as they gain (docs/quickstart.md, "Tests").
TEST_WORKERS ?= 0
PYTEST_PARALLEL = $(if $(filter 0,$(TEST_WORKERS)),-p no:xdist,-n $(TEST_WORKERS))

# Everything but the slow tier: unit, service, runner, kernel build, QEMU boot and end-to-end tests.
test: venv
	$(VENV)/bin/pytest $(PYTEST_PARALLEL) -m "not realistic"

# The slow tier: end to end on the shape a lab runs (the mm profile, two vCPUs,
# all four benchmarks; docs/development.md, "The realistic tier"). .ci/run runs it after `make test`.
test-realistic: venv
	$(VENV)/bin/pytest -p no:xdist -m realistic

# Without the tests that build or boot kernels.
test-fast: venv
	$(VENV)/bin/pytest $(PYTEST_PARALLEL) -m "not kernel and not realistic"

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# mypy.ini's files, then the two other modules named `conftest` (see mypy.ini), one run each.
typecheck: venv
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy runners/tests/conftest.py
	$(VENV)/bin/mypy dashboards/tests/conftest.py

check: lint typecheck test

clean:
	rm -rf $(VENV) .kperf
