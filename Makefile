# Everything bootstraps a local virtual environment from nothing but python3 and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two stamps in one environment: the core alone (what `tether demo` and the CLI on SQLite need:
# the package and its six dependencies, ~55 MB), and everything the tests, lint and bench use
# (the extras: PostgreSQL, serve, the agent frameworks, Playwright; ~630 MB). Either may come first.
CORE := $(VENV)/.core
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(CORE): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $(CORE)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(CORE)
	$(BIN)/tether demo

# Four test processes on two cores: the crash, worker and serve tests mostly wait (subprocesses,
# PostgreSQL, sockets). worksteal hands a long test's neighbours to whichever process is free.
# tests/_prepare.py first: Debian's chromium, the Agents SDK's sdist and a virtualenv of the dependency
# floors (the core's and its extras') are test dependencies too, installed here with the rest rather
# than inside the suite's own time.
#
# Bytecode is cached even where the environment says not to (PYTHONDONTWRITEBYTECODE): the suite starts
# four test processes and dozens of Python subprocesses (crash tests, the kit on the floors, the SDK's
# tests, the benchmarks), and without the cache each compiles tether, and pytest rewrites every test
# module and plugin, again (18 s of a test process's 25 s start against 7.5 s with it).
test: $(STAMP)
	$(BIN)/python -m tests._prepare
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -n 4 --dist worksteal

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/store.py
	$(BIN)/python bench/calls.py
	$(BIN)/python bench/workers.py
	$(BIN)/python bench/timetravel.py
	$(BIN)/python bench/conversation.py
	$(BIN)/python bench/peers.py
	$(BIN)/python bench/task_reads.py
	$(BIN)/python bench/postgres.py
	$(BIN)/python bench/async_tasks.py
	$(BIN)/python bench/serve.py
	$(BIN)/python bench/langgraph_saver.py
	$(BIN)/python bench/adk.py

clean:
	rm -rf $(VENV) tether.db tether.db-wal tether.db-shm tether.db-lock .pytest_cache
