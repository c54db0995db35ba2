# The README's two commands: `make demo` runs the main job, `make test` runs the checks.
# Both set up what they need, idempotently, in .venv.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m pipeline.replay audio_fixtures/ --rounds 2 --limit 4

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test: lint
	$(VENV)/bin/pytest -q

bench: $(STAMP)
	$(PY) scripts/bench_core.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
