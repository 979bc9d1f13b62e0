# Everything bootstraps a local virtual environment from nothing but python3 and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tether demo

# Four test processes on two cores: the crash, worker and serve tests mostly wait (subprocesses,
# PostgreSQL, sockets). worksteal hands a long test's neighbours to whichever process is free.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 4 --dist worksteal

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
