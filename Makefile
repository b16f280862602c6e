# One command to set up and run the main job, one to set up and pass the tests.
#   make demo   -> virtualenv, install, train R2D2 on CartPole-v1 with the manager, print the result
#   make test   -> virtualenv, install, run the whole test suite (learning tests included)
#   make lint   -> ruff check and ruff format --check (CI runs it too)
#   make bench  -> a quick pass over every benchmark (benchmarks/run_all.py)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo demo-single test test-fast bench lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test,atari,ray]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/cartpole.py

demo-single: $(STAMP)
	$(BIN)/python examples/cartpole_single.py

test: $(STAMP)
	$(BIN)/python -m pytest -n 2

test-fast: $(STAMP)
	$(BIN)/python -m pytest -n 2 -m "not slow"

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

lint: $(STAMP)
	$(BIN)/ruff check r2d2_agent tests examples benchmarks
	$(BIN)/ruff format --check r2d2_agent tests examples benchmarks

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache
