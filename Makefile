# Two commands on a fresh machine: `make demo` and `make test` (README).
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
# pytest-xdist processes for `make test` (docs/dev/testing.md); 0 runs the suite in this process.
PYTEST_WORKERS ?= 2

.PHONY: demo test lint typecheck venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/rsi demo --fresh

lint: $(STAMP)
	$(PY) -m ruff check .

typecheck: $(STAMP)
	$(PY) -m mypy rsi_common rsi_worker

test: $(STAMP)
	scripts/provision.sh
	$(PY) -m ruff check .
	$(PY) -m mypy rsi_common rsi_worker
# Bytecode once, read by every worker, `rsi` and `celery` process the tests start (each would
# compile the sources again under PYTHONDONTWRITEBYTECODE; docs/dev/testing.md).
	$(PY) -m compileall -q -j 0 rsi_common rsi_worker tests
	scripts/pytest.sh $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .rsi .pytest_cache .mypy_cache .ruff_cache
