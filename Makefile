# Two commands do all setup on a fresh machine with Python >= 3.11 and make:
#   make run    # the main job, end to end, on bundled data
#   make test   # lint, type-check and the whole test suite
# uv is bootstrapped into .tools/ (pinned); dependencies come from the committed uv.lock.

PYTHON ?= python3
UV_VERSION := 0.13.9
UV := .tools/bin/uv
UV_RUN := $(UV) run --frozen

.PHONY: run test lint typecheck unit unit-main unit-pure bench sync clean examples cast

$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/python -m pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"

sync: $(UV) .venv/.bytecode .venv/.src-bytecode

# Byte-compile the locked dependencies once per lock (uv does not by default), so the first
# `servesim` run does not spend seconds compiling pandas & co. (benchmarks/startup.py).
# The editable install also builds the engine's compiled core (setup.py, Cython): it is rebuilt
# whenever one of its modules changes, so tests never run a stale extension.
ENGINE_CORE := setup.py $(wildcard src/servesim/engine/*.py src/servesim/engine/*.pxd)
.venv/.bytecode: uv.lock $(ENGINE_CORE) | $(UV)
	$(UV) sync --frozen --quiet --compile-bytecode
	@touch $@

# servesim's own modules byte-compiled too, whenever one changes: Python reads a fresh .pyc even
# where PYTHONDONTWRITEBYTECODE stops it writing one, and the suite starts a few hundred
# `servesim` processes (docs lines, servers, Ray workers), each compiling 0.1 CPU-s of source.
SOURCES := $(shell find src/servesim -name '*.py')
.venv/.src-bytecode: .venv/.bytecode $(SOURCES)
	.venv/bin/python -m compileall -q src/servesim >/dev/null
	@touch $@

run: sync
	$(UV_RUN) servesim demo

examples: sync  # regenerate examples/demo (the demo's committed outputs)
	$(UV_RUN) python tools/make_examples.py

cast: sync  # record docs/demo.cast: `servesim demo` in a pty, by asciinema
	$(UV_RUN) asciinema rec --overwrite --quiet --cols 110 --rows 34 \
		-c "$(UV_RUN) servesim demo --out $${TMPDIR:-/tmp}/servesim-demo-cast" docs/demo.cast

lint: sync
	$(UV_RUN) ruff check src tests benchmarks
	$(UV_RUN) ruff format --check src tests benchmarks
	$(UV_RUN) lint-imports

typecheck: sync
	$(UV_RUN) mypy src

# --durations: the slowest tests are printed, so the suite's time stays visible as it grows
# (budget: `make test` in 12 minutes on a 2-core machine that is busy with other work).
# Three workers on two cores: a third of the suite's time is spent waiting (servers, Ray and
# browsers starting, streams at the emulator's pace), which a third worker fills.
# The engine's oracle and fast == naive tests run a second time, on the pure-Python reference
# core, beside the main pass rather than after it: it fills the cores while the main pass waits
# and its long tests finish one by one (each pass's output is printed whole when it ends: -O).
TEST_WORKERS ?= 3
unit: sync
	$(MAKE) --no-print-directory -j2 -Otarget unit-main unit-pure

unit-main: sync  # not under uv run: Ray would start its workers through uv
	.venv/bin/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=25

unit-pure: sync  # the engine's tests on the pure-Python reference core
	SERVESIM_PURE_PYTHON=1 .venv/bin/python -m pytest -n 2 --durations=10 tests/engine

# The type check (a minute on one core) runs beside the tests, not before them.
test: lint
	$(MAKE) --no-print-directory -j3 -Otarget typecheck unit-main unit-pure

bench: sync
	$(UV_RUN) python benchmarks/engine_speed.py
	$(UV_RUN) python benchmarks/trace_load.py
	$(UV_RUN) python benchmarks/tuning_speed.py

clean:
	rm -rf .tools .venv .pytest_cache .mypy_cache .ruff_cache
