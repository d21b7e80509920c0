# The two commands a new user needs: `make demo` and `make test`. Both create .venv if missing.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.vlbench-installed
CORES ?= 2
# pytest-xdist workers of `make test` (tests/conftest.py hands out whole modules).
TEST_WORKERS ?= 2

.PHONY: demo test check lint report clean venv

venv: $(STAMP)

$(STAMP): envs/requirements.txt envs/requirements-test.txt envs/requirements-test-nodeps.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check -q -r envs/requirements.txt -r envs/requirements-test.txt
	$(BIN)/python -m pip install --disable-pip-version-check -q --no-deps -r envs/requirements-test-nodeps.txt
	$(BIN)/python -m pip install --disable-pip-version-check -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/snakemake --cores $(CORES)
	$(BIN)/snakemake --cores $(CORES) --report results/report.html
	@echo
	@echo "Tables: results/tables/ (metrics.csv, one Markdown table per benchmark, paper tables)"
	@echo "Report: results/report.html"

test: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS)

# The edit-test loop: lint and the unit tests, without whole-workflow runs or the SLURM cluster.
check: lint
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --ignore=tests/end_to_end --ignore=tests/cluster

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/snakemake --lint

clean:
	rm -rf results logs .snakemake
