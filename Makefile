# Two commands on a fresh machine: `make demo` and `make test` (README).
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
# pytest-xdist processes for `make test` (docs/dev/testing.md); 0 runs the suite in this process.
PYTEST_WORKERS ?= 2
# The turn checks compiled with mypyc in place (docs/dev/compiled.md); rebuilt when a source changes.
# PURE_PYTHON_CHECKS=1 skips the build, and every process it starts imports the Python source.
COMPILED_SRC := $(shell sed -n 's/^    "rsi_common\.\([a-z_]*\)",$$/rsi_common\/\1.py/p' rsi_common/compiled.py)
COMPILED := build/mypyc/.built

.PHONY: demo test lint typecheck venv compiled clean

venv: $(STAMP) $(COMPILED)

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

compiled: $(COMPILED)

$(COMPILED): $(STAMP) $(COMPILED_SRC) rsi_common/compiled.py scripts/build_compiled.py
ifneq ($(PURE_PYTHON_CHECKS),1)
	$(PY) scripts/build_compiled.py
	@touch $(COMPILED)
endif

demo: $(STAMP) $(COMPILED)
	$(VENV)/bin/rsi demo --fresh

lint: $(STAMP)
	$(PY) -m ruff check .

typecheck: $(STAMP)
	$(PY) -m mypy rsi_common rsi_worker

test: $(STAMP) $(COMPILED)
	scripts/provision.sh
	$(PY) -m ruff check .
	$(PY) -m mypy rsi_common rsi_worker
# Bytecode once, read by every worker, `rsi` and `celery` process the tests start (each would
# compile the sources again under PYTHONDONTWRITEBYTECODE; docs/dev/testing.md).
	$(PY) -m compileall -q -j 0 rsi_common rsi_worker tests
	scripts/pytest.sh $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .rsi .pytest_cache .mypy_cache .ruff_cache build
	rm -f rsi_common/*.so
